package regions

import (
	"strconv"
	"time"

	"github.com/hotcount/hotcount/durable"
)

// State is what one region knows of one counter beyond its own
// sub-counters: its own clear epoch, the peers' contributions as last
// received, and the fences clears set on any origin (itself included).
type State struct {
	// Epoch is the region's own clear epoch of the counter (0: never
	// cleared). An odd epoch means a clear is under way.
	Epoch uint64
	// Parts are the peers' contributions, by origin.
	Parts map[string]durable.RegionPart
	// Fences are the fences, by origin.
	Fences map[string]durable.RegionPart
	// Deadline is the counter's deadline register (not Set: none).
	Deadline Deadline
}

// Share is one region's part of a global reading.
type Share struct {
	// Value is what the region adds to the total.
	Value int64
	// Stale is how old the region's contribution is (zero for the local
	// region).
	Stale time.Duration
}

// Merge adds p to s when it is newer than what s holds for its origin and
// kind; it reports whether it did.
func (s *State) Merge(p durable.RegionPart) bool {
	m := &s.Parts
	if p.Kind == durable.PartFence {
		m = &s.Fences
	}
	if old, ok := (*m)[p.Origin]; ok && p.Version(old) < 0 {
		return false
	}
	if *m == nil {
		*m = make(map[string]durable.RegionPart)
	}
	(*m)[p.Origin] = p
	return true
}

// fenced returns value less what fence f removes of a contribution of
// epoch: all of it when f is of that epoch, nothing when f is of an older
// epoch. A fence of a newer epoch than the contribution means the
// contribution is older than what a clear already removed: nothing of it
// is left.
func fenced(value int64, epoch uint64, f durable.RegionPart, ok bool) int64 {
	switch {
	case !ok || f.Epoch < epoch:
		return value
	case f.Epoch == epoch:
		return value - f.Value
	}
	return 0
}

// Global returns the global value of the counter in region self, whose
// own sub-counters sum to local, at now: local less the fence on self,
// plus every peer's contribution less the fence on it. It returns each
// region's share too.
//
// A deadline that passed ends the counter as a clear at the deadline
// would, before the region's shipper runs that clear: the own part counts
// under the epoch the clear gives it, and a peer's contribution of an
// older epoch counts nothing.
func (s *State) Global(self string, local int64, now time.Time) (int64, map[string]Share) {
	epoch, ended := s.Epoch, uint64(0)
	if s.Deadline.Passed(now) {
		ended = expiredEpoch(s.Deadline.At)
		epoch = max(epoch, ended)
	}
	f, ok := s.Fences[self]
	own := fenced(local, epoch, f, ok)
	shares := map[string]Share{self: {Value: own}}
	total := own
	for origin, p := range s.Parts {
		if origin == self || p.Epoch < ended {
			continue
		}
		f, ok := s.Fences[origin]
		v := fenced(p.Value, p.Epoch, f, ok)
		total += v
		stale := now.Sub(p.At)
		if stale < 0 {
			stale = 0
		}
		shares[origin] = Share{Value: v, Stale: stale}
	}
	return total, shares
}

// Parse builds the State of key from its region hash (field → value, as
// HGETALL returns it). Fields that do not parse are skipped and counted
// in bad.
func Parse(key string, hash map[string]string) (s State, bad int) {
	for f, v := range hash {
		if f == fieldDeadline {
			d, err := decodeDeadline(v)
			if err != nil {
				bad++
			}
			s.Deadline = d
			continue
		}
		if f == fieldEpoch {
			e, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				bad++
			}
			s.Epoch = e
			continue
		}
		p, err := Decode(key, f, v)
		if err != nil {
			bad++
			continue
		}
		s.Merge(p)
	}
	return s, bad
}
