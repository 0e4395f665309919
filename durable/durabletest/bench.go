package durabletest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/hotcount/hotcount/durable"
)

// HotKey is the one key the throughput benchmarks increment.
const HotKey = "likes:post:42"

// BenchCommitter measures acknowledged increments per second of one hot
// key through a Committer, with parallelism×GOMAXPROCS concurrent callers,
// each waiting for its commit. It reports incr/s and checks Exact.
func BenchCommitter(b *testing.B, log durable.Backend, cfg durable.CommitterConfig, parallelism int) {
	c, err := durable.NewCommitter(log, cfg)
	if err != nil {
		b.Fatal(err)
	}
	run(b, log, parallelism, func(ctx context.Context, e durable.Event) error {
		_, err := c.Append(ctx, e)
		return err
	})
	if err := c.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	if st := c.Stats(); st.Batches > 0 {
		b.ReportMetric(float64(st.Events)/float64(st.Batches), "events/batch")
	}
}

// BenchSingleInsert is BenchCommitter's baseline: every increment is its
// own AppendEvents call, one transaction each.
func BenchSingleInsert(b *testing.B, log durable.Backend, parallelism int) {
	run(b, log, parallelism, func(ctx context.Context, e durable.Event) error {
		_, err := log.AppendEvents(ctx, []durable.Event{e})
		return err
	})
}

func run(b *testing.B, log durable.Backend, parallelism int, incr func(context.Context, durable.Event) error) {
	ctx := context.Background()
	var r [4]byte
	rand.Read(r[:])
	prefix := hex.EncodeToString(r[:]) + "-"
	var seq atomic.Uint64
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := prefix + strconv.FormatUint(seq.Add(1), 36)
			if err := incr(ctx, durable.Event{Key: HotKey, Delta: 1, ID: id}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "incr/s")
	got, err := log.Exact(ctx, HotKey)
	if err != nil {
		b.Fatal(err)
	}
	if got != int64(b.N) {
		b.Fatalf("Exact = %d after %d acknowledged increments", got, b.N)
	}
}
