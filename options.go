package hotcount

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Defaults used when a Config field is left at its zero value.
const (
	// DefaultN is the number of sub-counters per counter.
	DefaultN = 8
	// DefaultReadCacheTTL is how long a summed read is cached.
	DefaultReadCacheTTL = time.Second
	// DefaultEmbeddedNodes is the node count of the embedded store.
	DefaultEmbeddedNodes = 3
	// MaxN is the largest number of sub-counters a counter may have.
	MaxN = 1024
)

// Config configures a Client. The zero value is valid: an embedded store of
// DefaultEmbeddedNodes simulated nodes, DefaultN sub-counters per counter and
// a DefaultReadCacheTTL summed-read cache.
type Config struct {
	// Redis lists seed addresses ("host:port"). Empty means the embedded
	// store. Standalone Redis and Redis Cluster are detected.
	Redis []string
	// RedisUsername and RedisPassword authenticate to Redis when set.
	RedisUsername, RedisPassword string
	// Store, when set, is used as the backend instead of Redis or the
	// embedded store. The Client does not close a Store it was given.
	Store store.Store
	// EmbeddedNodes is the number of simulated nodes of the embedded store;
	// 0 means DefaultEmbeddedNodes.
	EmbeddedNodes int
	// N is the number of sub-counters of a counter that no namespace
	// matches; 0 means DefaultN.
	N int
	// Namespaces override settings for keys that start with a prefix; the
	// longest matching prefix wins.
	Namespaces []Namespace
	// ReadCacheTTL is how long a summed read is served from memory; 0
	// means DefaultReadCacheTTL. See NoReadCache to turn the cache off.
	ReadCacheTTL time.Duration
	// NoReadCache turns the summed-read cache off: every Get reads the
	// sub-counters.
	NoReadCache bool
	// Timeout bounds each round trip to the backend; 0 means 2 s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake.
	Now func() time.Time
	// Rand returns uniformly random 64-bit values; nil means math/rand/v2.
	// It must be safe for concurrent use.
	Rand func() uint64
}

// Namespace holds the settings of the counters whose keys start with
// Prefix.
type Namespace struct {
	// Prefix selects keys; it must be non-empty and unique in a Config.
	Prefix string
	// N is the number of sub-counters; 0 means the Config's N.
	N int
}

// Named errors. Every error the Client returns for bad input or a failed
// backend wraps one of these; test with errors.Is.
var (
	// ErrInvalidKey: the key breaks the key rules (see keyspace.Validate).
	ErrInvalidKey = keyspace.ErrInvalidKey
	// ErrZeroDelta: an increment of 0 was asked for.
	ErrZeroDelta = errors.New("hotcount: delta must not be zero")
	// ErrOverflow: the increment, or a sum, would leave the int64 range;
	// nothing was changed.
	ErrOverflow = store.ErrOverflow
	// ErrUnavailable: the backend could not be reached in time.
	ErrUnavailable = store.ErrUnavailable
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("hotcount: client closed")
	// ErrConfig: the Config is invalid; the message says which field.
	ErrConfig = errors.New("hotcount: invalid config")
)

// settings is a validated copy of Config with defaults applied.
type settings struct {
	Config
	namespaces []Namespace // sorted by prefix length, longest first
}

func (c Config) validate() (settings, error) {
	s := settings{Config: c}
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if s.N == 0 {
		s.N = DefaultN
	}
	if s.N < 1 || s.N > MaxN {
		return bad("N must be 1..%d, got %d", MaxN, c.N)
	}
	if s.EmbeddedNodes == 0 {
		s.EmbeddedNodes = DefaultEmbeddedNodes
	}
	if s.EmbeddedNodes < 1 || s.EmbeddedNodes > 1024 {
		return bad("EmbeddedNodes must be 1..1024, got %d", c.EmbeddedNodes)
	}
	if s.ReadCacheTTL == 0 {
		s.ReadCacheTTL = DefaultReadCacheTTL
	}
	if s.ReadCacheTTL < 0 {
		return bad("ReadCacheTTL must not be negative (use NoReadCache), got %v", c.ReadCacheTTL)
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Second
	}
	if s.Timeout < 0 {
		return bad("Timeout must not be negative, got %v", c.Timeout)
	}
	for _, a := range s.Redis {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
			return bad("Redis address %q is not host:port", a)
		}
	}
	s.Redis = append([]string(nil), c.Redis...)
	seen := map[string]bool{}
	s.namespaces = make([]Namespace, 0, len(c.Namespaces))
	for _, ns := range c.Namespaces {
		switch {
		case ns.Prefix == "":
			return bad("a namespace has an empty Prefix")
		case seen[ns.Prefix]:
			return bad("namespace prefix %q appears twice", ns.Prefix)
		case ns.N < 0 || ns.N > MaxN:
			return bad("namespace %q: N must be 0..%d, got %d", ns.Prefix, MaxN, ns.N)
		}
		seen[ns.Prefix] = true
		if ns.N == 0 {
			ns.N = s.N
		}
		s.namespaces = append(s.namespaces, ns)
	}
	sort.SliceStable(s.namespaces, func(i, j int) bool {
		return len(s.namespaces[i].Prefix) > len(s.namespaces[j].Prefix)
	})
	s.Namespaces = nil
	return s, nil
}

// namespace returns the settings that apply to key.
func (s *settings) namespace(key string) Namespace {
	for _, ns := range s.namespaces {
		if strings.HasPrefix(key, ns.Prefix) {
			return ns
		}
	}
	return Namespace{N: s.N}
}
