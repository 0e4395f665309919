package proxy

import (
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount"
)

// budget is the input memory all connections hold beyond their first
// read buffer (Config.MemoryBudget). A connection reserves what it grows
// its read buffer by before it grows it, and gives it back when it
// shrinks the buffer or closes. A reservation that does not fit waits:
// the connection stops reading, so its client's sends block (TCP
// backpressure), until others give memory back or Timeout passes; then
// the connection is answered an error and closed. What an open
// transaction keeps of its queued commands (the keyless ones held before
// its first key, and the copy) is charged too, without waiting (see
// txState.hold and txState.keep), and given back at EXEC, DISCARD or
// close.
type budget struct {
	limit int64
	used  atomic.Int64
}

// budgetPoll is how often a waiting reservation looks again.
const budgetPoll = 2 * time.Millisecond

// tryReserve takes n bytes when they fit.
func (b *budget) tryReserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// reserve takes n bytes, waiting up to wait for them; stop ends the wait
// early (the connection or the server ends).
func (b *budget) reserve(n int64, wait time.Duration, stop func() bool, st *stats) bool {
	if b.tryReserve(n) {
		return true
	}
	st.budgetWaits.Add(1)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && !stop() {
		time.Sleep(budgetPoll)
		if b.tryReserve(n) {
			return true
		}
	}
	st.budgetCloses.Add(1)
	return false
}

func (b *budget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// errBudget closes a connection whose input did not fit the memory
// budget.
const errBudget = "ERR hotcount proxy: input memory budget exhausted (resp_memory_budget); closing the connection"

// errQueryBuffer closes a connection whose unparsed input passed
// QueryBufferLimit (Redis closes such a client without a reply).
const errQueryBuffer = "ERR Protocol error: query buffer limit reached (resp_query_buffer_limit)"

func init() {
	metrics = append(metrics,
		gaugeOf("hotcount_proxy_input_bytes", "Input held by client connections beyond their first read buffer, with what open transactions keep of their queued commands, counted against resp_memory_budget.",
			func(s *Server, _ *hotcount.BufferStats) float64 { return float64(s.input.used.Load()) }),
		gaugeOf("hotcount_proxy_input_budget_bytes", "The input memory budget (resp_memory_budget).",
			func(s *Server, _ *hotcount.BufferStats) float64 { return float64(s.input.limit) }),
		counterOf("hotcount_proxy_input_budget_waits_total", "Reads that waited for the input memory budget.",
			func(st *stats) *atomic.Int64 { return &st.budgetWaits }),
		counterOf("hotcount_proxy_input_budget_closes_total", "Connections closed because the input memory budget had no room in time.",
			func(st *stats) *atomic.Int64 { return &st.budgetCloses }),
	)
}
