package placement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func evenTopo(k int) *store.Topology {
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("n%02d", i)
	}
	return store.Even(names)
}

// checkSpread fails unless labels are distinct, n in number, and spread as
// Choose promises on t.
func checkSpread(t *testing.T, topo *store.Topology, key string, labels []string, n int) {
	t.Helper()
	if len(labels) != n {
		t.Fatalf("got %d labels, want %d", len(labels), n)
	}
	seen := map[string]bool{}
	counts := make([]int, len(topo.Nodes))
	for _, l := range labels {
		if seen[l] {
			t.Fatalf("label %q chosen twice", l)
		}
		seen[l] = true
		counts[topo.Owner[keyspace.Slot(keyspace.SubKey(key, l))]]++
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	if n <= len(topo.Nodes) {
		if hi > 1 {
			t.Fatalf("n=%d on %d primaries: a primary holds %d sub-counters (%v)", n, len(topo.Nodes), hi, counts)
		}
		return
	}
	if hi-lo > 1 {
		t.Fatalf("n=%d on %d primaries: uneven spread %v", n, len(topo.Nodes), counts)
	}
}

func TestChooseSpread(t *testing.T) {
	for _, k := range []int{3, 5, 20} {
		topo := evenTopo(k)
		for _, key := range []string{"likes:post:42", "views", "a#b#c"} {
			for n := 1; n <= 64; n++ {
				t.Run(fmt.Sprintf("k%d/%s/n%d", k, key, n), func(t *testing.T) {
					got := Choose(topo, key, n, nil)
					checkSpread(t, topo, key, got, n)
					if again := Choose(topo, key, n, nil); !slices.Equal(got, again) {
						t.Fatalf("not deterministic: %v then %v", got, again)
					}
					r := Report(topo, key, got, nil)
					if r.Collisions != 0 {
						t.Fatalf("report shows %d collisions for chosen labels", r.Collisions)
					}
					if want := min(n, k); r.Distinct != want {
						t.Fatalf("distinct = %d, want %d", r.Distinct, want)
					}
				})
			}
		}
	}
}

func TestExtend(t *testing.T) {
	// Growing from Choose(n) keeps the old labels and still spreads evenly.
	for _, k := range []int{3, 5, 20} {
		topo := evenTopo(k)
		for n := 1; n < 30; n++ {
			small := Choose(topo, "k", n, nil)
			got := Extend(topo, "k", small, n+3, nil)
			if !slices.Equal(got[:n], small) {
				t.Fatalf("Extend(%v) = %v drops or reorders kept labels", small, got)
			}
			checkSpread(t, topo, "k", got, n+3)
			if again := Extend(topo, "k", small, n+3, nil); !slices.Equal(got, again) {
				t.Fatalf("Extend not deterministic: %v then %v", got, again)
			}
		}
	}
}

func TestChooseAvoid(t *testing.T) {
	topo := evenTopo(3)
	first := Choose(topo, "k", 3, nil)
	got := Choose(topo, "k", 3, first)
	for _, l := range got {
		if slices.Contains(first, l) {
			t.Fatalf("avoided label %q chosen: %v", l, got)
		}
	}
	checkSpread(t, topo, "k", got, 3)
}

func TestChooseNoTopology(t *testing.T) {
	for _, topo := range []*store.Topology{nil, {}} {
		if got := Choose(topo, "k", 4, []string{"1"}); !slices.Equal(got, []string{"0", "2", "3", "4"}) {
			t.Fatalf("Choose without topology = %v", got)
		}
	}
	if got := Naive(3); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("Naive(3) = %v", got)
	}
}

func TestChooseUnevenSlots(t *testing.T) {
	// A primary that owns one slot still gets its sub-counter.
	topo := evenTopo(3)
	tiny := uint16(12345)
	for s := range topo.Owner {
		if topo.Owner[s] == 2 {
			topo.Owner[s] = 1
		}
	}
	topo.Owner[tiny] = 2
	got := Choose(topo, "k", 3, nil)
	checkSpread(t, topo, "k", got, 3)
}

