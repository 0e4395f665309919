// Package store defines the sharded cache that holds sub-counters, and the
// errors every backend reports in the same way.
//
// A backend is a set of nodes (Redis Cluster primaries, or the simulated
// nodes of store/mem); each key belongs to the node that owns its slot
// (keyspace.Slot). Reads of many keys are grouped by node and sent as one
// pipelined round per node, never as a cross-slot MGET, so a counter's N
// sub-keys cost one round trip to each node that holds any of them.
//
// Implementations: store/redis (rueidis; standalone or Cluster, detected) and
// store/mem (in-process, K simulated nodes).
package store

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// MaxValue is the largest magnitude an increment may leave on a
// sub-counter: 2^53 − 1, so that the sum of any keyspace.MaxN (1,024)
// sub-counters stays within int64 and no accepted increment can make a
// counter unreadable. IncrMulti refuses (ErrOverflow, nothing changed) a
// tokened increment that would pass it; the Client checks the value IncrBy returns
// and takes back an increment that passed it. Folds, which only move
// values between sub-counters, are not bounded. 2^53 − 1 is also the
// largest integer a Lua number (a double) holds exactly, so a script can
// compare against it without rounding.
const MaxValue = 1<<53 - 1

// Named errors shared by all backends. Wrap them; test with errors.Is.
var (
	// ErrOverflow: the increment would take the value outside int64; nothing
	// was changed.
	ErrOverflow = errors.New("hotcount: increment would overflow int64")
	// ErrNotInteger: a key holds something that is not a decimal int64.
	ErrNotInteger = errors.New("hotcount: value is not an integer")
	// ErrUnavailable: the backend could not be reached or did not answer in
	// time. The operation may be retried.
	ErrUnavailable = errors.New("hotcount: backend unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("hotcount: store closed")
	// ErrNoReply: a command was sent (or may have been) and no reply came
	// back: a timeout, or a connection lost with the command on it. It
	// always comes with ErrUnavailable. Whether the command ran is not
	// known, so a write that is not idempotent must not be sent again;
	// one that failed with ErrUnavailable alone was never sent and may
	// be.
	ErrNoReply = errors.New("hotcount: sent, no reply (outcome unknown)")
)

// Store is a sharded cache of int64 counters.
type Store interface {
	// IncrBy adds delta to key and returns the new value. On overflow it
	// returns ErrOverflow and leaves the value unchanged.
	IncrBy(ctx context.Context, key string, delta int64) (int64, error)
	// IncrMulti applies many increments, grouped by node, one pipelined
	// round per node (bounded concurrency, a timeout per round). An op
	// with a TokenKey (every sub-counter write the Client batches) that
	// would take its key past ±MaxValue fails with ErrOverflow and changes
	// nothing. An op with
	// a TokenKey is applied at most once per token within its TTL: the
	// token check, the token write and the increment are one atomic step
	// in the key's slot, so a retried op never double-counts; an op with
	// a SeqKey likewise, by its writer's sequence number. An op with
	// neither is a plain INCRBY; a result error of such an op that wraps
	// ErrNoReply means it may have been applied. The result
	// slice matches ops; err is set only when nothing could be attempted.
	IncrMulti(ctx context.Context, ops []IncrOp) ([]IncrResult, error)
	// Get reads keys, one pipelined round per node; a missing key reads 0.
	Get(ctx context.Context, keys []string) ([]int64, error)
	// Del deletes keys (missing keys are fine), grouped by node.
	Del(ctx context.Context, keys []string) error
	// Topology returns the current slot→node map.
	Topology(ctx context.Context) (*Topology, error)
	// Close releases connections. It is idempotent.
	Close() error
}

// NodeUsage is what one cache node holds.
type NodeUsage struct {
	// Node is the node's address (or name).
	Node string
	// Keys is its key count (DBSIZE) and Bytes the memory it uses
	// (used_memory).
	Keys, Bytes int64
}

// Usager is a Store that can tell what each node holds. It reads every
// node: call it at the pace of a metrics scrape, not per request.
type Usager interface {
	// Usage returns what each primary holds.
	Usage(ctx context.Context) ([]NodeUsage, error)
}

// IncrOp is one increment for IncrMulti.
type IncrOp struct {
	// Key is the sub-key to increment.
	Key string
	// Delta is added to Key.
	Delta int64
	// TokenKey, when not empty, makes the op idempotent: it must be in
	// Key's slot (keyspace.AuxKey) and is kept for TTL after use.
	TokenKey string
	// SeqKey, when not empty (and TokenKey empty), makes the op
	// idempotent by writer sequence: SeqKey is a hash in Key's slot
	// (keyspace.SeqKey) that holds, per Writer, the highest Seq applied
	// to Key. The op is applied only if Seq is above it, and then records
	// Seq, in one atomic step. A writer must number its ops to one
	// sub-counter in increasing order and send the next only after the
	// previous one was acknowledged; a retry reuses its Seq. The hash is
	// kept for TTL after its last write, and holds one field per writer:
	// the state grows with the writers, not with the flushes.
	SeqKey string
	// Writer names the writing process for SeqKey (unique per process
	// run, e.g. 64 random bits in hex); Seq is the op's number, > 0.
	Writer string
	Seq    uint64
	// TTL is how long the token or sequence is remembered; zero means
	// DefaultTokenTTL.
	TTL time.Duration
	// ExpireAt, when not zero, is given to Key as its deadline if it has
	// none (Redis PEXPIREAT … NX), in the same atomic step.
	ExpireAt time.Time
}

// Mark is the record mark of a counter (keyspace.MarkKey): a key in the
// slot of its cold sub-counter that exists whenever the counter has a
// metadata record (package meta keeps it so), so that an increment of the
// cold sub-counter learns, in its own round trip, whether the counter is
// cold.
type Mark struct {
	// Key is the counter key (not the mark's key).
	Key string
	// Value tells one record's mark from another's (a record's
	// generation): a mark is deleted only if it holds the value of the
	// record that was deleted.
	Value int64
	// ExpireAt is when the mark expires; zero means never.
	ExpireAt time.Time
}

// DeadlineGrace is how long after a sharded counter's deadline the cache
// keeps its sub-counters, and, twice as long, its metadata record: readers
// take the counter as gone at the deadline, and the record outlives every
// sub-counter, so no reader sums part of an expired counter. It bounds the
// clock skew allowed between processes and cache nodes.
const DeadlineGrace = time.Minute

// Deadline is what a store knows of a key's life.
type Deadline struct {
	// Exists reports whether the key holds a value.
	Exists bool
	// At is the key's deadline; zero when it has none.
	At time.Time
}

// IncrResult is the outcome of one IncrOp.
type IncrResult struct {
	// Applied is false when the token had been used already (the earlier
	// call applied the delta) or when Err is set.
	Applied bool
	// Value is the new value when Applied.
	Value int64
	// Err is ErrOverflow, ErrNotInteger, ErrUnavailable, ... (nothing was
	// applied).
	Err error
}

// DefaultTokenTTL is how long a flush token is remembered when IncrOp.TTL is
// zero.
const DefaultTokenTTL = 10 * time.Minute

// Topology is an immutable snapshot of which node owns each slot.
type Topology struct {
	// Nodes are the primaries, sorted, as "host:port" (or a simulated name).
	Nodes []string
	// Owner[slot] is an index into Nodes.
	Owner [keyspace.SlotCount]uint16
	// Epoch increases whenever the map changes.
	Epoch uint64
}

// NodeOf returns the node that owns key's slot.
func (t *Topology) NodeOf(key string) string { return t.Nodes[t.Owner[keyspace.Slot(key)]] }

// NodeOfSlot returns the node that owns slot.
func (t *Topology) NodeOfSlot(slot uint16) string { return t.Nodes[t.Owner[slot]] }

// Even returns a topology of the named nodes with the slots split into
// contiguous equal ranges, in the order Redis' cluster creation assigns them.
func Even(nodes []string) *Topology {
	t := &Topology{Nodes: append([]string(nil), nodes...), Epoch: 1}
	k := len(nodes)
	per := float64(keyspace.SlotCount) / float64(k)
	first, cursor := 0, 0.0
	for i := range k {
		// redis-cli --cluster create: last = round(cursor + per - 1).
		last := int(math.Round(cursor + per - 1))
		if last >= keyspace.SlotCount || i == k-1 {
			last = keyspace.SlotCount - 1
		}
		for s := first; s <= last; s++ {
			t.Owner[s] = uint16(i)
		}
		first = last + 1
		cursor += per
	}
	return t
}
