package durabletest

import (
	"sync"
	"testing"

	"github.com/hotcount/hotcount/clock"
)

var (
	memoMu sync.Mutex
	memo   = map[*testing.T]map[string]any{}
)

// Clock returns the fake clock of test t, the same one on every call. An
// open function passed to Run must give it to the backend as its clock.
func Clock(t *testing.T) *clock.Fake {
	return Memo(t, "clock", func() any { return clock.NewFake() }).(*clock.Fake)
}

// Memo returns the value stored for (t, name), making it with mk on the
// first call. Open functions use it so that a second open in the same test
// reaches the same storage (a data dir, a database schema).
func Memo(t *testing.T, name string, mk func() any) any {
	memoMu.Lock()
	m, ok := memo[t]
	if !ok {
		m = map[string]any{}
		memo[t] = m
		t.Cleanup(func() {
			memoMu.Lock()
			delete(memo, t)
			memoMu.Unlock()
		})
	}
	v, ok := m[name]
	memoMu.Unlock()
	if ok {
		return v
	}
	v = mk() // outside the lock: mk may call Memo or t.Cleanup
	memoMu.Lock()
	defer memoMu.Unlock()
	if old, ok := memo[t][name]; ok {
		return old
	}
	memo[t][name] = v
	return v
}
