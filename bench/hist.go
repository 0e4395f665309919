package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Layout of hist: histSub buckets per power of two of nanoseconds, from
// 2^histMinExp (128 ns; shorter latencies share the first bucket) to
// 2^histMaxExp (about 137 s; longer ones share the last). A bucket spans
// 1/16 of its power of two, so a percentile read from it is within about
// 6% of the true value.
const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histMinExp  = 7
	histMaxExp  = 37
	histBuckets = (histMaxExp - histMinExp + 1) * histSub
)

// hist counts latencies in log-linear buckets. It is safe for concurrent
// use: each add is one atomic add on the latency's bucket, so the
// workers of one instance can share one.
type hist struct {
	counts [histBuckets]atomic.Uint64
}

// bucketOf returns the bucket of d.
func bucketOf(d time.Duration) int {
	ns := uint64(max(d, 0))
	if ns < 1<<histMinExp {
		return 0
	}
	e := bits.Len64(ns) - 1
	if e > histMaxExp {
		return histBuckets - 1
	}
	sub := int(ns>>(e-histSubBits)) & (histSub - 1)
	return (e-histMinExp)*histSub + sub
}

// bucketMid returns the middle of bucket i.
func bucketMid(i int) time.Duration {
	e := i/histSub + histMinExp
	sub := i % histSub
	lo := uint64(histSub+sub) << (e - histSubBits)
	return time.Duration(lo + 1<<(e-histSubBits)/2)
}

func (h *hist) add(d time.Duration) { h.counts[bucketOf(d)].Add(1) }

// reset empties h; nothing may add to it meanwhile.
func (h *hist) reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
}

// merge adds o's counts to h.
func (h *hist) merge(o *hist) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
}

// latency summarises h (nearest rank, bucket middles).
func (h *hist) latency() Latency {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	if n == 0 {
		return Latency{}
	}
	at := func(p float64) time.Duration {
		rank := uint64(p / 100 * float64(n))
		if float64(rank) < p/100*float64(n) || rank == 0 {
			rank++
		}
		var seen uint64
		for i := range h.counts {
			if seen += h.counts[i].Load(); seen >= rank {
				return bucketMid(i)
			}
		}
		return bucketMid(histBuckets - 1)
	}
	return Latency{Samples: int(n), P50Ms: ms(at(50)), P99Ms: ms(at(99))}
}
