package durabletest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
)

// pagedKeys are keys whose order and prefixes put page boundaries where
// ranges end: keys that are prefixes of others, a character just below
// the surrogates, the last character there is.
var pagedKeys = []string{
	"p", "p:", "p:a", "p:a:b", "p:a:c", "p:b", "p;", "pa", "q",
	"é", "é:1", "é:2", "\ud7ff", "\ud7ff:1", "\ue000",
	"\U0010ffff", "\U0010ffff:1", "\U0010ffff\U0010ffff",
}

// pagedPrefixes are the prefixes paged through: none, the keys' own, one
// of no key.
var pagedPrefixes = []string{"", "p", "p:", "p:a", "é", "\ud7ff", "\U0010ffff", "zz"}

// pageAll reads every page of list from after, limit at a time, and
// checks that every page but the last is full.
func pageAll(t *testing.T, list func(after string, limit int) ([]string, error), after string, limit int) []string {
	t.Helper()
	var out []string
	for range 1000 {
		page, err := list(after, limit)
		must(t, err)
		if len(page) > limit {
			t.Fatalf("page after %q of %d keys, limit %d", after, len(page), limit)
		}
		out = append(out, page...)
		if len(page) < limit {
			return out
		}
		after = page[len(page)-1]
	}
	t.Fatal("paging did not end")
	return nil
}

// withPrefix returns the keys of all that start with prefix, in byte order.
func withPrefix(all []string, prefix, after string) []string {
	var out []string
	for _, k := range all {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func testKeysAfter(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	old := clock.Start.Add(-time.Hour)
	// Every third key only in the totals, every third in both, the others
	// only in the events (several rows each).
	for i, k := range pagedKeys {
		if i%3 != 2 {
			_, err := b.AppendEvents(ctx, []durable.Event{{Key: k, Delta: 1, ID: "old", At: old}})
			must(t, err)
		}
	}
	_, err := b.Rollup(ctx, old.Add(time.Minute))
	must(t, err)
	for i, k := range pagedKeys {
		if i%3 != 0 {
			for j := range 3 {
				appendOK(t, b, ev(k, 1, fmt.Sprint("new", j)))
			}
		}
	}
	list := func(prefix string) func(after string, limit int) ([]string, error) {
		return func(after string, limit int) ([]string, error) { return b.KeysAfter(ctx, prefix, after, limit) }
	}
	for _, prefix := range pagedPrefixes {
		want := withPrefix(pagedKeys, prefix, "")
		whole, err := b.Keys(ctx, prefix)
		must(t, err)
		if fmt.Sprintf("%q", whole) != fmt.Sprintf("%q", want) {
			t.Fatalf("Keys(%q) = %q, want %q", prefix, whole, want)
		}
		for _, limit := range []int{1, 2, 3, 7, len(want), len(want) + 1, 100} {
			if limit == 0 {
				continue
			}
			if got := pageAll(t, list(prefix), "", limit); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Fatalf("pages of %d of prefix %q = %q, want %q", limit, prefix, got, want)
			}
		}
		// From a cursor before, inside and past the prefix's range.
		for _, after := range []string{"a", "p:a", "p:a:c", "é", "\U0010ffff", "zzz"} {
			wantAfter := withPrefix(pagedKeys, prefix, after)
			if got := pageAll(t, list(prefix), after, 2); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantAfter) {
				t.Fatalf("pages of prefix %q after %q = %q, want %q", prefix, after, got, wantAfter)
			}
		}
	}
	// The cursor at the end: an empty page. A limit of 0: nothing.
	if page, err := b.KeysAfter(ctx, "", pagedKeys[len(pagedKeys)-1], 10); err != nil || len(page) != 0 {
		t.Fatalf("KeysAfter(last) = %q, %v", page, err)
	}
	if page, err := b.KeysAfter(ctx, "", "", 0); err != nil || len(page) != 0 {
		t.Fatalf("KeysAfter(limit 0) = %q, %v", page, err)
	}
	// Keys added between pages: those after the cursor come, those before
	// it do not, and no key comes twice.
	first, err := b.KeysAfter(ctx, "p", "", 3)
	must(t, err)
	appendOK(t, b, ev("p:0", 1, "x"), ev("p:z", 1, "x"))
	rest := pageAll(t, list("p"), first[len(first)-1], 3)
	got := append(slices.Clone(first), rest...)
	want := withPrefix(append(slices.Clone(pagedKeys), "p:z"), "p", "")
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("pages with keys added between them = %q, want %q", got, want)
	}
}

func testCheckpointsAfter(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	var cps []durable.Checkpoint
	for i, k := range pagedKeys {
		cps = append(cps, durable.Checkpoint{Key: k, Total: int64(i + 1), Epoch: 1, At: clock.Start})
	}
	must(t, b.SaveCheckpoints(ctx, cps))
	list := func(prefix string) func(after string, limit int) ([]string, error) {
		return func(after string, limit int) ([]string, error) {
			page, err := b.ListCheckpointsAfter(ctx, prefix, after, limit)
			keys := make([]string, len(page))
			for i, cp := range page {
				keys[i] = cp.Key
				if want := int64(slices.Index(pagedKeys, cp.Key) + 1); cp.Total != want || cp.Epoch != 1 || !cp.At.Equal(clock.Start) {
					t.Fatalf("checkpoint %+v, want total %d, epoch 1, at %v", cp, want, clock.Start)
				}
			}
			return keys, err
		}
	}
	for _, prefix := range pagedPrefixes {
		want := withPrefix(pagedKeys, prefix, "")
		for _, limit := range []int{1, 2, 3, 7, len(want) + 1} {
			if got := pageAll(t, list(prefix), "", limit); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Fatalf("pages of %d of prefix %q = %q, want %q", limit, prefix, got, want)
			}
		}
		for _, after := range []string{"a", "p:a", "é", "\U0010ffff", "zzz"} {
			wantAfter := withPrefix(pagedKeys, prefix, after)
			if got := pageAll(t, list(prefix), after, 2); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantAfter) {
				t.Fatalf("pages of prefix %q after %q = %q, want %q", prefix, after, got, wantAfter)
			}
		}
	}
	first, err := list("")("", 4)
	must(t, err)
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{{Key: "a", Total: 1}, {Key: "zz", Total: 1}}))
	rest := pageAll(t, func(after string, limit int) ([]string, error) {
		page, err := b.ListCheckpointsAfter(ctx, "", after, limit)
		keys := make([]string, len(page))
		for i, cp := range page {
			keys[i] = cp.Key
		}
		return keys, err
	}, first[len(first)-1], 4)
	got := append(slices.Clone(first), rest...)
	want := withPrefix(append(slices.Clone(pagedKeys), "zz"), "", "")
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("pages with checkpoints added between them = %q, want %q", got, want)
	}
}
