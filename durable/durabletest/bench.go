package durabletest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/durable"
)

// HotKey is the one key the hot-key throughput benchmarks increment.
const HotKey = "likes:post:42"

// SpreadKeys is the number of keys the spread benchmarks increment.
const SpreadKeys = 10000

// IDRow is an ids row as the durable path writes it.
type IDRow struct {
	Key, ID string
	Delta   int64
	SeenNs  int64
}

// EventRow is an events row as the durable path writes it.
type EventRow struct {
	Key     string
	Delta   int64
	AtNs, N int64
}

// Ingest writes rows into tables shaped like ids and events (empty on its
// first call, which creates them; later calls add to them), in the
// backend's fastest bulk way (COPY, or one transaction of inserts), and
// returns how long that took, commit included.
type Ingest func(ctx context.Context, ids []IDRow, events []EventRow) (time.Duration, error)

// benchSlices is how many alternating slices BenchDurable splits its run
// into: durable increments, then the bulk ingest of the same rows, and
// again, so that load from elsewhere on the machine slows both alike.
const benchSlices = 4

// BenchDurable measures, in one run, durable acknowledged increments per
// second through a Committer with callers concurrent callers, each with
// its own idempotency ids, over one hot key (keys 1) or spread over keys
// keys; and the backend's own ingest of exactly the rows the durable path
// wrote (one ids row per increment, and as many events rows as it wrote)
// with ingest. The two alternate in benchSlices slices of the run. It
// reports incr/s, ingest_incr/s, their ratio, events/batch and log rows
// per increment, and checks that every acknowledged increment is in the
// log.
func BenchDurable(b *testing.B, log durable.Backend, cfg durable.CommitterConfig, callers, keys int, ingest Ingest) {
	ctx := context.Background()
	var r [4]byte
	rand.Read(r[:])
	prefix := hex.EncodeToString(r[:])
	key := func(i int) string {
		if keys <= 1 {
			return HotKey
		}
		return "views:" + strconv.Itoa(i%keys)
	}
	first, err := log.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c, err := durable.NewCommitter(log, cfg)
	if err != nil {
		b.Fatal(err)
	}
	sent := make([]int, callers) // increments sent by each caller
	var took time.Duration       // in ingest
	var logRows int64
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for done, s := 0, 0; s < benchSlices; s++ {
		end := done + (b.N-done)/(benchSlices-s)
		if end == done {
			continue
		}
		before, err := log.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var next atomic.Int64
		next.Store(int64(done))
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= end {
						return
					}
					id := prefix + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(sent[w])
					sent[w]++
					if dup, err := c.Append(ctx, durable.Event{Key: key(i), Delta: 1, ID: id}); err != nil || dup {
						b.Errorf("append: dup %v, %v", dup, err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		after, err := log.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		rows := after.Rows["events"] - before.Rows["events"]
		logRows += rows

		// The same rows, ingested in bulk.
		ids := make([]IDRow, end-done)
		const now = 1 << 60 // any first-seen time: the rows' size is what counts
		for j := range ids {
			i := done + j
			ids[j] = IDRow{Key: key(i), ID: fmt.Sprintf("%s-%d-%d", prefix, i%callers, i/callers), Delta: 1, SeenNs: now}
		}
		events := make([]EventRow, rows)
		per := max(int64(end-done)/max(rows, 1), 1)
		for j := range events {
			events[j] = EventRow{Key: key(done + j), Delta: per, AtNs: now, N: per}
		}
		t, err := ingest(ctx, ids, events)
		if err != nil {
			b.Fatal(err)
		}
		took += t
		done = end
	}
	elapsed := b.Elapsed()
	if err := c.Close(ctx); err != nil {
		b.Fatal(err)
	}
	st := c.Stats()
	last, err := log.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got := last.Rows["ids"] - first.Rows["ids"]; got != int64(b.N) {
		b.Fatalf("%d ids rows after %d acknowledged increments", got, b.N)
	}
	var sum int64
	all := make([]string, 0, min(b.N, keys))
	for i := range min(b.N, max(keys, 1)) {
		all = append(all, key(i))
	}
	got, err := log.ExactMulti(ctx, all)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range got {
		sum += v
	}
	if sum != int64(b.N) {
		b.Fatalf("Exact sums to %d after %d acknowledged increments", sum, b.N)
	}
	rate := float64(b.N) / elapsed.Seconds()
	ceiling := float64(b.N) / took.Seconds()
	b.ReportMetric(rate, "incr/s")
	b.ReportMetric(ceiling, "ingest_incr/s")
	b.ReportMetric(rate/ceiling, "ratio")
	if st.Batches > 0 {
		b.ReportMetric(float64(st.Events)/float64(st.Batches), "events/batch")
	}
	b.ReportMetric(float64(logRows)/float64(b.N), "logrows/incr")
}

// BenchSingleInsert measures one AppendEvents call (one transaction) per
// increment of the hot key, with parallelism×GOMAXPROCS callers.
func BenchSingleInsert(b *testing.B, log durable.Backend, parallelism int) {
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
			res, err := log.AppendEvents(ctx, []durable.Event{{Key: HotKey, Delta: 1, ID: id}})
			if err == nil {
				err = res[0].Err
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "incr/s")
}
