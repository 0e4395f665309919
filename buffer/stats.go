package buffer

import (
	"math"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of one Buffer's gauges and counters.
type Stats struct {
	// Unflushed is the signed sum of every delta not yet acknowledged by
	// the sink (accumulating and in flight), saturated at the int64 range.
	Unflushed int64
	// UnflushedAbs is the sum of the magnitudes of the unacknowledged
	// deltas (a key's accumulating delta and each of its ops counted
	// apart), saturated at the uint64 range.
	UnflushedAbs uint64
	// PendingKeys is the number of keys with a non-zero unacknowledged
	// delta.
	PendingKeys int
	// InFlight is the number of ops cut for a flush and not yet
	// acknowledged.
	InFlight int
	// HeldKeys is the number of entries counted against
	// Config.MaxPendingKeys: cells plus ops in flight.
	HeldKeys int
	// OldestUnflushed is the age of the oldest unacknowledged delta; zero
	// when there is none. The time a delta is first buffered is taken as
	// the key's first Add or the last flush, whichever is later, so this
	// can overstate the age by up to one interval, never understate it.
	OldestUnflushed time.Duration

	// Flushes counts flush rounds that sent at least one op.
	Flushes uint64
	// FlushErrors counts flush rounds in which some op failed.
	FlushErrors uint64
	// Retries counts ops sent again after a failure.
	Retries uint64
	// OpsApplied counts ops the sink applied.
	OpsApplied uint64
	// OpsSkipped counts ops the sink reported as already applied (their
	// token was used by an earlier attempt whose reply was lost).
	OpsSkipped uint64
	// PermanentErrors counts op attempts the sub-counter rejected
	// (store.ErrOverflow, store.ErrNotInteger).
	PermanentErrors uint64
	// Dropped counts ops the cache refused because the sub-counter would
	// pass its bound (store.MaxValue); DroppedDelta sums their deltas.
	// Such a delta can never be written, so it is dropped instead of
	// retried. A value that is not an integer keeps its delta for retry.
	Dropped      uint64
	DroppedDelta int64
	// Backpressure counts Adds refused with ErrBackpressure.
	Backpressure uint64
	// ColdWrites counts cold keys' flushes sent as plain INCRBYs that
	// were answered or got no reply (see Config.HotAt).
	ColdWrites uint64
	// ColdDropped counts cold flushes that got no reply (a timeout, a
	// connection lost with the command on it): such a flush may have been
	// applied, and sending it again could count it twice, so it is dropped;
	// ColdDroppedDelta sums their deltas. Each is at most one flush of one
	// key lost.
	ColdDropped      uint64
	ColdDroppedDelta int64
}

type counters struct {
	flushes, flushErrors, retries, applied, skipped, permanent, backpressure, dropped atomic.Uint64
	coldWrites, coldDropped                                                           atomic.Uint64
	droppedDelta, coldDroppedDelta                                                    atomic.Int64
}

// Stats returns a snapshot of the gauges and counters. It scans every
// buffered key, so call it at metrics-scrape rate, not per request.
func (b *Buffer) Stats() Stats {
	s := Stats{
		Flushes:         b.stats.flushes.Load(),
		FlushErrors:     b.stats.flushErrors.Load(),
		Retries:         b.stats.retries.Load(),
		OpsApplied:      b.stats.applied.Load(),
		OpsSkipped:      b.stats.skipped.Load(),
		PermanentErrors: b.stats.permanent.Load(),
		Backpressure:    b.stats.backpressure.Load(),
		Dropped:         b.stats.dropped.Load(),
		DroppedDelta:    b.stats.droppedDelta.Load(),

		ColdWrites:       b.stats.coldWrites.Load(),
		ColdDropped:      b.stats.coldDropped.Load(),
		ColdDroppedDelta: b.stats.coldDroppedDelta.Load(),
	}
	now := b.cfg.Clock.Now().UnixNano()
	oldest := int64(math.MaxInt64)
	b.opsMu.RLock()
	defer b.opsMu.RUnlock()
	for _, list := range b.ops {
		var sum int64
		for _, o := range list {
			sum = satAdd(sum, o.delta)
			oldest = min(oldest, o.since)
			s.InFlight++
		}
		s.PendingKeys++
		s.add(sum)
	}
	cells := 0
	for i := range b.shards {
		t := b.shards[i].tab.Load()
		for j := range t.slots {
			c := t.slots[j].Load()
			if c == nil {
				continue
			}
			v := c.v.Load()
			if v < deadZone {
				continue
			}
			if ls := c.lanes.Load(); ls != nil {
				v += ls.sum()
			}
			cells++
			if v == 0 {
				continue
			}
			oldest = min(oldest, c.since.Load())
			if _, ok := b.ops[c.key]; !ok {
				s.PendingKeys++
			}
			s.add(v)
		}
	}
	s.HeldKeys = cells + s.InFlight
	if oldest != math.MaxInt64 && oldest < now {
		s.OldestUnflushed = time.Duration(now - oldest)
	}
	return s
}

// add accounts one key's (or one part of a key's) delta.
func (s *Stats) add(v int64) {
	s.Unflushed = satAdd(s.Unflushed, v)
	mag := uint64(v)
	if v < 0 {
		mag = -uint64(v)
	}
	if s.UnflushedAbs+mag < s.UnflushedAbs {
		s.UnflushedAbs = math.MaxUint64
	} else {
		s.UnflushedAbs += mag
	}
}

// satAdd returns a+b clamped to the int64 range.
func satAdd(a, b int64) int64 {
	c := a + b
	switch {
	case b > 0 && c < a:
		return math.MaxInt64
	case b < 0 && c > a:
		return math.MinInt64
	}
	return c
}

// Merge returns the stats of two buffers together: counts and gauges add
// up (saturating), and OldestUnflushed is the older of the two.
func (s Stats) Merge(o Stats) Stats {
	s.Unflushed = satAdd(s.Unflushed, o.Unflushed)
	if s.UnflushedAbs+o.UnflushedAbs < s.UnflushedAbs {
		s.UnflushedAbs = math.MaxUint64
	} else {
		s.UnflushedAbs += o.UnflushedAbs
	}
	s.PendingKeys += o.PendingKeys
	s.InFlight += o.InFlight
	s.HeldKeys += o.HeldKeys
	s.OldestUnflushed = max(s.OldestUnflushed, o.OldestUnflushed)
	s.Flushes += o.Flushes
	s.FlushErrors += o.FlushErrors
	s.Retries += o.Retries
	s.OpsApplied += o.OpsApplied
	s.OpsSkipped += o.OpsSkipped
	s.PermanentErrors += o.PermanentErrors
	s.Backpressure += o.Backpressure
	s.Dropped += o.Dropped
	s.DroppedDelta = satAdd(s.DroppedDelta, o.DroppedDelta)
	s.ColdWrites += o.ColdWrites
	s.ColdDropped += o.ColdDropped
	s.ColdDroppedDelta = satAdd(s.ColdDroppedDelta, o.ColdDroppedDelta)
	return s
}
