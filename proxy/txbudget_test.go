package proxy_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// The proxy keeps a copy of the commands queued in a transaction, to send
// them again if the slot moves. That copy is charged to the memory budget
// (resp_memory_budget) and bounded per transaction by the query buffer
// limit; a transaction whose copy does not fit runs without it.

// txBudgetConfig is a proxy with small limits: a transaction's copy is
// kept up to 2 MiB, within a budget of 8 MiB.
var txBudgetConfig = proxy.Config{MaxBulkLen: 1 << 20, QueryBufferLimit: 2 << 20, MemoryBudget: 8 << 20}

// txValue is a value above the size whose read buffer the proxy hands
// over rather than copies, so that a connection's read buffer is back to
// its first 16 KiB (held by no budget) after each command.
var txValue = strings.Repeat("v", 300<<10)

// inputBytes returns the proxy's hotcount_input_bytes (INFO memory): what
// it counts against its memory budget.
func inputBytes(t *testing.T, r *rawConn) int64 {
	t.Helper()
	info := r.do("INFO", "memory")
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "hotcount_input_bytes:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no hotcount_input_bytes in INFO memory: %q", info)
	return 0
}

// heapInUse is the heap held after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestTransactionCopyBudget: the copy of a transaction's queued commands
// is counted in hotcount_input_bytes while the transaction is open and
// given back at EXEC, DISCARD and when the client hangs up; a transaction
// that queues more than the budget holds (each command well within the
// per-connection limits) runs whole, and the proxy's heap does not grow by
// what it queued. Before, the copy was counted nowhere: the input counted
// stayed 0 while a 23 MiB transaction grew the heap by as much behind an
// 8 MiB budget.
func TestTransactionCopyBudget(t *testing.T) {
	e := startProxy(t, nil, txBudgetConfig)
	p := uniq(t)
	key := func(i int) string { return "{" + p + "}k" + strconv.Itoa(i) }
	info := dialRaw(t, e.addr)
	// queue opens a transaction on a new connection and queues n SETs.
	queue := func(n int) *rawConn {
		t.Helper()
		r := dialRaw(t, e.addr)
		if got := r.do("MULTI"); got != "+OK\r\n" {
			t.Fatalf("MULTI: %q", got)
		}
		for i := 0; i < n; i++ {
			if got := r.do("SET", key(i), txValue); got != "+QUEUED\r\n" {
				t.Fatalf("SET %d: %q", i, got)
			}
		}
		return r
	}
	// settled waits until nothing is counted against the budget.
	settled := func(after string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := inputBytes(t, info)
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s the proxy still counts %d bytes of input", after, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// 80 SETs of 300 KiB: 23 MiB, about three times the budget.
	const large = 80
	budget := txBudgetConfig.MemoryBudget
	before := heapInUse()
	r := queue(large)
	grew := heapInUse() - before
	n := inputBytes(t, info)
	t.Logf("%d SETs of %d KiB queued (%d MiB, budget %d MiB): heap grew by %.1f MiB, %d bytes counted",
		large, len(txValue)>>10, large*len(txValue)>>20, budget>>20, float64(grew)/(1<<20), n)
	if grew > budget {
		t.Errorf("a transaction of %d MiB grew the proxy's heap by %.1f MiB, past its %d MiB budget", large*len(txValue)>>20, float64(grew)/(1<<20), budget>>20)
	}
	if n > budget {
		t.Errorf("the proxy counts %d bytes against a budget of %d", n, budget)
	}
	want := "*" + strconv.Itoa(large) + "\r\n" + strings.Repeat("+OK\r\n", large)
	if got := r.do("EXEC"); got != want {
		t.Fatalf("EXEC of %d SETs: %.200q", large, got)
	}
	if got := info.do("STRLEN", key(large-1)); got != ":"+strconv.Itoa(len(txValue))+"\r\n" {
		t.Fatalf("STRLEN of the last key set: %q", got)
	}
	settled("EXEC")

	const small = 5 // 1.5 MiB: within the copy's bound
	for _, end := range []string{"EXEC", "DISCARD", "close"} {
		settled("the previous transaction")
		r := queue(small)
		n := inputBytes(t, info)
		t.Logf("%d SETs of %d KiB queued: %d bytes counted", small, len(txValue)>>10, n)
		if n < small*int64(len(txValue)) {
			t.Errorf("%d SETs of %d bytes queued in an open transaction: the proxy counts %d bytes against its budget", small, len(txValue), n)
		}
		switch end {
		case "EXEC":
			want := "*" + strconv.Itoa(small) + "\r\n" + strings.Repeat("+OK\r\n", small)
			if got := r.do("EXEC"); got != want {
				t.Fatalf("EXEC: %q", got)
			}
		case "DISCARD":
			if got := r.do("DISCARD"); got != "+OK\r\n" {
				t.Fatalf("DISCARD: %q", got)
			}
		case "close":
			r.nc.Close()
		}
		settled(end)
	}
}

// TestTransactionCopyGivesWay: a transaction whose copy may fill the whole
// budget (resp_query_buffer_limit as large as resp_memory_budget) does
// not starve its own connection: the read that finds no room drops the
// copy instead of waiting for memory the connection itself holds, and the
// transaction runs whole, none of its input left counted. Charged
// without giving way, the copy made the 900 KiB SET wait out the timeout
// and its connection close (input memory budget exhausted).
func TestTransactionCopyGivesWay(t *testing.T) {
	cfg := txBudgetConfig
	cfg.QueryBufferLimit = int(cfg.MemoryBudget)
	cfg.Timeout = 2 * time.Second
	e := startProxy(t, nil, cfg)
	p := uniq(t)
	r, info := dialRaw(t, e.addr), dialRaw(t, e.addr)
	// SETs of 100 KiB fill the copy until less than 600 KiB of the
	// budget is left; then one of 900 KiB needs the connection's read
	// buffer to grow past what is left.
	small, large := strings.Repeat("s", 100<<10), strings.Repeat("l", 900<<10)
	if got := r.do("MULTI"); got != "+OK\r\n" {
		t.Fatalf("MULTI: %q", got)
	}
	sets, counted := 0, int64(0)
	for ; cfg.MemoryBudget-counted >= 600<<10; sets++ {
		if sets == 200 {
			t.Fatalf("%d SETs of 100 KiB queued: the proxy counts %d bytes", sets, counted)
		}
		if got := r.do("SET", "{"+p+"}k"+strconv.Itoa(sets), small); got != "+QUEUED\r\n" {
			t.Fatalf("SET %d: %.100q", sets, got)
		}
		counted = inputBytes(t, info)
	}
	t.Logf("%d SETs of 100 KiB queued: %d bytes counted (budget %d); then one of 900 KiB", sets, counted, cfg.MemoryBudget)
	if got := r.do("SET", "{"+p+"}k"+strconv.Itoa(sets), large); got != "+QUEUED\r\n" {
		t.Fatalf("the SET of 900 KiB: %.100q", got)
	}
	sets++
	want := "*" + strconv.Itoa(sets) + "\r\n" + strings.Repeat("+OK\r\n", sets)
	if got := r.do("EXEC"); got != want {
		t.Fatalf("EXEC of %d SETs: %.200q", sets, got)
	}
	if n := inputBytes(t, info); n != 0 {
		t.Fatalf("after EXEC the proxy counts %d bytes of input", n)
	}
}

// TestTransactionCopyDroppedAcrossSlotMove: a transaction whose copy was
// dropped (more than the query buffer limit queued) is not sent again when
// its slot moves: the command queued after the move is answered TRYAGAIN
// and EXEC EXECABORT, or EXEC itself TRYAGAIN, as before the proxy kept a
// copy; none of it ran, nothing stays counted against the budget, and the
// client's retry succeeds. A transaction within the bound still follows
// the move. Before, the copy was kept whatever its size.
func TestTransactionCopyDroppedAcrossSlotMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := startProxyOn(t, cl, nil, txBudgetConfig)
	p := uniq(t)
	key := "{" + p + "}k"
	info := dialRaw(t, e.addr)
	n := 0 // key's value
	incr := func() string { n++; return ":" + strconv.Itoa(n) + "\r\n" }
	// queue opens a transaction and queues INCR key and sets SETs of
	// txValue (8: 2.4 MiB, past the copy's bound of 2 MiB).
	queue := func(r *rawConn, sets int) {
		t.Helper()
		for i, cmd := range append([][]string{{"MULTI"}, {"INCR", key}}, make([][]string, sets)...) {
			want := "+QUEUED\r\n"
			if i == 0 {
				want = "+OK\r\n"
			} else if cmd == nil {
				cmd = []string{"SET", key + strconv.Itoa(i), txValue}
			}
			if got := r.do(cmd...); got != want {
				t.Fatalf("%.40q: %q, want %q", cmd, got, want)
			}
		}
	}
	// retry checks that the transaction ran none of its commands and that
	// the client's retry goes to the new owner.
	retry := func(r *rawConn) {
		t.Helper()
		if got := r.do("EXISTS", key+"2"); got != ":0\r\n" {
			t.Fatalf("a SET of the aborted transaction ran: EXISTS answered %q", got)
		}
		want := "*1\r\n" + incr()
		for _, cmd := range [][]string{{"MULTI"}, {"INCR", key}} {
			r.do(cmd...)
		}
		if got := r.do("EXEC"); got != want {
			t.Fatalf("the retried transaction: EXEC answered %q, want %q", got, want)
		}
		if c := inputBytes(t, info); c != 0 {
			t.Fatalf("after the transactions the proxy counts %d bytes of input", c)
		}
	}
	const tryAgain = "-TRYAGAIN hotcount proxy: the cluster is moving this slot; try again\r\n"

	t.Run("moved while queued", func(t *testing.T) {
		r := dialRaw(t, e.addr)
		queue(r, 8)
		moveKeySlot(t, ctx, ps, key)
		if got := r.do("INCR", key); got != tryAgain {
			t.Fatalf("INCR queued after the move: %q, want %q", got, tryAgain)
		}
		if got := r.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
			t.Fatalf("EXEC: %q, want EXECABORT", got)
		}
		retry(r)
	})

	t.Run("moved before EXEC", func(t *testing.T) {
		r := dialRaw(t, e.addr)
		queue(r, 8)
		moveKeySlot(t, ctx, ps, key)
		if got := r.do("EXEC"); got != tryAgain {
			t.Fatalf("EXEC: %q, want %q", got, tryAgain)
		}
		retry(r)
	})

	t.Run("within the bound", func(t *testing.T) {
		r := dialRaw(t, e.addr)
		queue(r, 2)
		moveKeySlot(t, ctx, ps, key)
		want := "*3\r\n" + incr() + "+OK\r\n+OK\r\n"
		if got := r.do("EXEC"); got != want {
			t.Fatalf("EXEC: %q, want %q", got, want)
		}
		if c := inputBytes(t, info); c != 0 {
			t.Fatalf("after EXEC the proxy counts %d bytes of input", c)
		}
	})
}
