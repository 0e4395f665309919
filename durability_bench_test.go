package hotcount_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/hotcount/hotcount"
)

// BenchmarkIncrID measures durable-mode increments end to end through the
// Client: group commit to the durable store, then the buffered cache view
// on the test Redis Cluster. 16 goroutines per CPU, one hot key.
func BenchmarkIncrID(b *testing.B) {
	for _, ds := range durStores() {
		b.Run(ds.name, func(b *testing.B) {
			ctx := context.Background()
			c := durClient(b, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: ds.open(b, ds.loc(b))}})
			prefix := durRandHex(4) + "-"
			var seq atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := prefix + strconv.FormatInt(seq.Add(1), 10)
					if err := c.IncrID(ctx, "bench:durable", 1, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			s := c.Stats().Durability
			if s.Batches > 0 {
				b.ReportMetric(float64(s.Events)/float64(s.Batches), "events/batch")
			}
		})
	}
}
