package redis

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
)

// benchParallelism is goroutines per GOMAXPROCS in the INCRBY benchmarks:
// enough concurrent callers for rueidis to pipeline them, as a hot key sees.
const benchParallelism = 8

// BenchmarkIncrBy is INCRBY of one key through the Store, from parallel
// goroutines, on the test cluster.
func BenchmarkIncrBy(b *testing.B) {
	s := newClusterStore(b, Config{})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.IncrBy(ctx, "{bench}:incr", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRueidisIncrBy is the same INCRBY through a plain rueidis cluster
// client, as the baseline for BenchmarkIncrBy.
func BenchmarkRueidisIncrBy(b *testing.B) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: clusterSeeds(b), DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Do(ctx, c.B().Incrby().Key("{bench}:incr").Increment(1).Build()).Error(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGet16 reads 16 sub-keys spread over the cluster through the
// Store: one pipelined round per node.
func BenchmarkGet16(b *testing.B) {
	s := newClusterStore(b, Config{})
	ctx := context.Background()
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = "{bench#" + string(rune('a'+i)) + "}"
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Get(ctx, keys); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
