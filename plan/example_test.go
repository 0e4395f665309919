package plan_test

import (
	"fmt"

	"github.com/hotcount/hotcount/plan"
)

// Eight sub-counters with hashed labels on a 20-node cluster all land on
// distinct nodes only about one time in five.
func ExamplePAllDistinct() {
	fmt.Printf("%.4f\n", plan.PAllDistinct(20, 8))
	fmt.Printf("%.4f\n", plan.ExpectedCollisions(20, 8))
	// Output:
	// 0.1984
	// 1.2684
}

// A viral key at 40,000 increments/s, 10,000 writes/s per node, 100
// processes flushing every 500 ms (the default).
func ExampleCompute() {
	r, err := plan.Compute(plan.Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, Procs: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.RecommendedMode, r.N, r.MinN, r.CacheWritesPerSec)
	// Output:
	// buffered 1 4 200
}
