package plan

import (
	"fmt"
	"strings"
)

// Explain returns a short human explanation of a plan: the recommendation,
// the load per node, the collision odds of hashed labels, the read cost and
// any warnings, one point per line.
func Explain(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Recommended: %s with n=%d (%s).\n", r.RecommendedMode, r.N, r.Reason)
	fmt.Fprintf(&b, "The cache takes %.0f writes/s: %.0f per sub-counter; with placed labels the fullest node takes %.0f (capacity %.0f, %s).\n",
		r.CacheWritesPerSec, r.PerSubCounterRate, r.PerNodeRate.WorstCase, r.Input.NodeCapacity, fitsWord(r.Fits))
	if r.N > 1 {
		fmt.Fprintf(&b, "Hashed labels instead would all land on distinct nodes with probability %.1f%% (expected %.2f collisions); the fullest node would take %.0f on average, up to %.0f.\n",
			100*r.PAllDistinct, r.ExpectedCollisions, r.PerNodeRateRandom.Expected, r.PerNodeRateRandom.WorstCase)
	}
	fmt.Fprintf(&b, "A read fetches %d key(s) from %d node(s)", r.ReadKeys, r.ReadNodes)
	if r.Input.ReadRate > 0 {
		fmt.Fprintf(&b, ": %.0f key reads/s uncached, %.0f with the %.0f ms summed-read cache", r.CacheReadsPerSec.Uncached, r.CacheReadsPerSec.Cached, r.Input.ReadCacheTTLMS)
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "Redis memory: about %d B while the counter is cold (one key), %d B with its %d sub-counters and metadata.\n",
		r.Memory.Cold, r.Memory.Sharded, r.N)
	if r.LossWindowMS > 0 {
		fmt.Fprintf(&b, "A killed process loses at most %.0f ms of increments; reads lag by up to %.0f ms.\n", r.LossWindowMS, r.MaxStalenessMS)
	} else {
		fmt.Fprintf(&b, "No buffering: a killed process loses nothing it acknowledged; cached reads lag by up to %.0f ms.\n", r.MaxStalenessMS)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "Warning: %s.\n", w)
	}
	return b.String()
}

func fitsWord(ok bool) string {
	if ok {
		return "fits"
	}
	return "OVER capacity"
}
