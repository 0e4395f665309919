package testenv

import (
	"fmt"
	"testing"
)

// FaultTries is how many times RetryFault tries a fault before it gives up.
const FaultTries = 3

// RetryFault runs a fault test whose fault may not happen on a given run:
// a reply that is dropped only if a command is in flight at that moment, a
// pause that ends before the command that should meet it is sent, a timeout
// that a busy machine turns into a slow success.
//
// Each try runs as a subtest of t, named "try1", "try2", …, so that what it
// starts (nodes, proxies, clients, cleanups, leak checks) ends with it.
// try injects the fault, checks the data as always (failing its t on wrong
// data), and returns nil if the fault happened, or an error saying why it
// did not. RetryFault logs every try; it stops at the first try that saw
// its fault, or that failed. If no try in tries saw the fault, it skips t
// with the last reason: the run proved nothing about the fault, but it
// never fails the suite for that.
func RetryFault(t *testing.T, tries int, try func(t *testing.T) error) {
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
			t.Logf("try %d of %d: the fault happened and every check passed", i, tries)
			return
		}
		missed = err
		t.Logf("try %d of %d: the fault did not happen: %v", i, tries, err)
	}
	t.Skipf("the fault did not happen in %d tries, so this run proved nothing about it (every check that ran passed); last reason: %v", tries, missed)
}
