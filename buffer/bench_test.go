package buffer

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run with: go test -run '^$' -bench . -cpu 1,2 ./buffer
//
// BenchmarkAtomicAdd is the floor: every goroutine adds to one int64.
// BenchmarkStripedAdd is a striped counter (one padded int64 per
// goroutine), the best case for a single counter. BenchmarkBufferAdd is
// Buffer.Add on one hot key passed as the same string every time (a
// constant, or a key string the caller keeps); BenchmarkBufferAddHashed
// passes an equal but distinct string, as a key built per request would
// be. Both hash and probe: Add has no path that depends on the identity
// of the string. BenchmarkBufferAddKeys spreads the adds over 1,000 keys.
// BenchmarkRWMutexMapAdd is the sharded RWMutex + map design, for
// comparison with Buffer's lock-free lookup. BenchmarkAddVsAtomic reports
// Buffer.Add's time as a ratio to an atomic add measured in the same run.

func BenchmarkAtomicAdd(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}

type stripe struct {
	v atomic.Int64
	_ [56]byte
}

func BenchmarkStripedAdd(b *testing.B) {
	stripes := make([]stripe, 64)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := &stripes[next.Add(1)%int64(len(stripes))]
		for pb.Next() {
			s.v.Add(1)
		}
	})
}

func BenchmarkBufferAdd(b *testing.B) {
	buf, _ := newTestBuffer(b, newFakeSink(), nil)
	const key = "likes:post:42"
	if err := buf.Add(key, 1); err != nil {
		b.Fatal(err)
	}
	tick(buf) // a cut finds the key hot (HotAt 1): its Adds are not counted, as a viral key's
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := buf.Add(key, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBufferAddHashed is BenchmarkBufferAdd with a key string that
// is equal to, but not the same string as, the one the cell was created
// from (a key built per request): every Add hashes and probes.
func BenchmarkBufferAddHashed(b *testing.B) {
	buf, _ := newTestBuffer(b, newFakeSink(), nil)
	if err := buf.Add(strings.Clone("likes:post:42"), 1); err != nil {
		b.Fatal(err)
	}
	tick(buf) // the key is hot, as in BenchmarkBufferAdd
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := strings.Clone("likes:post:42")
		for pb.Next() {
			if err := buf.Add(key, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkBufferAddKeys(b *testing.B) {
	buf, _ := newTestBuffer(b, newFakeSink(), nil)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("views:video:%d", i)
		if err := buf.Add(strings.Clone(keys[i]), 1); err != nil {
			b.Fatal(err)
		}
	}
	var seed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919))
		for pb.Next() {
			i++
			if err := buf.Add(keys[i%len(keys)], 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

type rwShard struct {
	mu sync.RWMutex
	m  map[string]*atomic.Int64
	_  [32]byte
}

func BenchmarkRWMutexMapAdd(b *testing.B) {
	seed := maphash.MakeSeed()
	shards := make([]rwShard, numShards)
	for i := range shards {
		shards[i].m = map[string]*atomic.Int64{}
	}
	add := func(key string, d int64) {
		sh := &shards[maphash.String(seed, key)>>(64-shardBits)]
		sh.mu.RLock()
		if c := sh.m[key]; c != nil {
			c.Add(d) // under the read lock, so a flusher may remove cells
			sh.mu.RUnlock()
			return
		}
		sh.mu.RUnlock()
		sh.mu.Lock()
		c := sh.m[key]
		if c == nil {
			c = new(atomic.Int64)
			sh.m[key] = c
		}
		c.Add(d)
		sh.mu.Unlock()
	}
	const key = "likes:post:42"
	add(key, 1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			add(key, 1)
		}
	})
}

// BenchmarkAddVsAtomic measures Buffer.Add on one hot key against a bare
// atomic add on one int64, in alternating slices of the same run, so that
// a busy machine slows both alike; it reports both times and their ratio
// (run with -cpu 1,2: one goroutine per GOMAXPROCS in both). The key is
// passed three ways: "reused-key" is the very string the cell was created
// from; "distinct-key" is an equal string built once per goroutine (the
// cost of Add for a key built per call, without the cost of building it);
// "per-call-key" builds the key in the loop, "likes:" + id, as a request
// handler does, and so also pays for the concatenation, which stays on
// the stack because Add keeps no reference to the key.
func BenchmarkAddVsAtomic(b *testing.B) {
	id := strings.Clone("post:42")
	for _, tc := range []struct {
		name string
		add  func(buf *Buffer, ops int) error
	}{
		{"reused-key", func(buf *Buffer, ops int) error {
			key := reusedKey
			for range ops {
				if err := buf.Add(key, 1); err != nil {
					return err
				}
			}
			return nil
		}},
		{"distinct-key", func(buf *Buffer, ops int) error {
			key := "likes:" + id
			for range ops {
				if err := buf.Add(key, 1); err != nil {
					return err
				}
			}
			return nil
		}},
		{"per-call-key", func(buf *Buffer, ops int) error {
			for range ops {
				if err := buf.Add("likes:"+id, 1); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf, _ := newTestBuffer(b, newFakeSink(), nil)
			// A hot key as it is after its first flush: with more than
			// one core, that cut gave its cell lanes.
			if err := buf.Add(reusedKey, spreadAt); err != nil {
				b.Fatal(err)
			}
			if err := buf.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.ReportAllocs()
			tb, ta := alternate(b, func(ops int) {
				if err := tc.add(buf, ops); err != nil {
					b.Error(err)
				}
			}, func(ops int) {
				for range ops {
					n.Add(1)
				}
			})
			b.ReportMetric(float64(tb)/float64(b.N), "add-ns/op")
			b.ReportMetric(float64(ta)/float64(b.N), "atomic-ns/op")
			b.ReportMetric(float64(tb)/float64(ta), "ratio")
		})
	}
}

// reusedKey is the key of BenchmarkAddVsAtomic's cell.
var reusedKey = "likes:post:42"

// alternate runs b.N calls' worth of x and of y, in alternating slices,
// each slice from GOMAXPROCS goroutines that share its calls, and returns
// the time spent in each.
func alternate(b *testing.B, x, y func(ops int)) (tx, ty time.Duration) {
	// Calls per slice, over all goroutines: slices of some milliseconds,
	// so that the moment a slice's second goroutine waits for an idle P
	// to wake (when one goroutine runs alone, which favours the contended
	// atomic add) is a small part of it. With 2^16 the atomic slices
	// lasted about 0.3 ms.
	const slice = 1 << 20
	procs := runtime.GOMAXPROCS(0)
	run := func(f func(int), ops int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range procs {
			wg.Go(func() { f(ops/procs + btoi(g < ops%procs)) })
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += slice {
		ops := min(slice, b.N-done)
		tx += run(x, ops)
		ty += run(y, ops)
	}
	return tx, ty
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}
