package durabletest

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// RunRegions runs the conformance tests of durable.Regions against the
// backends open returns (see Run for what open must do); every one of
// them must implement durable.Regions.
func RunRegions(t *testing.T, open func(t *testing.T) durable.Backend) {
	t.Run("NewestVersionWins", func(t *testing.T) { testRegionNewest(t, open) })
	t.Run("ListAndReopen", func(t *testing.T) { testRegionList(t, open) })
	t.Run("InvalidAndClosed", func(t *testing.T) { testRegionInvalid(t, open) })
}

func regions(t *testing.T, open func(t *testing.T) durable.Backend) (durable.Backend, durable.Regions) {
	b := openT(t, open)
	r, ok := b.(durable.Regions)
	if !ok {
		t.Fatalf("%T does not implement durable.Regions", b)
	}
	return b, r
}

func part(key, origin string, kind durable.PartKind, epoch, lease, seq uint64, v int64) durable.RegionPart {
	return durable.RegionPart{Key: key, Origin: origin, Kind: kind, Epoch: epoch, Lease: lease, Seq: seq, Value: v,
		At: time.Unix(1_700_000_000, int64(seq)).UTC()}
}

func wantParts(t *testing.T, r durable.Regions, key string, want ...durable.RegionPart) {
	t.Helper()
	got, err := r.LoadRegionParts(ctxT(t), []string{key})
	must(t, err)
	if len(got[key]) != len(want) {
		t.Fatalf("parts of %q = %+v, want %+v", key, got[key], want)
	}
	for i, p := range got[key] {
		w := want[i]
		if p.Key != w.Key || p.Origin != w.Origin || p.Kind != w.Kind || p.Version(w) != 0 || p.Value != w.Value || !p.At.Equal(w.At) {
			t.Fatalf("part %d of %q = %+v, want %+v", i, key, p, w)
		}
	}
}

func testRegionNewest(t *testing.T, open func(t *testing.T) durable.Backend) {
	_, r := regions(t, open)
	ctx := ctxT(t)
	c, f := durable.PartContribution, durable.PartFence
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 0, 1, 5, 50), part("k", "us", f, 0, 1, 2, 20)}))
	// Older versions change nothing: a lower seq, a lower lease of a
	// higher seq, a lower epoch.
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 0, 1, 4, 40)}))
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 0, 0, 99, 990)}))
	wantParts(t, r, "k", part("k", "us", c, 0, 1, 5, 50), part("k", "us", f, 0, 1, 2, 20))
	// A newer lease with a lower seq wins; a newer epoch with a lower
	// value wins; within one call the newest of one identity is kept.
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 0, 2, 1, 60)}))
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 1, 0, 0, 3), part("k", "us", c, 1, 0, 7, 9),
		part("k", "us", c, 1, 0, 6, 8), part("k", "eu", c, 0, 0, 1, -4)}))
	wantParts(t, r, "k", part("k", "eu", c, 0, 0, 1, -4), part("k", "us", c, 1, 0, 7, 9), part("k", "us", f, 0, 1, 2, 20))
	// The same version again is accepted (a retry) and changes nothing.
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k", "us", c, 1, 0, 7, 9)}))
	wantParts(t, r, "k", part("k", "eu", c, 0, 0, 1, -4), part("k", "us", c, 1, 0, 7, 9), part("k", "us", f, 0, 1, 2, 20))
	// Keys are exact: "k#x" is another counter; a counter clear leaves
	// the parts (a region clear is observed-remove, not a delete).
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k#x", "us", c, 0, 0, 1, math.MaxInt64)}))
	b := openT(t, open)
	must(t, b.ClearCounter(ctx, "k", time.Unix(1_700_000_100, 0)))
	wantParts(t, r, "k#x", part("k#x", "us", c, 0, 0, 1, math.MaxInt64))
	wantParts(t, r, "k", part("k", "eu", c, 0, 0, 1, -4), part("k", "us", c, 1, 0, 7, 9), part("k", "us", f, 0, 1, 2, 20))
	got, err := r.LoadRegionParts(ctx, []string{"none", "k#x"})
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("LoadRegionParts(none, k#x) = %v, want only k#x", got)
	}
	// A deletion takes every part of its keys and only theirs.
	must(t, r.DeleteRegionParts(ctx, []string{"k#x", "none"}))
	must(t, r.DeleteRegionParts(ctx, nil))
	wantParts(t, r, "k#x")
	wantParts(t, r, "k", part("k", "eu", c, 0, 0, 1, -4), part("k", "us", c, 1, 0, 7, 9), part("k", "us", f, 0, 1, 2, 20))
	must(t, r.SaveRegionParts(ctx, []durable.RegionPart{part("k#x", "us", c, 0, 0, 1, math.MaxInt64)}))
	if got, err = r.LoadRegionParts(ctx, []string{"none", "k#x"}); err != nil || len(got) != 1 {
		t.Fatalf("LoadRegionParts(none, k#x) = %v, %v, want only k#x", got, err)
	}
}

