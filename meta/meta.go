package meta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/store"
)

// Defaults for the zero values of Config.
const (
	// DefaultTTL is how long a Manager caches a record.
	DefaultTTL = 2 * time.Second
	// DefaultMaxRounds is how many fold-out/fold-in rounds a fold tries
	// before it reports ErrStragglers.
	DefaultMaxRounds = 8
)

// Named errors.
var (
	// ErrConfig: the Config is not usable.
	ErrConfig = errors.New("meta: invalid config")
	// ErrInvalidN: a label count outside 1..keyspace.MaxN.
	ErrInvalidN = errors.New("meta: invalid number of sub-counters")
	// ErrCorrupt: a stored record cannot be decoded or breaks the rules
	// (Write not a subset of Read, empty Write).
	ErrCorrupt = errors.New("meta: corrupt metadata")
	// ErrConflict: the record kept changing under a compare-and-set.
	ErrConflict = errors.New("meta: metadata changed concurrently")
	// ErrStragglers: a folded label still received writes after
	// Config.MaxRounds rounds; the fold stays journaled and Resume retries.
	ErrStragglers = errors.New("meta: folded label keeps receiving writes")
	// ErrPinned: an automatic resize of a counter whose N was set by hand
	// (see Meta.Pinned).
	ErrPinned = errors.New("meta: the counter's N is pinned by a manual resize")
)

// Meta is the metadata record of one counter.
type Meta struct {
	// Epoch increases by one with every change; 0 means "no record".
	// It must stay the first member of the JSON object (see Backend).
	Epoch uint64 `json:"epoch"`
	// Write is the active label set.
	Write []string `json:"write"`
	// Read is every label that may hold a value; a superset of Write.
	Read []string `json:"read"`
	// Folds is the journal of folds in progress.
	Folds []FoldState `json:"folds,omitempty"`
	// Deadline is when the counter expires, in Unix milliseconds; 0 means
	// never. From then on readers take it as gone. Its sub-counters are
	// removed by the cache store.DeadlineGrace later and the record itself
	// 2×store.DeadlineGrace later, so that a reader never sees the record
	// gone while sub-counters remain.
	Deadline int64 `json:"deadline,omitempty"`
	// Gen is drawn when the record is first written and kept by every
	// change, so a record written after a clear or an expiry is told apart
	// from the one before it even when their epochs meet.
	Gen string `json:"gen,omitempty"`
	// Pinned is set when N was chosen by hand (Manager.Pin): automatic N
	// and cooling leave the counter alone (Manager.Resize refuses it)
	// until Manager.Unpin.
	Pinned bool `json:"pinned,omitempty"`
}

// FoldState is one journaled fold: moving the value of From into To.
type FoldState struct {
	// ID names the fold; its markers are keyspace.AuxKey(K, From, "fold",
	// id) and keyspace.AuxKey(K, To, "foldin", id), with id = ID for the
	// first round and ID+".2", ID+".3", ... for straggler rounds.
	ID string `json:"id"`
	// From is the label being retired.
	From string `json:"from"`
	// To is the label that receives From's value.
	To string `json:"to"`
	// Step is FoldStopped until the TTL has been waited out, then
	// FoldMoving.
	Step string `json:"step"`
	// Round is the first round that may not have finished (0 and 1 both
	// mean the first); it is journaled before a straggler round starts.
	Round int `json:"round,omitempty"`
}

// Journaled fold steps.
const (
	// FoldStopped: From is no longer written; the TTL wait is pending.
	FoldStopped = "stopped"
	// FoldMoving: the wait is over; fold-out/fold-in rounds run.
	FoldMoving = "moving"
)

// Step names a point of the grow and fold protocols, reported to
// Config.OnStep right after the step took effect.
type Step string

// Steps, in protocol order.
const (
	StepGrowRead  Step = "grow-read"  // new labels added to Read
	StepGrowWrite Step = "grow-write" // new labels added to Write
	StepStopped   Step = "stopped"    // (a) folded labels removed from Write
	StepWaited    Step = "waited"     // (b) TTL waited out, journaled
	StepOut       Step = "out"        // (c) one FoldOut done
	StepIn        Step = "in"         // (d) one FoldIn done
	StepRetired   Step = "retired"    // (f) folded labels removed from Read
	StepDropped   Step = "dropped"    // a cold counter's record deleted
)

// Backend is the cache operations the protocol needs. *mem.Store and
// *redis.Store implement it.
type Backend interface {
	// GetMeta returns the record of counter key; ok is false when there
	// is none.
	GetMeta(ctx context.Context, key string) (data []byte, ok bool, err error)
	// GetMetas returns the records of many counters (nil: none), one
	// pipelined round per node.
	GetMetas(ctx context.Context, keys []string) ([][]byte, error)
	// CASMeta stores data as key's record if the stored record's epoch
	// equals epoch (0: only if there is no record), atomically. data is a
	// JSON object whose first member is "epoch", a decimal integer. nil
	// data deletes the record (if its epoch matches). A record with a
	// "deadline" member (Unix ms) expires 2×store.DeadlineGrace after it.
	CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error)
	// FoldOut moves the value out of sub-counter label of key, once per
	// foldID: see step (c) in the package documentation.
	FoldOut(ctx context.Context, key, label, foldID string) (moved int64, err error)
	// FoldIn adds delta to sub-counter label of key, once per foldID: see
	// step (d).
	// expireAt, when not zero, is given to the sub-counter as its
	// deadline if it has none, in the same atomic step.
	FoldIn(ctx context.Context, key, label, foldID string, delta int64, expireAt time.Time) (applied bool, err error)
	// Get reads keys; a missing key reads 0.
	Get(ctx context.Context, keys []string) ([]int64, error)
	// SetMarks writes the record marks of counters (keyspace.MarkKey),
	// one pipelined round per node, and reports which it wrote. With
	// onlyNew a mark that exists already is left as it is (SET … NX).
	SetMarks(ctx context.Context, marks []store.Mark, onlyNew bool) (written []bool, err error)
	// DelMark deletes the record mark of counter key if it holds v,
	// atomically.
	DelMark(ctx context.Context, key string, v int64) error
}

