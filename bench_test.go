package hotcount_test

import (
	"context"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store/mem"
)

// BenchmarkIncr compares, on one hot key, sharded increments through the
// Client on the embedded store and on the Redis Cluster with a plain
// single-key INCRBY through rueidis on the same cluster.
func BenchmarkIncr(b *testing.B) {
	ctx := context.Background()
	b.Run("embedded", func(b *testing.B) {
		st, _ := mem.New(mem.Config{})
		c, err := hotcount.New(ctx, hotcount.Config{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Incr(ctx, "bench:hot", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("cluster", func(b *testing.B) {
		st := openCluster(b)
		c, err := hotcount.New(ctx, hotcount.Config{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Incr(ctx, "bench:hot", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("cluster-plain-incrby", func(b *testing.B) {
		st := openCluster(b)
		rc := st.Client()
		cmd := rc.B().Incrby().Key("bench:plain").Increment(1).Build().Pin()
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := rc.Do(ctx, cmd).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