func testRegionList(t *testing.T, open func(t *testing.T) durable.Backend) {
	_, r := regions(t, open)
	ctx := ctxT(t)
	c := durable.PartContribution
	var parts []durable.RegionPart
	for _, k := range []string{"b", "a", "é", "c", "a#1"} {
		parts = append(parts, part(k, "eu", c, 0, 1, 1, 1), part(k, "us", c, 0, 1, 1, 2))
	}
	parts = append(parts, part("z", "eu", durable.PartFence, 0, 1, 1, 1))
	must(t, r.SaveRegionParts(ctx, parts))
	var keys []string
	after := ""
	for {
		page, err := r.ListRegionParts(ctx, "eu", c, after, 2)
		must(t, err)
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			if p.Origin != "eu" || p.Kind != c {
				t.Fatalf("ListRegionParts(eu) gave %+v", p)
			}
			keys = append(keys, p.Key)
		}
		after = page[len(page)-1].Key
	}
	if want := []string{"a", "a#1", "b", "c", "é"}; len(keys) != len(want) || keys[0] != "a" || keys[1] != "a#1" || keys[4] != "é" {
		t.Fatalf("listed %v, want %v (byte order)", keys, want)
	}
	// Reopened, the parts are there.
	_, r2 := regions(t, open)
	wantParts(t, r2, "b", part("b", "eu", c, 0, 1, 1, 1), part("b", "us", c, 0, 1, 1, 2))
}

func testRegionInvalid(t *testing.T, open func(t *testing.T) durable.Backend) {
	b, r := regions(t, open)
	ctx := ctxT(t)
	for _, p := range []durable.RegionPart{
		part("", "us", durable.PartContribution, 0, 0, 0, 1),
		part("k", "", durable.PartContribution, 0, 0, 0, 1),
		part("k", "us", 0, 0, 0, 0, 1),
		part("k", "us", durable.PartFence, math.MaxUint64, 0, 0, 1),
		part("k\x00", "us", durable.PartFence, 0, 0, 0, 1),
	} {
		if err := r.SaveRegionParts(ctx, []durable.RegionPart{part("ok", "us", durable.PartContribution, 0, 0, 0, 1), p}); !errors.Is(err, durable.ErrInvalidPart) {
			t.Fatalf("SaveRegionParts(%+v) = %v, want ErrInvalidPart", p, err)
		}
	}
	wantParts(t, r, "ok")
	must(t, b.Close())
	if err := r.SaveRegionParts(ctx, []durable.RegionPart{part("ok", "us", durable.PartContribution, 0, 0, 0, 1)}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("SaveRegionParts after Close = %v, want ErrClosed", err)
	}
	if _, err := r.LoadRegionParts(ctx, []string{"ok"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("LoadRegionParts after Close = %v, want ErrClosed", err)
	}
}
