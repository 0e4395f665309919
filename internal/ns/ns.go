// Package ns holds the per-namespace settings of counters and finds the
// ones that apply to a key.
//
// A namespace is a key prefix with its own settings (number of
// sub-counters, durability mode, buffering, flush interval, read-cache
// TTL). A Table holds the validated namespaces sorted by prefix length,
// longest first, plus the defaults for keys that no namespace matches;
// Lookup returns the first (longest) prefix that matches, so "views:" and
// "views:paid:" can coexist and the more specific one wins. A namespace's
// zero fields inherit the defaults, except Buffered, which each namespace
// states for itself.
package ns

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// Mode is a durability mode, chosen per namespace.
type Mode string

// The durability modes.
const (
	// ModeFast: the cache holds the counter; totals are checkpointed to the
	// durable store and restored after a cache loss. A killed process loses
	// up to one flush interval of buffered deltas; a cache loss loses up to
	// one checkpoint interval.
	ModeFast Mode = "fast"
	// ModeDurable: every increment is committed, with an idempotency id, to
	// the durable event log before it is acknowledged; the cache is a view
	// rebuilt from the log. Nothing acknowledged is lost.
	ModeDurable Mode = "durable"
)

// Valid reports whether m is a mode ("" means inherit).
func (m Mode) Valid() bool { return m == "" || m == ModeFast || m == ModeDurable }

// ErrInvalid is wrapped by every namespace validation error.
var ErrInvalid = errors.New("invalid namespace")

// Namespace holds the settings of the counters whose keys start with
// Prefix. Zero fields take the defaults of the Table (see New).
type Namespace struct {
	// Prefix selects keys; it must be non-empty, unique among the
	// namespaces, and itself a valid key (no braces, no control
	// characters, valid UTF-8, at most keyspace.MaxKeyLen bytes): a
	// prefix that is not could match no counter key. The defaults (the
	// keys no namespace matches) have none.
	Prefix string
	// N is the number of sub-counters of a counter; 0 inherits.
	N int
	// Mode is the durability mode; "" inherits.
	Mode Mode
	// Buffered turns buffered deltas on. It is not inherited: a namespace
	// says for itself. Durable-mode counters are always buffered after
	// their commit.
	Buffered bool
	// FlushInterval is how often buffered deltas are flushed; 0 inherits.
	// It bounds what a killed process can lose.
	FlushInterval time.Duration
	// ReadCacheTTL is how long a summed read is served from memory; 0
	// inherits.
	ReadCacheTTL time.Duration
	// NoColdStart gives every counter N sub-counters from its first write
	// (cold_start: false). By default a counter starts cold: one
	// sub-counter and no metadata, one cache key, until its cache write
	// rate passes HotRate. It is not inherited.
	NoColdStart bool
	// TTL, when set, gives every new counter a deadline: TTL after its
	// first write. 0 inherits (the defaults' 0: counters never expire).
	TTL time.Duration
	// HotRate is the cache writes per second (measured in each process)
	// past which a cold counter grows to N sub-counters; it folds back
	// after staying below half of it for the automatic-N hysteresis. 0
	// inherits.
	HotRate float64
}

// UsesBuffer reports whether increments of the namespace go through a
// buffer: buffered ones, and durable ones after their commit.
func (n *Namespace) UsesBuffer() bool { return n.Buffered || n.Mode == ModeDurable }

// Table is a validated set of namespaces. It is immutable.
type Table struct {
	def  Namespace
	list []Namespace // longest prefix first
}

