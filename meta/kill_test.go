package meta_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcount/hotcount/meta"
)

// Environment of a fold child process.
const (
	childEnv = "HOTCOUNT_FOLD_CHILD" // the step to die at, "step#nth"
	seedsEnv = "HOTCOUNT_FOLD_SEEDS" // cluster seeds
	keyEnv   = "HOTCOUNT_FOLD_KEY"   // the counter to shrink
)

// childCfg is the Manager config of the child and of the parent that
// resumes after it.
var childCfg = meta.Config{TTL: 20 * time.Millisecond, Margin: 20 * time.Millisecond}

// TestFoldChild is the child process of TestFoldKilled: it shrinks the
// counter to 2 labels and kills itself with SIGKILL at the named step.
func TestFoldChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("runs only as the child process of TestFoldKilled")
	}
	step, nth := spec, 1
	if i := strings.IndexByte(spec, '#'); i >= 0 {
		step = spec[:i]
		fmt.Sscan(spec[i+1:], &nth)
	}
	s := newRedis(t)
	cfg := childCfg
	seen := 0
	cfg.OnStep = func(_ string, st meta.Step) {
		if string(st) == step {
			if seen++; seen == nth {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	m := newManager(t, s, cfg)
	if err := m.Resize(ctxT(t), os.Getenv(keyEnv), 2); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("fold finished without reaching step %s", spec)
}

// TestFoldKilled kills a fold (a real process, SIGKILL) at each of its
// steps and resumes it: the total is exact every time.
func TestFoldKilled(t *testing.T) {
	ctx := ctxT(t)
	s := newRedis(t)
	for _, spec := range []string{"stopped", "waited", "out", "in", "out#3", "in#4", "retired"} {
		t.Run(spec, func(t *testing.T) {
			key := "killed:" + spec
			parent := childCfg
			parent.DefaultN = func(string) int { return 6 }
			m := newManager(t, s, parent)
			w, _, err := m.Labels(ctx, key) // pins 6 placed labels
			if err != nil {
				t.Fatal(err)
			}
			total := fill(t, s, key, w, 1<<60) // beyond a double's 53 bits

			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFoldChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+spec, seedsEnv+"="+strings.Join(seeds(), " "), keyEnv+"="+key)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
			}
			mt, err := m.Meta(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if spec != "retired" && len(mt.Folds) == 0 {
				t.Fatalf("child died at %s but no fold is journaled: %+v", spec, mt)
			}
			// Killed between fold-out and fold-in, the value is only in the
			// marker: the sum is low until Resume.
			if low := sum(t, s, key, mt.Read); spec == "out" && low >= total {
				t.Fatalf("killed after fold-out, yet the sum is %d of %d", low, total)
			}
			if err := m.Resume(ctx, key); err != nil {
				t.Fatal(err)
			}
			mt = settled(t, m, key, 2)
			if got := sum(t, s, key, mt.Read); got != total {
				t.Fatalf("total after kill at %s and resume = %d, want %d", spec, got, total)
			}
			if got := sum(t, s, key, w); got != total {
				t.Fatalf("all six labels sum to %d, want %d (duplicated or lost)", got, total)
			}
		})
	}
}
