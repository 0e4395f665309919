package regions

import (
	"errors"
	"hash/fnv"
	"testing"
	"time"

	"github.com/hotcount/hotcount/durable"
)

var t0 = time.UnixMilli(1_700_000_000_000)

func rec(origin string, kind durable.PartKind, epoch, lease, seq uint64, v int64) durable.RegionPart {
	return durable.RegionPart{Key: "k", Origin: origin, Kind: kind, Epoch: epoch, Lease: lease, Seq: seq, Value: v, At: t0}
}

func TestWireRoundTrip(t *testing.T) {
	for _, p := range []durable.RegionPart{
		rec("us", durable.PartContribution, 0, 0, 0, 0),
		rec("eu-west_1", durable.PartFence, MaxVersionField, 7, 9, -1<<63),
		rec("x", durable.PartContribution, 4, 1_700_000_000_000, 1<<40, 1<<63-1),
	} {
		got, err := Decode(p.Key, field(p), Encode(p))
		if err != nil || got != p && !(got.Version(p) == 0 && got.Value == p.Value && got.At.Equal(p.At) && got.Origin == p.Origin && got.Kind == p.Kind) {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", p, got, err)
		}
	}
	for _, c := range []struct{ field, value string }{
		{"c:us", "2:0:0:0:0:0"},                // another version
		{"c:us", "1:0:0:0:0"},                  // a field short
		{"c:us", "1:x:0:0:0:0"},                // not a number
		{"c:us", "1:9007199254740992:0:0:0:0"}, // epoch past 2^53
		{"c:us", "1:0:0:0:9223372036854775808:0"},
		{"z:us", "1:0:0:0:0:0"},
		{"c:", "1:0:0:0:0:0"},
		{"c:u s", "1:0:0:0:0:0"},
	} {
		if _, err := Decode("k", c.field, c.value); !errors.Is(err, ErrWire) {
			t.Errorf("Decode(%q, %q) = %v, want ErrWire", c.field, c.value, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("c:us", "1:1:2:3:4:5")
	f.Add("f:eu", "1:0:0:0:-9:0")
	f.Fuzz(func(t *testing.T, fieldName, value string) {
		p, err := Decode("k", fieldName, value)
		if err != nil {
			return
		}
		// What decodes encodes back to a record that decodes the same.
		q, err := Decode("k", field(p), Encode(p))
		if err != nil || q.Version(p) != 0 || q.Value != p.Value || !q.At.Equal(p.At) || field(q) != fieldName {
			t.Fatalf("%q %q: %+v then %+v, %v", fieldName, value, p, q, err)
		}
	})
}

func TestMergeKeepsNewest(t *testing.T) {
	var s State
	c := durable.PartContribution
	steps := []struct {
		p    durable.RegionPart
		took bool
		want int64
	}{
		{rec("us", c, 0, 1, 1, 10), true, 10},
		{rec("us", c, 0, 1, 3, 30), true, 30},
		{rec("us", c, 0, 1, 2, 20), false, 30}, // late
		{rec("us", c, 0, 0, 9, 90), false, 30}, // a stale lease holder
		{rec("us", c, 0, 2, 0, 31), true, 31},  // the next lease holder
		{rec("us", c, 2, 0, 0, 1), true, 1},    // a newer epoch: the origin cleared
		{rec("us", c, 0, 9, 9, 99), false, 1},
		{rec("us", c, 2, 0, 0, 1), true, 1}, // a repeat is harmless
	}
	for i, st := range steps {
		if took := s.Merge(st.p); took != st.took || s.Parts["us"].Value != st.want {
			t.Fatalf("step %d: Merge(%+v) = %v, value %d; want %v, %d", i, st.p, took, s.Parts["us"].Value, st.took, st.want)
		}
	}
}

// TestGlobalObservedRemove: a clear removes what the clearing region had
// received from each origin; increments after it (or unseen by it) stay.
func TestGlobalObservedRemove(t *testing.T) {
	c, f := durable.PartContribution, durable.PartFence
	now := t0.Add(1500 * time.Millisecond)
	cases := []struct {
		name  string
		epoch uint64
		local int64
		parts []durable.RegionPart
		want  int64
		us    int64
	}{
		{"no peers", 0, 5, nil, 5, 0},
		{"two peers", 0, 5, []durable.RegionPart{rec("us", c, 0, 1, 1, 7), rec("ap", c, 0, 1, 1, -2)}, 10, 7},
		// eu cleared after it had us=7; us counted 3 more since.
		{"fence on a peer", 0, 0, []durable.RegionPart{rec("us", c, 0, 1, 2, 10), rec("us", f, 0, 1, 1, 7)}, 3, 3},
		// a fence from an older epoch of us is void.
		{"old fence", 0, 0, []durable.RegionPart{rec("us", c, 4, 1, 2, 10), rec("us", f, 2, 1, 9, 7)}, 10, 10},
		// a fence newer than our copy: everything we had of us is removed.
		{"fence ahead of our copy", 0, 0, []durable.RegionPart{rec("us", c, 2, 1, 2, 10), rec("us", f, 4, 1, 1, 7)}, 0, 0},
		// us cleared eu's part as us had it (eu=4 then); eu counted 6 more.
		{"fence on self", 2, 10, []durable.RegionPart{rec("eu", f, 2, 1, 1, 4)}, 6, 0},
		{"fence on an old self", 4, 10, []durable.RegionPart{rec("eu", f, 2, 1, 1, 4)}, 10, 0},
	}
	for _, tc := range cases {
		s := State{Epoch: tc.epoch}
		for _, p := range tc.parts {
			s.Merge(p)
		}
		got, shares := s.Global("eu", tc.local, now)
		if got != tc.want || shares["us"].Value != tc.us {
			t.Errorf("%s: Global = %d, us share %d; want %d, %d", tc.name, got, shares["us"].Value, tc.want, tc.us)
		}
		if sh, ok := shares["us"]; ok && sh.Stale != 1500*time.Millisecond {
			t.Errorf("%s: us stale %v, want 1.5s", tc.name, sh.Stale)
		}
	}
}

func TestParse(t *testing.T) {
	s, bad := Parse("k", map[string]string{
		"e": "4", "c:us": Encode(rec("us", durable.PartContribution, 0, 1, 2, 3)),
		"f:eu": Encode(rec("eu", durable.PartFence, 4, 1, 1, 2)), "c:bad": "junk", "x": "1",
	})
	if bad != 2 || s.Epoch != 4 || s.Parts["us"].Value != 3 || s.Fences["eu"].Value != 2 {
		t.Fatalf("Parse = %+v, bad %d", s, bad)
	}
}

// TestGlobalAfterDeadline: once the deadline register's deadline passed,
// a read counts no contribution of the ended counter (an epoch below the
// one its expiry gives) and the own part under the new epoch, before the
// expiry ran; a contribution of the counter started after it counts.
func TestGlobalAfterDeadline(t *testing.T) {
	at := t0.Add(time.Minute)
	ex := expiredEpoch(at)
	s := State{Deadline: Deadline{Stamp: 5, At: at}}
	s.Merge(rec("us", durable.PartContribution, 0, 1, 1, 20))
	s.Merge(rec("jp", durable.PartContribution, ex, 1, 1, 4))
	s.Merge(rec("eu", durable.PartFence, 0, 1, 1, 7)) // a peer's expiry fenced eu's old part
	if v, _ := s.Global("eu", 10, at.Add(-time.Millisecond)); v != 10-7+20+4 {
		t.Fatalf("before the deadline: %d", v)
	}
	v, shares := s.Global("eu", 3, at)
	if v != 3+4 || shares["us"].Value != 0 || shares["jp"].Value != 4 {
		t.Fatalf("at the deadline: %d %v; want 7 (own 3, jp's new 4, us's old part gone)", v, shares)
	}
	for _, c := range []string{"1:0", "7:1700000000000"} {
		d, err := decodeDeadline(c)
		if err != nil || encodeDeadline(d) != c {
			t.Fatalf("deadline %q: %+v, %v, encodes %q", c, d, err, encodeDeadline(d))
		}
	}
	for _, c := range []string{"", "0:5", "1", "x:1", "1:-1", "1:1:1"} {
		if _, err := decodeDeadline(c); !errors.Is(err, ErrWire) {
			t.Errorf("decodeDeadline(%q) = %v, want ErrWire", c, err)
		}
	}
	if p, bad := Parse("k", map[string]string{"d": "9:1700000060000", "c:us": Encode(rec("us", durable.PartContribution, 0, 1, 1, 2))}); bad != 0 || p.Deadline.Stamp != 9 || !p.Deadline.At.Equal(at) {
		t.Fatalf("Parse = %+v, %d bad", p, bad)
	}
}

// TestFNV32a checks the hash of buckets and shards against hash/fnv.
func TestFNV32a(t *testing.T) {
	for _, k := range []string{"", "a", "likes:post:42", "tail:99999", "\xff\x00x"} {
		h := fnv.New32a()
		h.Write([]byte(k))
		if got, want := fnv32a(k), h.Sum32(); got != want {
			t.Errorf("fnv32a(%q) = %d, want %d", k, got, want)
		}
	}
}
