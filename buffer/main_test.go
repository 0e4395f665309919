package buffer

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newTestBuffer returns a Buffer on a fake clock whose timed flushes never
// fire unless the test advances the clock past an hour; the Buffer is
// closed when the test ends. Every key is hot (HotAt 1: every flush
// carries a token) unless edit sets HotAt.
func newTestBuffer(t testing.TB, sink Sink, edit func(*Config)) (*Buffer, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	labels := keyspace.NaiveLabels(4)
	cfg := Config{
		Interval: time.Hour,
		MaxKeys:  1 << 30,
		Labels:   func(string) []string { return labels },
		Clock:    clk,
		Rand:     seqRand(),
		HotAt:    1,
	}
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(sink, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // never wait in cleanup: tests that care call Close themselves
		_ = b.Close(ctx)
		<-b.done
	})
	return b, clk
}

// tick runs one timed flush round, as the flusher goroutine does.
func tick(b *Buffer) {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.cut(false)
	_ = b.send(context.Background(), false)
}

func mustAdd(t testing.TB, b *Buffer, key string, d int64) {
	t.Helper()
	if err := b.Add(key, d); err != nil {
		t.Fatalf("Add(%q, %d): %v", key, d, err)
	}
}
