package meta_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/meta"
)

// countGets is a markHook that counts its GetMeta calls.
type countGets struct {
	*markHook
	gets atomic.Int64
}

func (b *countGets) GetMeta(ctx context.Context, key string) ([]byte, bool, error) {
	b.gets.Add(1)
	return b.markHook.GetMeta(ctx, key)
}

// TestLabelsAfterOwnResize: once Resize returns, Labels in the same
// process shows the new sets, even when it joins a look-up that read the
// record before the resize changed it (the cached entry was already past
// its TTL, as on a busy machine). Before the fix, the joined look-up's old
// write set came back. A round in which the second Labels did not join the
// first one's look-up is tried again.
func TestLabelsAfterOwnResize(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	for try := 1; ; try++ {
		clk := newFakeClock()
		b := &countGets{markHook: &markHook{Store: newMem(t, 8)}}
		m := newManager(t, b, meta.Config{Clock: clk, TTL: ttl, DefaultN: func(string) int { return 2 }})
		if err := m.Resize(ctx, "k", 4); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ttl)
		read, release := make(chan struct{}), make(chan struct{})
		b.mu.Lock()
		b.afterGet = func() { close(read); <-release }
		b.mu.Unlock()
		first := make(chan []string)
		go func() {
			w, _, err := m.Labels(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			first <- w
		}()
		<-read // the first look-up holds the record of n=4
		if err := m.Resize(ctx, "k", 8); err != nil {
			t.Fatal(err)
		}
		clk.Advance(ttl) // the resize's own entry is stale too
		gets := b.gets.Load()
		second := make(chan []string)
		go func() {
			w, _, err := m.Labels(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			second <- w
		}()
		time.Sleep(20 * time.Millisecond) // let the second Labels join
		close(release)
		<-first
		w := <-second
		if b.gets.Load() != gets {
			// The second Labels read the record itself: no join.
			if try == 5 {
				t.Skipf("the second Labels never joined the first's look-up in %d tries", try)
			}
			continue
		}
		if len(w) != 8 {
			t.Fatalf("Labels after Resize(8) returned: write %v (the look-up it joined read n=4)", w)
		}
		return
	}
}
