package durable

import (
	"cmp"
	"context"
	"errors"
	"time"
)

// ErrInvalidPart: a region part has an empty or malformed Key or Origin,
// an unknown Kind, or a version field above math.MaxInt64.
var ErrInvalidPart = errors.New("hotcount: invalid region part")

// PartKind says what a RegionPart records.
type PartKind uint8

// Kinds of region parts.
const (
	// PartContribution is an origin region's own total of a counter: the
	// sum of the increments made in that region since its clear epoch.
	PartContribution PartKind = 1
	// PartFence is what a clear removed of an origin's contribution: the
	// contribution as the clearing region had received it. Reads subtract
	// it while the contribution is of the same epoch.
	PartFence PartKind = 2
)

// RegionPart is one origin region's part of a counter, as a region keeps it
// (see internal/regions). Parts of one (Key, Origin, Kind) are ordered by
// their version (Epoch, Lease, Seq); the newest wins.
type RegionPart struct {
	// Key is the counter key.
	Key string
	// Origin is the region whose increments Value sums.
	Origin string
	// Kind is PartContribution or PartFence.
	Kind PartKind
	// Epoch is the origin's clear epoch of the counter: it rises each time
	// the origin clears the counter, and a contribution of a newer epoch
	// replaces one of an older epoch whatever its value.
	Epoch uint64
	// Lease is the fencing token of the shipper that read Value: a newer
	// lease holder's records win over a stale holder's.
	Lease uint64
	// Seq orders the records of one lease.
	Seq uint64
	// Value is the origin's total (PartContribution) or the total a clear
	// removed (PartFence).
	Value int64
	// At is when the origin read Value.
	At time.Time
}

// Version compares the versions (Epoch, Lease, Seq) of p and q: -1, 0 or +1.
func (p RegionPart) Version(q RegionPart) int {
	return cmp.Or(cmp.Compare(p.Epoch, q.Epoch), cmp.Compare(p.Lease, q.Lease), cmp.Compare(p.Seq, q.Seq))
}

// Regions keeps the region parts of counters: a region's own contributions
// and the peers' contributions and fences it received. A Backend that
// supports regions implements it.
type Regions interface {
	// SaveRegionParts upserts parts in one transaction; a stored part is
	// replaced only by one of a higher version (see RegionPart), so a
	// late or repeated save changes nothing.
	SaveRegionParts(ctx context.Context, parts []RegionPart) error
	// LoadRegionParts returns the stored parts of keys, by key.
	LoadRegionParts(ctx context.Context, keys []string) (map[string][]RegionPart, error)
	// ListRegionParts returns up to limit parts of origin and kind whose
	// key is after the key after, sorted by key (for paging through them
	// after a cache loss).
	ListRegionParts(ctx context.Context, origin string, kind PartKind, after string, limit int) ([]RegionPart, error)
	// DeleteRegionParts removes every part of keys (counters that ended
	// in every region long enough ago: see internal/regions, Collection).
	DeleteRegionParts(ctx context.Context, keys []string) error
}
