package clock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
)

func TestFakeTickerAndAfter(t *testing.T) {
	f := clock.NewFake()
	tk := f.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	after := f.After(250 * time.Millisecond)

	f.Advance(99 * time.Millisecond)
	select {
	case <-tk.C():
		t.Fatal("ticked early")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-tk.C(); !got.Equal(clock.Start.Add(100 * time.Millisecond)) {
		t.Fatalf("tick at %v", got)
	}
	// Two periods crossed in one Advance: one tick kept, like time.Ticker.
	f.Advance(200 * time.Millisecond)
	<-tk.C()
	select {
	case <-tk.C():
		t.Fatal("a dropped tick was delivered")
	default:
	}
	select {
	case at := <-after:
		if !at.Equal(clock.Start.Add(250 * time.Millisecond)) {
			t.Fatalf("after fired at %v", at)
		}
	default:
		t.Fatal("After did not fire")
	}
	if got := f.Now(); !got.Equal(clock.Start.Add(300 * time.Millisecond)) {
		t.Fatalf("now %v", got)
	}
	tk.Stop()
	if f.Waiters() != 0 {
		t.Fatalf("%d waiters after Stop", f.Waiters())
	}
}

func TestSleepAndBlockUntil(t *testing.T) {
	f := clock.NewFake()
	done := make(chan error)
	go func() { done <- clock.Sleep(context.Background(), f, time.Second) }()
	f.BlockUntil(1)
	f.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- clock.Sleep(ctx, f, time.Hour) }()
	f.BlockUntil(1)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Sleep after cancel: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if f.BlockUntilContext(stop, 5) {
		t.Fatal("BlockUntilContext did not give up")
	}
}

func TestOrReal(t *testing.T) {
	if clock.OrReal(nil) == nil {
		t.Fatal("OrReal(nil) is nil")
	}
	f := clock.NewFake()
	if clock.OrReal(f) != f {
		t.Fatal("OrReal changed a given clock")
	}
}

// A Fake drives a loop that ticks every second: ten seconds pass at once.
func ExampleFake() {
	f := clock.NewFake()
	tk := f.NewTicker(time.Second)
	defer tk.Stop()
	ticks := 0
	for range 3 {
		f.Advance(time.Second)
		<-tk.C()
		ticks++
	}
	fmt.Println(ticks, f.Now().Sub(clock.Start))
	// Output: 3 3s
}
