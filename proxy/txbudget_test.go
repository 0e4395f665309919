package proxy_test

import (
	"context"
	"fmt"
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

// Keyless commands queued before a transaction's first keyed command are
// held by the proxy (sent nowhere yet) until a keyed command binds the
// transaction to a slot, or until EXEC. They are charged to the memory
// budget too, at most the query buffer limit per transaction; they cannot
// be dropped, so one that does not fit is refused as Redis refuses a
// command it has no memory to queue: answered an error, and EXEC answers
// EXECABORT.

// txHeldRefused is the start of the error a held command that does not
// fit is answered.
const txHeldRefused = "-ERR hotcount proxy: no room to queue the command"

// TestTransactionHeldBudget: keyless commands held in an open transaction
// are counted in hotcount_input_bytes, and given back at EXEC, DISCARD,
// when the client hangs up, and when a keyed command sends them (they are
// then the transaction's copy, given back at EXEC). Before, they were
// counted nowhere: held ECHOs read 0.
func TestTransactionHeldBudget(t *testing.T) {
	e := startProxy(t, nil, txBudgetConfig)
	p := uniq(t)
	info := dialRaw(t, e.addr)
	const held = 5 // ECHOs of 300 KiB, 1.5 MiB: within the bound
	echo := "$" + strconv.Itoa(len(txValue)) + "\r\n" + txValue + "\r\n"
	for _, end := range []string{"EXEC", "DISCARD", "close", "keyed"} {
		settledInput(t, info, "the previous transaction")
		r := dialRaw(t, e.addr)
		if got := r.do("MULTI"); got != "+OK\r\n" {
			t.Fatalf("MULTI: %q", got)
		}
		for i := 0; i < held; i++ {
			if got := r.do("ECHO", txValue); got != "+QUEUED\r\n" {
				t.Fatalf("ECHO %d: %.100q", i, got)
			}
		}
		n := inputBytes(t, info)
		t.Logf("%d ECHOs of %d KiB held (then %s): %d bytes counted", held, len(txValue)>>10, end, n)
		if n < held*int64(len(txValue)) {
			t.Errorf("%d ECHOs of %d bytes held in an open transaction: the proxy counts %d bytes against its budget", held, len(txValue), n)
		}
		switch end {
		case "EXEC":
			want := "*" + strconv.Itoa(held) + "\r\n" + strings.Repeat(echo, held)
			if got := r.do("EXEC"); got != want {
				t.Fatalf("EXEC: %.200q", got)
			}
		case "DISCARD":
			if got := r.do("DISCARD"); got != "+OK\r\n" {
				t.Fatalf("DISCARD: %q", got)
			}
		case "close":
			r.nc.Close()
		case "keyed":
			if got := r.do("SET", "{"+p+"}k", "v"); got != "+QUEUED\r\n" {
				t.Fatalf("SET: %q", got)
			}
			if n := inputBytes(t, info); n < held*int64(len(txValue)) {
				t.Errorf("held ECHOs sent with the first keyed command: the transaction's copy counts %d bytes", n)
			}
			want := "*" + strconv.Itoa(held+1) + "\r\n" + strings.Repeat(echo, held) + "+OK\r\n"
			if got := r.do("EXEC"); got != want {
				t.Fatalf("EXEC: %.200q", got)
			}
		}
		settledInput(t, info, end)
	}
}

// TestTransactionHeldRefused: a transaction that holds more keyless
// commands than the bound (the query buffer limit), or than the budget
// has room for, has the command that does not fit answered an error and
// EXEC answered EXECABORT, as Redis does for a command it has no memory to
// queue; the connection stays open and nothing stays counted. A
// transaction of 80 ECHOs of 300 KiB (23 MiB) behind an 8 MiB budget does
// not grow the proxy's heap past the budget. Before, every ECHO was held
// uncounted and EXEC ran them all.
func TestTransactionHeldRefused(t *testing.T) {
	e := startProxy(t, nil, txBudgetConfig)
	info := dialRaw(t, e.addr)
	budget := txBudgetConfig.MemoryBudget
	// fill opens a transaction on r and queues up to n ECHOs, all
	// answered QUEUED but the first that does not fit; it returns the
	// index of that one, or -1.
	fill := func(t *testing.T, r *rawConn, n int) int {
		t.Helper()
		if got := r.do("MULTI"); got != "+OK\r\n" {
			t.Fatalf("MULTI: %q", got)
		}
		refused := -1
		for i := 0; i < n; i++ {
			got := r.do("ECHO", txValue)
			switch {
			case refused < 0 && strings.HasPrefix(got, txHeldRefused):
				refused = i
			case got != "+QUEUED\r\n":
				t.Fatalf("ECHO %d (the first refused: %d): %.200q", i, refused, got)
			}
		}
		return refused
	}
	// aborted checks that r's EXEC aborts and r serves on.
	aborted := func(t *testing.T, r *rawConn) {
		t.Helper()
		if got := r.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
			t.Fatalf("EXEC: %.200q, want EXECABORT", got)
		}
		if got := r.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING after the aborted transaction: %q", got)
		}
	}

	t.Run("past the bound", func(t *testing.T) {
		// 80 ECHOs of 300 KiB: 23 MiB, about three times the budget.
		const large = 80
		before := heapInUse()
		r := dialRaw(t, e.addr)
		refused := fill(t, r, large)
		grew := heapInUse() - before
		n := inputBytes(t, info)
		t.Logf("%d ECHOs of %d KiB queued (%d MiB, budget %d MiB): ECHO %d refused, heap grew by %.1f MiB, %d bytes counted",
			large, len(txValue)>>10, large*len(txValue)>>20, budget>>20, refused, float64(grew)/(1<<20), n)
		// The bound is 2 MiB: the 7th ECHO passes it.
		if refused != 6 {
			t.Errorf("the first ECHO refused is %d, want 6 (2 MiB held per transaction)", refused)
		}
		if grew > budget {
			t.Errorf("a transaction of %d MiB grew the proxy's heap by %.1f MiB, past its %d MiB budget", large*len(txValue)>>20, float64(grew)/(1<<20), budget>>20)
		}
		if n > budget {
			t.Errorf("the proxy counts %d bytes against a budget of %d", n, budget)
		}
		aborted(t, r)
		settledInput(t, info, "EXECABORT")
	})

	t.Run("past the budget", func(t *testing.T) {
		// Four transactions hold 1.8 MiB each, 7.2 MiB of the 8 MiB;
		// a fifth runs out of room.
		var full []*rawConn
		for i := 0; i < 4; i++ {
			r := dialRaw(t, e.addr)
			if refused := fill(t, r, 6); refused >= 0 {
				t.Fatalf("transaction %d: ECHO %d refused, with %d bytes counted", i, refused, inputBytes(t, info))
			}
			full = append(full, r)
		}
		r := dialRaw(t, e.addr)
		refused := fill(t, r, 6)
		t.Logf("four transactions of 6 ECHOs held: the fifth's ECHO %d refused", refused)
		if refused < 0 {
			t.Fatalf("6 ECHOs of %d KiB held after 24: none refused, %d bytes counted against a budget of %d", len(txValue)>>10, inputBytes(t, info), budget)
		}
		aborted(t, r)
		echo := "$" + strconv.Itoa(len(txValue)) + "\r\n" + txValue + "\r\n"
		for _, r := range full {
			if got := r.do("EXEC"); got != "*6\r\n"+strings.Repeat(echo, 6) {
				t.Fatalf("EXEC of a transaction that fit: %.200q", got)
			}
		}
		settledInput(t, info, "the transactions")
	})
}

