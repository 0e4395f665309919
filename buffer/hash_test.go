package buffer

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestHashStringEveryByte checks, for every length up to 80 (every branch
// of hashString and several loop counts), that equal strings in distinct
// memory hash alike, that changing any one byte changes the hash, and
// that the seed and the length take part.
func TestHashStringEveryByte(t *testing.T) {
	const seed = 0x243f6a8885a308d3
	for n := 0; n <= 80; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		s := string(b)
		h := hashString(seed, s)
		if h2 := hashString(seed, strings.Clone(s)); h2 != h {
			t.Fatalf("len %d: a copy hashes to %x, the original to %x", n, h2, h)
		}
		if hashString(seed+1, s) == h {
			t.Errorf("len %d: the seed does not change the hash", n)
		}
		if n > 0 && hashString(seed, s[:n-1]) == h {
			t.Errorf("len %d: dropping the last byte does not change the hash", n)
		}
		for i := range n {
			c := []byte(s)
			c[i] ^= 0x01
			if hashString(seed, string(c)) == h {
				t.Errorf("len %d: flipping a bit of byte %d does not change the hash", n, i)
			}
		}
	}
}

// TestHashStringSpread checks that keys counters typically have spread
// over the 64 shards and over a table's slots (low bits) without a full
// 64-bit collision.
func TestHashStringSpread(t *testing.T) {
	const keys = 1 << 16
	for _, seed := range []uint64{1, 0x9e3779b97f4a7c15, 0xdeadbeef} {
		var shards [numShards]int
		var low [1024]int
		seen := make(map[uint64]string, keys)
		for i := range keys {
			k := "likes:post:" + strconv.Itoa(i)
			h := hashString(seed, k)
			if prev, ok := seen[h]; ok {
				t.Fatalf("seed %x: %q and %q collide", seed, prev, k)
			}
			seen[h] = k
			shards[h>>(64-shardBits)]++
			low[h&1023]++
		}
		check := func(name string, counts []int) {
			mean := keys / len(counts)
			for i, c := range counts {
				// Binomial counts stay within ±50% of the mean (64 and 1,024
				// expected per bucket) with overwhelming probability.
				if c < mean/2 || c > mean*3/2 {
					t.Errorf("seed %x: %s bucket %d holds %d keys, mean %d", seed, name, i, c, mean)
				}
			}
		}
		check("shard", shards[:])
		check("low bits", low[:])
	}
}

// FuzzHashString checks that a string and a copy of it in other memory,
// read at any offset, hash alike.
func FuzzHashString(f *testing.F) {
	f.Add("likes:post:42", uint64(1))
	f.Add("", uint64(0))
	f.Add(strings.Repeat("x", 33), uint64(7))
	f.Fuzz(func(t *testing.T, s string, seed uint64) {
		padded := "...." + s
		if hashString(seed, s) != hashString(seed, padded[4:]) {
			t.Fatalf("%q hashes differently at another offset", s)
		}
	})
}

// TestAddKeepsNoReference checks that a cell owns its key: bytes the
// caller changes after Add do not change the key that is flushed.
func TestAddKeepsNoReference(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	buf := []byte("likes:post:1")
	key := unsafe.String(&buf[0], len(buf)) // aliases buf, as a reused buffer would
	mustAdd(t, b, key, 5)
	buf[len(buf)-1] = '2' // the caller reuses its buffer for another key
	mustAdd(t, b, key, 7)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got1, got2 := sink.total("likes:post:1"), sink.total("likes:post:2"); got1 != 5 || got2 != 7 {
		t.Fatalf("flushed likes:post:1=%d likes:post:2=%d, want 5 and 7", got1, got2)
	}
}

// TestAddPerCallKeyAllocs checks that a key built for the call does not
// escape: "likes:" + id concatenated in the loop, then Add, allocates
// nothing once the key has a cell.
func TestAddPerCallKeyAllocs(t *testing.T) {
	b, _ := newTestBuffer(t, newFakeSink(), nil)
	id := strings.Clone("post:42")
	mustAdd(t, b, "likes:"+id, 1)
	var err error
	allocs := testing.AllocsPerRun(1000, func() {
		if e := b.Add("likes:"+id, 1); e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("Add(\"likes:\"+id): %v allocs/op, want 0 (the key escapes)", allocs)
	}
	if got := b.Pending("likes:post:42"); got != 1002 {
		t.Fatalf("Pending = %d, want 1002", got)
	}
}

// TestSameKey compares every key of lengths 0 to 20 with itself (a
// distinct copy) and with each copy that differs in one byte.
func TestSameKey(t *testing.T) {
	for n := 0; n <= 20; n++ {
		a := strings.Repeat("k", n)
		if !sameKey(a, strings.Clone(a)) {
			t.Fatalf("len %d: equal keys differ", n)
		}
		if sameKey(a, a+"x") || sameKey(a+"x", a) {
			t.Fatalf("len %d: keys of other lengths are equal", n)
		}
		for i := range n {
			b := []byte(a)
			b[i] = 'j'
			if sameKey(a, string(b)) {
				t.Fatalf("len %d: keys that differ at byte %d are equal", n, i)
			}
		}
	}
}
