package sqlkit

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// CheckCheckpoints validates checkpoints for SaveCheckpoints.
func CheckCheckpoints(cps []durable.Checkpoint) error {
	for i, c := range cps {
		if !durable.ValidKey(c.Key) {
			return fmt.Errorf("%w: checkpoint %d: bad key %q", durable.ErrInvalidCheckpoint, i, c.Key)
		}
		if c.Epoch > math.MaxInt64 {
			return fmt.Errorf("%w: checkpoint %d: epoch %d above MaxInt64", durable.ErrInvalidCheckpoint, i, c.Epoch)
		}
	}
	return nil
}

// LatestCheckpoints keeps, per key, the Newest of cps (the last one wins a
// tie), so that a batch upsert never touches a row twice.
func LatestCheckpoints(cps []durable.Checkpoint) []durable.Checkpoint {
	idx := make(map[string]int, len(cps))
	out := make([]durable.Checkpoint, 0, len(cps))
	for _, c := range cps {
		if i, ok := idx[c.Key]; ok {
			if c.Newer(out[i]) {
				out[i] = c
			}
			continue
		}
		idx[c.Key] = len(out)
		out = append(out, c)
	}
	return out
}

// CheckpointRow is a checkpoint in stored form, with the counter it
// belongs to (for tombstones).
type CheckpointRow struct {
	Key, Counter string
	Total, Epoch int64
	At           int64 // Unix nanoseconds (Nanos)
}

// CheckpointRows validates cps, keeps the newest per key and converts them
// to stored form.
func CheckpointRows(cps []durable.Checkpoint) ([]CheckpointRow, error) {
	if err := CheckCheckpoints(cps); err != nil {
		return nil, err
	}
	cps = LatestCheckpoints(cps)
	out := make([]CheckpointRow, len(cps))
	for i, c := range cps {
		out[i] = CheckpointRow{Key: c.Key, Counter: CounterOf(c.Key), Total: c.Total, Epoch: int64(c.Epoch), At: Nanos(c.At)}
	}
	return out, nil
}

// Checkpoint converts a stored checkpoint back.
func Checkpoint(key string, total, epoch, at int64) durable.Checkpoint {
	return durable.Checkpoint{Key: key, Total: total, Epoch: uint64(epoch), At: FromNanos(at)}
}

// CounterOf returns the counter a checkpoint key belongs to: the counter of
// a sub-key "{counter#label}" (keyspace.ParseSubKey), else the key itself.
func CounterOf(key string) string {
	if k, _, ok := keyspace.ParseSubKey(key); ok {
		return k
	}
	return key
}

// SubKeyRange returns the range [lo, hi) of keys, in byte order, that holds
// every sub-key "{counter#label}" of counter; it holds sub-keys of other
// counters too ("{counter#x#label}" of counter "counter#x"), so filter with
// CounterOf.
func SubKeyRange(counter string) (lo, hi string) {
	return "{" + counter + "#", "{" + counter + "$" // '$' follows '#'
}

// SortKeys sorts keys in byte order (the same in every backend) and drops
// repeats.
func SortKeys(keys []string) []string {
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Nanos converts t to Unix nanoseconds, the stored form of every time; the
// zero time becomes math.MinInt64.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// FromNanos converts stored Unix nanoseconds back to a time.Time (Nanos'
// inverse).
func FromNanos(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Retention is the validated retention settings shared by the backends'
// Configs.
type Retention struct {
	// IDs is the dedup window.
	IDs time.Duration
	// Tombstones is how long a tombstone is kept.
	Tombstones time.Duration
}

// NewRetention applies the defaults to zero values and rejects negative
// ones.
func NewRetention(dedup, tombstones time.Duration) (Retention, error) {
	if dedup < 0 || tombstones < 0 {
		return Retention{}, fmt.Errorf("%w: negative retention (dedup window %v, tombstones %v)",
			durable.ErrInvalidConfig, dedup, tombstones)
	}
	r := Retention{IDs: dedup, Tombstones: tombstones}
	if r.IDs == 0 {
		r.IDs = durable.DefaultDedupWindow
	}
	if r.Tombstones == 0 {
		r.Tombstones = durable.DefaultTombstoneRetention
	}
	return r, nil
}

// Tables are the tables of a store, for Stats.
var Tables = []string{"checkpoints", "totals", "events", "ids", "bounds", "meta", "clears", "deadlines", "region_parts"}

// ClearKey validates the key of ClearCounter.
func ClearKey(key string) error {
	if !durable.ValidKey(key) {
		return fmt.Errorf("%w: clear key %q", keyspace.ErrInvalidKey, key)
	}
	return nil
}