// TestTransactionHeldGivesWay: a transaction whose held commands may fill
// the whole budget (resp_query_buffer_limit as large as
// resp_memory_budget) does not starve its own connection: the read that
// finds no room drops them with the transaction, and the command read is
// answered the error and EXEC EXECABORT, at once, the connection open and
// nothing left counted. Held without giving way, the 900 KiB ECHO waited
// out the timeout and its connection closed.
func TestTransactionHeldGivesWay(t *testing.T) {
	cfg := txBudgetConfig
	cfg.QueryBufferLimit = int(cfg.MemoryBudget)
	cfg.Timeout = 2 * time.Second
	e := startProxy(t, nil, cfg)
	r, info := dialRaw(t, e.addr), dialRaw(t, e.addr)
	small, large := strings.Repeat("s", 100<<10), strings.Repeat("l", 900<<10)
	if got := r.do("MULTI"); got != "+OK\r\n" {
		t.Fatalf("MULTI: %q", got)
	}
	echoes, counted := 0, int64(0)
	for ; cfg.MemoryBudget-counted >= 600<<10; echoes++ {
		if echoes == 200 {
			t.Fatalf("%d ECHOs of 100 KiB held: the proxy counts %d bytes", echoes, counted)
		}
		if got := r.do("ECHO", small); got != "+QUEUED\r\n" {
			t.Fatalf("ECHO %d: %.100q", echoes, got)
		}
		counted = inputBytes(t, info)
	}
	t.Logf("%d ECHOs of 100 KiB held: %d bytes counted (budget %d); then one of 900 KiB", echoes, counted, cfg.MemoryBudget)
	start := time.Now()
	if got := r.do("ECHO", large); !strings.HasPrefix(got, txHeldRefused) {
		t.Fatalf("the ECHO of 900 KiB: %.100q", got)
	}
	if waited := time.Since(start); waited >= cfg.Timeout {
		t.Errorf("the ECHO of 900 KiB was answered after %v, the timeout", waited)
	}
	if got := r.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
		t.Fatalf("EXEC: %.200q, want EXECABORT", got)
	}
	settledInput(t, info, "EXECABORT")
	if got := r.do("ECHO", large); got != "$"+strconv.Itoa(len(large))+"\r\n"+large+"\r\n" {
		t.Fatalf("ECHO of 900 KiB after the transaction: %.100q", got)
	}
}