func TestKeep(t *testing.T) {
	topo := evenTopo(3)
	// Six labels, two per primary: keeping three keeps one per primary.
	six := Choose(topo, "k", 6, nil)
	kept := Keep(topo, "k", six, 3)
	checkSpread(t, topo, "k", kept, 3)
	for i := 1; i < len(kept); i++ {
		if slices.Index(six, kept[i-1]) > slices.Index(six, kept[i]) {
			t.Fatalf("Keep reordered labels: %v from %v", kept, six)
		}
	}
	if got := Keep(topo, "k", six, 9); !slices.Equal(got, six) {
		t.Fatalf("Keep more than given = %v", got)
	}
	if got := Keep(topo, "k", six, 0); got != nil {
		t.Fatalf("Keep 0 = %v", got)
	}
}

func TestReport(t *testing.T) {
	topo := evenTopo(3)
	// Find three labels on the same primary, and one elsewhere.
	var same []string
	var other string
	for i := 0; len(same) < 2 || other == ""; i++ {
		l := fmt.Sprint(i)
		switch topo.NodeOf(keyspace.SubKey("k", l)) {
		case "n00":
			if len(same) < 2 {
				same = append(same, l)
			}
		default:
			if other == "" {
				other = l
			}
		}
	}
	labels := append(same, other)
	r := Report(topo, "k", labels, []int64{1, 2, 4})
	if r.Distinct != 2 || r.Primaries != 3 || r.Collisions != 1 {
		t.Fatalf("report = %+v, want 2 distinct of 3 primaries, 1 collision", r)
	}
	if r.Nodes[0].Node != "n00" || r.Nodes[0].SubCounters != 2 || r.Nodes[0].Value != 3 || r.Nodes[0].WriteShare != 2.0/3 {
		t.Fatalf("node share = %+v", r.Nodes[0])
	}
	if r.MaxShare != 2.0/3 {
		t.Fatalf("max share = %v", r.MaxShare)
	}
	for i, s := range r.Shards {
		if s.Key != keyspace.SubKey("k", labels[i]) || s.Slot != keyspace.Slot(s.Key) || s.Value != int64(1)<<i {
			t.Fatalf("shard %d = %+v", i, s)
		}
	}
	col := r.Colliding(topo)
	if len(col) != 1 || slices.Contains(col, other) {
		t.Fatalf("colliding = %v", col)
	}
	// Repairing: keep the rest, extend back to four labels.
	var keep []string
	for _, l := range labels {
		if !slices.Contains(col, l) {
			keep = append(keep, l)
		}
	}
	fixed := Extend(topo, "k", keep, 3, labels)
	if c := Report(topo, "k", fixed, nil).Collisions; c != 0 || len(fixed) != 3 {
		t.Fatalf("after repair %v: %d collisions", fixed, c)
	}
}

func TestNaiveCollides(t *testing.T) {
	// The problem placement solves: naive labels collide often.
	topo := evenTopo(20)
	distinct := 0
	const keys = 500
	for i := range keys {
		if Report(topo, fmt.Sprintf("post:%d", i), Naive(8), nil).Collisions == 0 {
			distinct++
		}
	}
	frac := float64(distinct) / keys
	t.Logf("8 naive labels on 20 primaries all distinct for %.1f%% of keys", 100*frac)
	if frac > 0.35 {
		t.Fatalf("naive labels distinct %.2f of the time; expected about 0.2", frac)
	}
}

func FuzzChoose(f *testing.F) {
	f.Add("likes:post:42", uint8(8), uint8(3))
	f.Add("x", uint8(64), uint8(20))
	f.Add("", uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, key string, n, k uint8) {
		if keyspace.Validate(key) != nil || k == 0 || n == 0 || n > 100 || k > 40 {
			t.Skip()
		}
		topo := evenTopo(int(k))
		got := Choose(topo, key, int(n), nil)
		checkSpread(t, topo, key, got, int(n))
		if c := Report(topo, key, got, nil).Collisions; c != 0 {
			t.Fatalf("collisions %d", c)
		}
	})
}

func BenchmarkChoose8of20(b *testing.B) {
	topo := evenTopo(20)
	for b.Loop() {
		Choose(topo, "likes:post:42", 8, nil)
	}
}
