package testenv

import (
	"fmt"
	"testing"
)

// Tries is how many times Retry tries before it gives up.
const Tries = 3

// Retry runs a test whose proof depends on something that may not happen
// on a given run, and tries again when it did not:
//
//   - a fault that did not happen: a reply that is dropped only if a
//     command is in flight at that moment, a pause that ends before the
//     command that should meet it is sent;
//   - a run that a busy machine made inconclusive: a timeout leaves an
//     increment whose outcome is unknown, so an exact total cannot be
//     asserted.
//
// Each try runs as a subtest of t, named "try1", "try2", …, so that what it
// starts (nodes, proxies, clients, cleanups, leak checks) ends with it. try
// injects the fault or runs the load, checks the data as always (failing
// its t on wrong data), and returns nil if the run proved what it is for,
// or an error saying why it did not. Retry logs every try; it stops at the
// first try that proved its case, or that failed. If no try in tries did,
// it skips t with the last reason: the run proved nothing, but it never
// fails the suite for that.
func Retry(t *testing.T, tries int, try func(t *testing.T) error) {
	t.Helper()
	tries = max(tries, 1)
	var missed error
	for i := 1; i <= tries; i++ {
		var (
			err  error
			done bool
		)
		ok := t.Run(fmt.Sprintf("try%d", i), func(t *testing.T) {
			err = try(t)
			done = true
		})
		switch {
		case !ok:
			t.Logf("try %d of %d failed", i, tries)
			return
		case !done:
			t.Skipf("try %d of %d skipped itself", i, tries)
		case err == nil:
			t.Logf("try %d of %d proved its case and every check passed", i, tries)
			return
		}
		missed = err
		t.Logf("try %d of %d proved nothing: %v", i, tries, err)
	}
	t.Skipf("no try of %d proved its case, so this run proved nothing (every check that ran passed); last reason: %v", tries, missed)
}
