package hotcount_test

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount"
)

// A counter on the embedded store (no Redis address): eight sub-counters
// placed on the three simulated nodes, summed on read.
func Example() {
	ctx := context.Background()
	c, err := hotcount.New(ctx, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)

	for range 1000 {
		if err := c.Incr(ctx, "likes:post:42", 1); err != nil {
			panic(err)
		}
	}
	r, err := c.Get(ctx, "likes:post:42")
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Value, r.N)
	// Output: 1000 8
}

// Buffered deltas: increments are added in memory and flushed as one
// idempotent increment per key; a process reads its own writes before the
// flush, and Close drains the buffer.
func Example_buffered() {
	ctx := context.Background()
	c, err := hotcount.New(ctx, hotcount.Config{
		Namespaces: []hotcount.Namespace{{Prefix: "views:", Buffered: true}},
	})
	if err != nil {
		panic(err)
	}
	for range 500 {
		_ = c.Incr(ctx, "views:video:7", 2)
	}
	r, _ := c.Get(ctx, "views:video:7")
	fmt.Println(r.Value)
	if err := c.Close(ctx); err != nil {
		panic(err)
	}
	// Output: 1000
}

// Bad input is rejected with a named error and changes nothing.
func ExampleClient_Incr_errors() {
	ctx := context.Background()
	c, _ := hotcount.New(ctx, hotcount.Config{})
	defer c.Close(ctx)
	fmt.Println(c.Incr(ctx, "likes:{post}", 1) != nil)
	fmt.Println(c.Incr(ctx, "likes:post:1", 0) == hotcount.ErrZeroDelta)
	// Output:
	// true
	// true
}
