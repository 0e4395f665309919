package buffer

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Run with: go test -run '^$' -bench . -cpu 1,2 ./buffer
//
// BenchmarkAtomicAdd is the floor: every goroutine adds to one int64.
// BenchmarkStripedAdd is a striped counter (one padded int64 per
// goroutine), the best case for a single counter. BenchmarkBufferAdd is
// Buffer.Add on one hot key passed as the same string every time (a
// constant, or a key string the caller keeps); BenchmarkBufferAddHashed
// passes an equal but distinct string, as a key built per request would
// be, so every Add hashes and probes. BenchmarkBufferAddKeys spreads the
// adds over 1,000 such keys. BenchmarkRWMutexMapAdd is the sharded
// RWMutex + map design, for comparison with Buffer's lock-free lookup.

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
