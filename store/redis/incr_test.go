package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestIncrByAllocs checks that the single-key increment, the hot path of
// an unbuffered Client.Incr, allocates nothing: with a context that cannot
// be cancelled (a shared round context serves), and with one that already
// ends within Config.Timeout (it serves as it is).
func TestIncrByAllocs(t *testing.T) {
	// A long Timeout: the shared round context of background callers is
	// renewed every Timeout/16, and on a busy machine 200 calls could
	// otherwise span a renewal (one allocation, not one per call).
	const timeout = 5 * time.Minute
	s := newClusterStore(t, Config{Timeout: timeout})
	key := keyspace.SubKey("allocs", "0")
	short, cancel := context.WithTimeout(context.Background(), timeout/2)
	defer cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
	}{
		{"background", context.Background()},
		{"deadline within Timeout", short},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.IncrBy(tt.ctx, key, 1); err != nil {
				t.Fatal(err)
			}
			// AllocsPerRun counts every allocation of the process while it
			// runs, the client's own goroutines included; on a busy
			// machine their work can fall into one measurement (1.0 per
			// call was seen beside two CPU-bound processes, in 1 run of
			// 20). An allocation of IncrBy itself shows in every one, so
			// the path is allocation-free when one measurement finds 0.
			var err error
			var seen []float64
			for range 5 {
				allocs := testing.AllocsPerRun(200, func() {
					if _, e := s.IncrBy(tt.ctx, key, 1); e != nil {
						err = e
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if allocs == 0 {
					return
				}
				seen = append(seen, allocs)
			}
			t.Fatalf("IncrBy allocates %v times per call in %d measurements, want 0", seen, len(seen))
		})
	}
}

// TestRoundCtx checks the bound each round gets: a context that cannot be
// cancelled gets a shared one ending at least Timeout and at most
// Timeout·(1+1/deadlineSlices) after the call; a context ending sooner is
// used as it is; a later or no deadline is cut to Timeout.
func TestRoundCtx(t *testing.T) {
	const timeout = 800 * time.Millisecond
	s := &Store{cfg: Config{Timeout: timeout}, deadlines: newDeadlines(timeout)}
	slice := timeout / deadlineSlices

	before := time.Now()
	ctx, cancel := s.roundCtx(context.Background())
	after := time.Now()
	if cancel != nil {
		t.Fatal("a shared round context came with a cancel func")
	}
	dl, ok := ctx.Deadline()
	if !ok || dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout+slice)) {
		t.Fatalf("shared deadline %v not within [%v, %v]", dl, before.Add(timeout), after.Add(timeout+slice))
	}
	again, _ := s.roundCtx(context.WithValue(context.Background(), ctxKey{}, 1))
	if d2, _ := again.Deadline(); time.Since(before) < slice && !d2.Equal(dl) {
		t.Fatalf("a second call within one slice got another context (%v, %v)", dl, d2)
	}

	short, cancelShort := context.WithTimeout(context.Background(), timeout/2)
	defer cancelShort()
	if got, cancel := s.roundCtx(short); got != short || cancel != nil {
		t.Fatal("a context ending within Timeout was not used as it is")
	}

	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	before = time.Now()
	got, cancel := s.roundCtx(long)
	after = time.Now()
	if cancel == nil {
		t.Fatal("no cancel func for a derived context")
	}
	defer cancel()
	if dl, _ := got.Deadline(); dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
		t.Fatalf("derived deadline %v not within [%v, %v]", dl, before.Add(timeout), after.Add(timeout))
	}
	cancelLong()
	<-got.Done() // the caller's cancellation still reaches the round
}

type ctxKey struct{}

// TestIncrByTimeoutBackground checks that an increment with a context that
// cannot be cancelled is still bounded by Config.Timeout: the server stops
// answering and IncrBy returns store.ErrUnavailable.
func TestIncrByTimeoutBackground(t *testing.T) {
	ctx := ctxT(t)
	n, s := shortTimeoutStore(ctx, t)
	key := keyspace.SubKey("bg", "0")
	if _, err := s.IncrBy(context.Background(), key, 1); err != nil {
		t.Fatal(err)
	}
	mustDo(t, n.Addr, "CLIENT", "PAUSE", "1000", "ALL")
	if _, err := s.IncrBy(context.Background(), key, 1); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("IncrBy on a paused server: %v, want ErrUnavailable", err)
	}
}
