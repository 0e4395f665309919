package regions

import (
	"context"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/hotcount/hotcount/durable"
)

// TestApplyManyScript: the records of several counters of one bucket,
// stored by one call of applyManyScript, give each counter the records
// and the answer that applyScript gives it alone; readHashes (one
// readManyScript call per bucket) reads what readScript reads.
func TestApplyManyScript(t *testing.T) {
	one, many := client(t, node(t).Addr), client(t, node(t).Addr)
	ctx := context.Background()
	// Counters of one bucket, and one of another.
	var keys []string
	for i := 0; len(keys) < 5; i++ {
		if k := "k" + strconv.Itoa(i); bucketOf(k) == bucketOf("k0") {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "other")
	future := time.Now().Add(time.Hour).UnixMilli()
	r := rand.New(rand.NewPCG(1, 2))
	for step := range 60 {
		var shipped []string
		var pairs [][]string
		for _, k := range keys {
			if r.IntN(3) == 0 {
				continue
			}
			// Distinct names, as a round ships them: a contribution
			// first, or a fence.
			var args []string
			names := [][2]any{{"us", durable.PartContribution}, {"ap", durable.PartContribution}, {"us", durable.PartFence}, {"ap", durable.PartFence}}
			r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			for _, nm := range names[:1+r.IntN(3)] {
				p := durable.RegionPart{Key: k, Origin: nm[0].(string), Kind: nm[1].(durable.PartKind),
					Epoch: uint64(r.IntN(3)), Lease: uint64(r.IntN(3)), Seq: uint64(r.IntN(5)), Value: r.Int64N(100) - 50, At: t0}
				args = append(args, field(p), Encode(p))
			}
			if r.IntN(4) == 0 {
				args = append(args, fieldDeadline, encodeDeadline(Deadline{Stamp: uint64(1 + r.IntN(3)), At: time.UnixMilli(future + r.Int64N(1000))}))
			}
			shipped, pairs = append(shipped, k), append(pairs, args)
		}
		if len(shipped) == 0 {
			continue
		}
		want := make([]int64, len(shipped))
		for i, k := range shipped {
			v, err := round(ctx, one, nil, []call{hcall(applyScript, k, pairs[i]...)})[0].AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			want[i] = v
		}
		groups, calls := applyCalls(shipped, pairs)
		got := make([]int64, len(shipped))
		for i, g := range groups {
			arr, err := round(ctx, many, nil, calls[i:i+1])[0].ToArray()
			if err != nil || len(arr) != len(g.at) {
				t.Fatalf("step %d: %v, %d answers for %d counters", step, err, len(arr), len(g.at))
			}
			for j, at := range g.at {
				got[at], _ = arr[j].AsInt64()
			}
		}
		for i, k := range shipped {
			if got[i] != want[i] {
				t.Fatalf("step %d, %s: applyManyScript answered %d, applyScript %d", step, k, got[i], want[i])
			}
		}
		a, err := readHashes(ctx, one, keys)
		if err != nil {
			t.Fatal(err)
		}
		b, err := readHashes(ctx, many, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			single, err := round(ctx, one, nil, []call{hcall(readScript, k)})[0].AsStrMap()
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(a[i], b[i]) || !maps.Equal(a[i], single) {
				t.Fatalf("step %d, %s: records %v after applyManyScript, %v after applyScript (readScript: %v)", step, k, b[i], a[i], single)
			}
		}
	}
}

// TestBucketGroups: every counter in one group of its bucket, at most
// perCall to a group.
func TestBucketGroups(t *testing.T) {
	var keys []string
	for i := range 3 * Buckets {
		keys = append(keys, "c"+strconv.Itoa(i))
	}
	for i := 0; len(keys) < 3*Buckets+2*perCall+1; i++ {
		if k := "x" + strconv.Itoa(i); bucketOf(k) == bucketOf("c0") {
			keys = append(keys, k)
		}
	}
	seen := make([]bool, len(keys))
	for _, g := range bucketGroups(keys) {
		if len(g.at) == 0 || len(g.at) > perCall {
			t.Fatalf("group of %d counters", len(g.at))
		}
		for _, at := range g.at {
			if seen[at] || bucketKey(keys[at]) != g.bucket {
				t.Fatalf("%s in group %s (seen %v)", keys[at], g.bucket, seen[at])
			}
			seen[at] = true
		}
	}
	for i, s := range seen {
		if !s {
			t.Fatalf("%s in no group", keys[i])
		}
	}
}
