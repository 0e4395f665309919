package server

import (
	"context"
	"errors"
	"time"

	"github.com/hotcount/hotcount"
)

// Counters is what the server needs from a backend: the four counter
// operations of hotcount.Client, which satisfies it as is.
type Counters interface {
	// Incr adds delta to key.
	Incr(ctx context.Context, key string, delta int64) error
	// Get returns key's current reading.
	Get(ctx context.Context, key string) (hotcount.Reading, error)
	// GetMulti returns the readings of many keys.
	GetMulti(ctx context.Context, keys []string) (map[string]hotcount.Reading, error)
	// Clear deletes key; clearing a missing key is not an error.
	Clear(ctx context.Context, key string) error
}

// The optional capabilities below are discovered by type assertion on the
// backend. An endpoint whose capability is missing answers 501.

// IdempotentIncr applies an increment at most once per id.
type IdempotentIncr interface {
	// IncrID adds delta to key unless an increment with the same id was
	// applied already, in which case it succeeds without change.
	IncrID(ctx context.Context, key string, delta int64, id string) error
}

// ExactReader reads a counter from the durable log (rollup + tail) instead
// of the cache.
type ExactReader interface {
	// GetExact returns the exact value of key.
	GetExact(ctx context.Context, key string) (hotcount.Reading, error)
}

// ModeReporter names the durability mode of a key: ModeFast or
// ModeDurable. Without it every key reports ModeFast.
type ModeReporter interface {
	// Mode returns the mode of the namespace key belongs to.
	Mode(key string) string
}

// Durability modes, as reported in readings.
const (
	// ModeFast: the cache holds the counter, checkpointed on a schedule.
	ModeFast = "fast"
	// ModeDurable: every increment is logged before it is acknowledged.
	ModeDurable = "durable"
)

// ShardReporter reports where a counter's sub-counters live.
type ShardReporter interface {
	// Shards returns the placement report of key.
	Shards(ctx context.Context, key string) (Report, error)
}

// Resizer changes the number of sub-counters of a counter.
type Resizer interface {
	// Resize sets key's number of sub-counters to n (grow at once, shrink
	// by folding).
	Resize(ctx context.Context, key string, n int) error
}

// Placement maps counters to nodes so that the server can attribute write
// rates to nodes when the backend does not measure them itself.
type Placement interface {
	// SubCounterNodes returns the node of each of key's sub-counters (one
	// entry per sub-counter, so a node may repeat).
	SubCounterNodes(ctx context.Context, key string) ([]string, error)
	// Nodes returns every node of the backend.
	Nodes(ctx context.Context) ([]string, error)
}

// NodeRates is a backend that measures per-node write rates itself.
type NodeRates interface {
	// NodeRates returns the current write rate of every node.
	NodeRates() []NodeRate
}

// HotKeys is a backend that measures per-key write rates itself.
type HotKeys interface {
	// HotKeys returns up to n of the hottest keys, hottest first.
	HotKeys(n int) []HotKey
}

// Healthy is a backend that can be probed; /readyz calls Ping.
type Healthy interface {
	// Ping returns nil when the backend answers.
	Ping(ctx context.Context) error
}

// Report is the placement report of one counter.
type Report struct {
	// Key is the counter key.
	Key string `json:"key"`
	// N is the number of sub-counters.
	N int `json:"n"`
	// DistinctNodes is how many different nodes hold the sub-counters.
	DistinctNodes int `json:"distinct_nodes"`
	// Value is the sum of the sub-counters.
	Value int64 `json:"value"`
	// Shards lists the sub-counters.
	Shards []Shard `json:"shards"`
	// Collisions counts sub-counters of the write set beyond an even
	// spread over the primaries (0 while placement is intact; a slot
	// migration can raise it).
	Collisions int `json:"collisions"`
}

// Shard is one sub-counter in a Report.
type Shard struct {
	// Label is the sub-counter's label.
	Label string `json:"label"`
	// SubKey is its cache key.
	SubKey string `json:"key"`
	// Node is the node that owns its slot.
	Node string `json:"node"`
	// Slot is its hash slot.
	Slot int `json:"slot"`
	// Value is its current value.
	Value int64 `json:"value"`
}

// NodeRate is the write rate of one node.
type NodeRate struct {
	// Node names the node.
	Node string `json:"node"`
	// Rate is writes per second.
	Rate float64 `json:"rate"`
}

// HotKey is the write rate of one counter.
type HotKey struct {
	// Key is the counter key.
	Key string `json:"key"`
	// Rate is increments per second.
	Rate float64 `json:"rate"`
	// N is the counter's number of sub-counters (0 when unknown).
	N int `json:"n"`
	// Reason explains the last automatic-N decision about the key, if any.
	Reason string `json:"reason,omitempty"`
}

// Decision is one automatic grow or shrink of a counter's N.
type Decision struct {
	At     time.Time `json:"at"`
	Key    string    `json:"key"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	Rate   float64   `json:"rate"`
	Action string    `json:"action"`
	Reason string    `json:"reason"`
	Error  string    `json:"error,omitempty"`
}

// AutoN is a backend that resizes hot counters by itself; /v1/hotkeys and
// the dashboard show its recent decisions.
type AutoN interface {
	// Decisions returns recent decisions, oldest first.
	Decisions() []Decision
}

// ErrNotDurable may be wrapped by ExactReader.GetExact when key is not in a
// durable namespace; the server answers 400.
var ErrNotDurable = errors.New("hotcount: exact reads need a durable namespace")