// settledInput waits until the proxy counts nothing against its budget.
func settledInput(t *testing.T, info *rawConn, after string) {
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

// TestTransactionBudgetGivenBack: whatever ends a transaction, what it
// kept of its queued commands (the keyless ones held, the copy) is given
// back once: hotcount_input_bytes counts them while the transaction is
// open and is back to 0 after EXEC, an aborted EXEC, DISCARD, RESET, the
// client hanging up, and with nested MULTI, WATCH, HELLO refused inside
// MULTI or a transaction of keyless commands only.
func TestTransactionBudgetGivenBack(t *testing.T) {
	e := startProxy(t, nil, txBudgetConfig)
	p := uniq(t)
	info := dialRaw(t, e.addr)
	set := []string{"SET", "{" + p + "}a", txValue}
	echo := []string{"ECHO", txValue}
	ok, queued := "+OK", "+QUEUED"
	type step struct {
		cmd  []string
		want string // the reply's start
	}
	for _, tc := range []struct {
		name  string
		steps []step // the last ends the transaction
		close bool   // the client then hangs up instead
		// none is set when the transaction keeps nothing of what it queued: a
		// transaction that WATCHes is never sent again and keeps no
		// copy, and one that is to abort queues nothing more.
		none bool
	}{
		{"EXEC", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"EXEC"}, "*1"}}, false, false},
		{"EXEC aborted", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"NOSUCHCOMMAND"}, "-ERR"}, {[]string{"EXEC"}, "-EXECABORT"}}, false, false},
		{"EXEC aborted by arity", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"SET", "{" + p + "}a"}, "-ERR"}, {[]string{"EXEC"}, "-EXECABORT"}}, false, false},
		{"DISCARD", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"DISCARD"}, ok}}, false, false},
		{"RESET", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"RESET"}, "+RESET"}}, false, false},
		{"close", []step{{[]string{"MULTI"}, ok}, {set, queued}}, true, false},
		{"nested MULTI", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"MULTI"}, "-ERR MULTI calls can not be nested"}, {[]string{"EXEC"}, "*1"}}, false, false},
		{"HELLO inside MULTI", []step{{[]string{"MULTI"}, ok}, {set, queued}, {[]string{"HELLO", "3"}, "-ERR"}, {[]string{"EXEC"}, "-EXECABORT"}}, false, false},
		{"WATCH", []step{{[]string{"WATCH", "{" + p + "}a"}, ok}, {[]string{"MULTI"}, ok}, {set, queued}, {[]string{"EXEC"}, "*1"}}, false, true},
		{"aborted, then keyed", []step{{[]string{"MULTI"}, ok}, {[]string{"NOSUCHCOMMAND"}, "-ERR"}, {set, queued}, {[]string{"EXEC"}, "-EXECABORT"}}, false, true},
		{"held EXEC", []step{{[]string{"MULTI"}, ok}, {echo, queued}, {[]string{"EXEC"}, "*1"}}, false, false},
		{"held DISCARD", []step{{[]string{"MULTI"}, ok}, {echo, queued}, {[]string{"DISCARD"}, ok}}, false, false},
		{"held RESET", []step{{[]string{"MULTI"}, ok}, {echo, queued}, {[]string{"RESET"}, "+RESET"}}, false, false},
		{"held close", []step{{[]string{"MULTI"}, ok}, {echo, queued}}, true, false},
		{"held then keyed EXEC", []step{{[]string{"MULTI"}, ok}, {echo, queued}, {set, queued}, {[]string{"EXEC"}, "*2"}}, false, false},
		{"held then keyed close", []step{{[]string{"MULTI"}, ok}, {echo, queued}, {set, queued}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, e.addr)
			counted := int64(0)
			for i, s := range tc.steps {
				if got := r.do(s.cmd...); !strings.HasPrefix(got, s.want) {
					t.Fatalf("%.40q: %.100q, want %q...", s.cmd, got, s.want)
				}
				if tc.none && i < len(tc.steps)-1 {
					// While it is open, only the input being read is
					// counted, and only for a moment.
					settledInput(t, info, fmt.Sprintf("%.40q, the transaction open", s.cmd))
					continue
				}
				counted = max(counted, inputBytes(t, info))
			}
			if !tc.none && counted < int64(len(txValue)) {
				t.Fatalf("the open transaction was counted %d bytes, less than its %d bytes queued", counted, len(txValue))
			}
			if tc.close {
				r.nc.Close()
			}
			settledInput(t, info, tc.name)
		})
	}
}