// Durable mirrors records in a durable store.
type Durable interface {
	// SaveMeta stores the record of counter key, replacing any earlier one.
	SaveMeta(ctx context.Context, key string, data []byte) error
	// LoadMeta returns the record of counter key, or nil data and a nil
	// error when there is none.
	LoadMeta(ctx context.Context, key string) ([]byte, error)
	// LoadMetas returns the records of many counters; counters without
	// one are absent from the map.
	LoadMetas(ctx context.Context, keys []string) (map[string][]byte, error)
	// DeleteMeta removes the record of counter key (none is fine).
	DeleteMeta(ctx context.Context, key string) error
}

// Config configures a Manager. The zero value of every field is a
// documented default.
type Config struct {
	// TTL is how long a record is cached; 0 means DefaultTTL. Every
	// Manager that shares a backend must use the same TTL (or a shorter
	// one), since folds wait it out.
	TTL time.Duration
	// Margin is added to TTL when a fold waits for writers to stop; 0
	// means TTL/2. It bounds how long a write may take from the Labels
	// call that chose its label to reaching the cache: a slower write to
	// a folded label is a straggler, moved by a re-fold round when it
	// lands before the fold's last round, and otherwise left in the
	// retired sub-key, outside the read set.
	Margin time.Duration
	// Clock is the time source; nil means the system clock.
	Clock clock.Clock
	// Topology returns the current slot→primary map; nil means the
	// backend's Topology method when it has one, else Naive labels.
	Topology func(ctx context.Context) (*store.Topology, error)
	// DefaultN returns the number of sub-counters of a counter without a
	// record (1..keyspace.MaxN); required.
	DefaultN func(key string) int
	// Naive uses keyspace.NaiveLabels for counters without a record
	// instead of placed labels (such defaults are not pinned).
	Naive bool
	// Deadline returns the deadline a counter's first record takes (the
	// deadline of its cold sub-counter, or a new counter's from its
	// namespace's TTL); zero means none. nil means none.
	Deadline func(ctx context.Context, key string) (time.Time, error)
	// Cold reports whether a counter without a record is cold: one
	// sub-counter, keyspace.ColdLabel, and no record until it grows. nil
	// means no counter is: a counter without a record gets DefaultN placed
	// labels (ColdLabel first), pinned by its first writer.
	Cold func(key string) bool
	// Durable, when set, mirrors every record.
	Durable Durable
	// MaxRounds bounds the fold-out/fold-in rounds of one fold; 0 means
	// DefaultMaxRounds.
	MaxRounds int
	// OnStep, when set, is called after each protocol step (for metrics,
	// logs and fault-injection tests). It must not call the Manager.
	OnStep func(key string, step Step)
	// Rand returns random 64-bit values for fold IDs; nil means
	// math/rand/v2. It must be safe for concurrent use.
	Rand func() uint64
}

func (c Config) withDefaults(b Backend) (Config, error) {
	if c.TTL < 0 || c.Margin < 0 || c.MaxRounds < 0 {
		return c, fmt.Errorf("%w: negative TTL, Margin or MaxRounds", ErrConfig)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 2
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Topology == nil {
		if tb, ok := b.(interface {
			Topology(context.Context) (*store.Topology, error)
		}); ok {
			c.Topology = tb.Topology
		}
	}
	if c.DefaultN == nil {
		return c, fmt.Errorf("%w: DefaultN is required", ErrConfig)
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.OnStep == nil {
		c.OnStep = func(string, Step) {}
	}
	if c.Rand == nil {
		c.Rand = rand.Uint64
	}
	return c, nil
}

// encode returns the JSON of m, epoch first.
func (m Meta) encode() []byte {
	data, err := json.Marshal(m)
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return data
}

var epochPrefix = []byte(`{"epoch":`)

// decode parses and checks a stored record.
func decode(data []byte) (Meta, error) {
	var m Meta
	if !bytes.HasPrefix(data, epochPrefix) {
		return m, fmt.Errorf("%w: record does not start with %s", ErrCorrupt, epochPrefix)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if m.Epoch == 0 || len(m.Write) == 0 {
		return m, fmt.Errorf("%w: epoch %d, %d write labels", ErrCorrupt, m.Epoch, len(m.Write))
	}
	for _, l := range m.Write {
		if !slices.Contains(m.Read, l) {
			return m, fmt.Errorf("%w: write label %q is not in the read set", ErrCorrupt, l)
		}
	}
	return m, nil
}

// clone returns a deep copy of m.
func (m Meta) clone() Meta {
	c := m
	c.Write, c.Read, c.Folds = slices.Clone(m.Write), slices.Clone(m.Read), slices.Clone(m.Folds)
	return c
}

// union returns a followed by the elements of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
