package hotcount_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store/mem"
)

// The writer child: this test binary re-executed with durChildEnv set to
// "sqlite:PATH" or "postgres:SCHEMA". It sends durable increments with ids
// from durChildWorkers goroutines, forever, and writes "ack ID" to stdout
// after each acknowledged one, until it is killed. It runs from init, so
// that TestMain does not start a Redis Cluster in the child: the child's
// cache is the embedded store (what must survive is the durable log).
const (
	durChildEnv     = "HOTCOUNT_DURABLE_CHILD"
	durChildWorkers = 8
	durChildKey     = "kill:counter"
	// durChildRedisEnv, when set, gives the child Redis Cluster seeds
	// (comma-separated) for its cache instead of the embedded store, and
	// durChildKeyEnv its key; its buffer then holds deltas for a second,
	// so that a kill cuts committed deltas from the cache view.
	durChildRedisEnv = "HOTCOUNT_DURABLE_CHILD_REDIS"
	durChildKeyEnv   = "HOTCOUNT_DURABLE_CHILD_KEY"
)

func init() {
	if spec := os.Getenv(durChildEnv); spec != "" {
		os.Exit(durChild(spec))
	}
}

// durChildDelta is the delta of increment i of worker w.
func durChildDelta(w, i int) int64 { return int64(1 + (w+i)%5) }

func durChildID(w, i int) string { return fmt.Sprintf("w%d-%d", w, i) }

func durChild(spec string) int {
	ctx := context.Background()
	be, err := durOpenSpec(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	cfg := hotcount.Config{Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: be}}
	key := durChildKey
	if seeds := os.Getenv(durChildRedisEnv); seeds != "" {
		cfg.Redis.Addrs, key = strings.Split(seeds, ","), os.Getenv(durChildKeyEnv)
		cfg.Defaults.FlushInterval = time.Second
	}
	c, err := hotcount.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range durChildWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if err := c.IncrID(ctx, key, durChildDelta(w, i), durChildID(w, i)); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(1)
				}
				mu.Lock()
				_, err := os.Stdout.WriteString("ack " + durChildID(w, i) + "\n")
				mu.Unlock()
				if err != nil {
					os.Exit(1)
				}
			}
		}()
	}
	wg.Wait()
	return 0
}

// durOpenSpec opens the durable store a child spec names.
func durOpenSpec(spec string) (durable.Backend, error) {
	kind, loc, _ := strings.Cut(spec, ":")
	for _, ds := range durStores() {
		if ds.name == kind {
			var be durable.Backend
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("open %s: %v", spec, r)
					}
				}()
				be = ds.open(nopTB{}, loc)
			}()
			return be, err
		}
	}
	return nil, fmt.Errorf("unknown store %q", kind)
}

// nopTB lets the child use the durStores openers outside a test.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                   {}
func (nopTB) Cleanup(func())            {}
func (nopTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (nopTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// TestDurableKilledWriter SIGKILLs a writer process in the middle of its
// load and checks that every increment it acknowledged is in the durable
// log (and is a duplicate when re-sent), and that re-sending every
// increment it may have sent counts each exactly once.
func TestDurableKilledWriter(t *testing.T) {
	const killAfter = 2000 // acknowledged increments before the kill
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			loc := ds.loc(t)
			acked, maxAcked, _ := killChild(t, "^TestDurableKilledWriter$", []string{durChildEnv + "=" + ds.name + ":" + loc}, killAfter)
			t.Logf("child killed after %d acknowledged increments (%d read before EOF)", killAfter, len(acked))

			be := ds.open(t, loc)
			var ackedSum int64
			var events []durable.Event
			for w, last := range maxAcked {
				for i := 0; i <= last; i++ {
					if acked[durChildID(w, i)] {
						ackedSum += durChildDelta(w, i)
						events = append(events, durable.Event{Key: durChildKey, Delta: durChildDelta(w, i), ID: durChildID(w, i)})
					}
				}
			}
			exact, err := be.Exact(ctx, durChildKey)
			if err != nil {
				t.Fatal(err)
			}
			if exact < ackedSum {
				t.Fatalf("exact %d < sum of acknowledged increments %d: an acknowledged increment was lost", exact, ackedSum)
			}
			// Every acknowledged id is a duplicate when re-sent.
			dup, err := be.AppendEvents(ctx, events)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range dup {
				if !d.Dup || d.Err != nil {
					t.Fatalf("acknowledged %s was not in the log", events[i].ID)
				}
			}
			// A worker sends id i+1 only after i was acknowledged, so it
			// sent ids 0..maxAcked+1. Re-send all of them through a Client.
			st, err := mem.New(mem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c := durClient(t, hotcount.Config{Store: st, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: be}})
			var sentSum int64
			var wg sync.WaitGroup
			errs := make(chan error, durChildWorkers)
			for w, last := range maxAcked {
				for i := 0; i <= last+1; i++ {
					sentSum += durChildDelta(w, i)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i <= last+1; i++ {
						if err := c.IncrID(ctx, durChildKey, durChildDelta(w, i), durChildID(w, i)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got, err := c.GetExact(ctx, durChildKey)
			if err != nil {
				t.Fatal(err)
			}
			if got.Value != sentSum {
				t.Fatalf("after re-sending every id: exact %d, want %d (sum of the distinct ids sent)", got.Value, sentSum)
			}
			t.Logf("acked sum %d, exact after kill %d (%d committed but unacknowledged), after re-send %d",
				ackedSum, exact, exact-ackedSum, got.Value)
		})
	}
}

// killChild runs this test binary as a durable writer child (run selects
// what it runs, env adds to its environment), reads the ids it
// acknowledges ("ack w<worker>-<i>" lines) and SIGKILLs it once killAfter
// were acknowledged. It returns the ids read (some after the kill, before
// EOF), the highest acknowledged i per worker (-1: none) and the time of
// the kill.
func killChild(t *testing.T, run string, env []string, killAfter int) (acked map[string]bool, maxAcked []int, killedAt time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked = map[string]bool{}
	maxAcked = make([]int, durChildWorkers)
	for w := range maxAcked {
		maxAcked[w] = -1
	}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "ack ")
		var w, i int
		if _, err := fmt.Sscanf(id, "w%d-%d", &w, &i); !ok || err != nil || w >= durChildWorkers {
			continue // a line cut short by the kill
		}
		acked[id] = true
		maxAcked[w] = max(maxAcked[w], i)
		if len(acked) == killAfter && !killed {
			killedAt = time.Now()
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	if err := cmd.Wait(); !killed {
		t.Fatalf("child ended before the kill after %d acks: %v", len(acked), err)
	}
	return acked, maxAcked, killedAt
}