// New validates def (the settings of keys no namespace matches; every
// field must be set, Prefix empty) and list, fills each namespace's zero
// fields from def, and returns the table. The caller's slice is copied.
func New(def Namespace, list []Namespace) (*Table, error) {
	bad := func(format string, args ...any) (*Table, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if err := check(def, "the defaults"); err != nil {
		return nil, err
	}
	if def.N == 0 || def.Mode == "" || def.FlushInterval == 0 || def.ReadCacheTTL == 0 || def.HotRate == 0 || def.Prefix != "" {
		return bad("the defaults must have N, Mode, FlushInterval, ReadCacheTTL and HotRate set and no Prefix")
	}
	t := &Table{def: def, list: make([]Namespace, 0, len(list))}
	seen := map[string]bool{}
	for _, n := range list {
		switch {
		case n.Prefix == "":
			return bad("a namespace has an empty prefix")
		case seen[n.Prefix]:
			return bad("prefix %q appears twice", n.Prefix)
		}
		if err := keyspace.Validate(n.Prefix); err != nil {
			return nil, fmt.Errorf("%w: namespace %q: the prefix can match no counter key: %w", ErrInvalid, n.Prefix, err)
		}
		if err := check(n, fmt.Sprintf("namespace %q", n.Prefix)); err != nil {
			return nil, err
		}
		seen[n.Prefix] = true
		if n.N == 0 {
			n.N = def.N
		}
		if n.Mode == "" {
			n.Mode = def.Mode
		}
		if n.FlushInterval == 0 {
			n.FlushInterval = def.FlushInterval
		}
		if n.ReadCacheTTL == 0 {
			n.ReadCacheTTL = def.ReadCacheTTL
		}
		if n.HotRate == 0 {
			n.HotRate = def.HotRate
		}
		if n.TTL == 0 {
			n.TTL = def.TTL
		}
		t.list = append(t.list, n)
	}
	sort.SliceStable(t.list, func(i, j int) bool { return len(t.list[i].Prefix) > len(t.list[j].Prefix) })
	return t, nil
}

// check validates the ranges of one namespace's fields.
func check(n Namespace, what string) error {
	switch {
	case n.N < 0 || n.N > keyspace.MaxN:
		return fmt.Errorf("%w: %s: N must be 1..%d, got %d", ErrInvalid, what, keyspace.MaxN, n.N)
	case !n.Mode.Valid():
		return fmt.Errorf("%w: %s: mode must be %q or %q, got %q", ErrInvalid, what, ModeFast, ModeDurable, n.Mode)
	case n.FlushInterval < 0:
		return fmt.Errorf("%w: %s: flush interval must not be negative, got %v", ErrInvalid, what, n.FlushInterval)
	case n.ReadCacheTTL < 0:
		return fmt.Errorf("%w: %s: read-cache TTL must not be negative, got %v", ErrInvalid, what, n.ReadCacheTTL)
	case n.TTL < 0:
		return fmt.Errorf("%w: %s: TTL must not be negative, got %v", ErrInvalid, what, n.TTL)
	case n.HotRate < 0 || n.HotRate != n.HotRate || n.HotRate > 1e12:
		return fmt.Errorf("%w: %s: hot rate must be 0..1e12 writes/s, got %v", ErrInvalid, what, n.HotRate)
	}
	return nil
}

// Lookup returns the settings that apply to key: those of the longest
// matching prefix, or the defaults. The result must not be modified.
func (t *Table) Lookup(key string) *Namespace {
	for i := range t.list {
		if strings.HasPrefix(key, t.list[i].Prefix) {
			return &t.list[i]
		}
	}
	return &t.def
}

// Match is Lookup that also reports whether a namespace matched (false:
// the defaults apply).
func (t *Table) Match(key string) (*Namespace, bool) {
	n := t.Lookup(key)
	return n, n != &t.def
}

// Defaults returns the settings of keys no namespace matches.
func (t *Table) Defaults() *Namespace { return &t.def }

// Namespaces returns the namespaces, longest prefix first. The slice is
// shared: do not modify it.
func (t *Table) Namespaces() []Namespace { return t.list }

// Single reports whether every key has the same settings (no namespace).
func (t *Table) Single() bool { return len(t.list) == 0 }

// Any reports whether f holds for the defaults or for any namespace.
func (t *Table) Any(f func(*Namespace) bool) bool {
	if f(&t.def) {
		return true
	}
	for i := range t.list {
		if f(&t.list[i]) {
			return true
		}
	}
	return false
}

// FlushIntervals returns the distinct flush intervals of the settings that
// use a buffer, shortest first.
func (t *Table) FlushIntervals() []time.Duration {
	var out []time.Duration
	add := func(n *Namespace) {
		if n.UsesBuffer() && !containsDur(out, n.FlushInterval) {
			out = append(out, n.FlushInterval)
		}
	}
	add(&t.def)
	for i := range t.list {
		add(&t.list[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func containsDur(ds []time.Duration, d time.Duration) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}
