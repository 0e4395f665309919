package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hotcount/hotcount"
)

// readTimeout bounds one sampled read.
const readTimeout = 2 * time.Second

// readSamples are the latencies of the three kinds of read.
type readSamples struct {
	cached, uncached, raw []time.Duration
}

func (r *readSamples) merge(o readSamples) {
	r.cached = append(r.cached, o.cached...)
	r.uncached = append(r.uncached, o.uncached...)
	r.raw = append(r.raw, o.raw...)
}

// sampleReads reads key every period until stop is closed, three ways,
// each in its own goroutine so that a slow kind does not space out the
// others (a cached read sampled less often than the cache's TTL would
// always miss): a summed read through reader (with its read cache), one
// through checker (no cache), and the sub-keys one GET at a time. It
// returns the latencies of the reads that succeeded, the number that
// failed and one failure.
func sampleReads(ctx context.Context, b backend, reader, checker *hotcount.Client, key string, subs []string, period time.Duration, stop <-chan struct{}) (readSamples, int, error) {
	var out readSamples
	var mu sync.Mutex
	var failed int
	var example error
	sample := func(dst *[]time.Duration, read func(context.Context) error) {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, readTimeout)
			start := time.Now()
			err := read(rctx)
			d := time.Since(start)
			cancel()
			mu.Lock()
			if err != nil {
				failed++
				example = err
			} else {
				*dst = append(*dst, d)
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sample(&out.cached, func(ctx context.Context) error { _, err := reader.Get(ctx, key); return err })
	})
	wg.Go(func() {
		sample(&out.uncached, func(ctx context.Context) error { _, err := checker.Get(ctx, key); return err })
	})
	wg.Go(func() {
		sample(&out.raw, func(ctx context.Context) error {
			for _, sk := range subs {
				if err := b.rawGet(ctx, sk); err != nil {
					return err
				}
			}
			return nil
		})
	})
	wg.Wait()
	return out, failed, example
}

// Latency summarises one kind of read.
type Latency struct {
	// Samples is the number of reads measured.
	Samples int `json:"samples"`
	// P50Ms and P99Ms are percentiles in milliseconds (nearest rank).
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// latency summarises ds (which it sorts).
func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{Samples: len(ds), P50Ms: ms(percentile(ds, 50)), P99Ms: ms(percentile(ds, 99))}
}

// percentile returns the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
