package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/clock"
)

// Counters is the part of the hotcount Client the proxy uses for counter
// keys. *hotcount.Client is meant to satisfy it.
type Counters interface {
	// Namespace returns the counter namespace whose prefix matches key
	// (the longest), and false when none does: the key is then passed
	// through to the cluster unchanged.
	Namespace(key string) (hotcount.Namespace, bool)
	// Incr adds delta to the counter key.
	Incr(ctx context.Context, key string, delta int64) error
	// Get returns the summed value of the counter key.
	Get(ctx context.Context, key string) (hotcount.Reading, error)
	// GetFresh returns the summed value of the counter key read now,
	// without the Client's summed-read cache (namespaces that reply
	// exact).
	GetFresh(ctx context.Context, key string) (hotcount.Reading, error)
	// GetMulti returns the summed values of many counters.
	GetMulti(ctx context.Context, keys []string) (map[string]hotcount.Reading, error)
	// Clear deletes every part of the counter key.
	Clear(ctx context.Context, key string) error
	// Stats returns the Client's gauges (the buffered deltas' among them).
	Stats() hotcount.Stats
	// Exists returns how many of keys are counters that exist.
	Exists(ctx context.Context, keys ...string) (int64, error)
	// Expire gives the counter key the deadline at; it reports whether
	// the counter existed.
	Expire(ctx context.Context, key string, at time.Time) (bool, error)
	// Persist removes key's deadline; it reports whether it had one.
	Persist(ctx context.Context, key string) (bool, error)
	// Deadline returns key's deadline (zero: none) and whether it exists.
	Deadline(ctx context.Context, key string) (time.Time, bool, error)
}

// Reply says what INCR on a counter key answers.
type Reply string

// The reply modes of a counter namespace.
const (
	// ReplyEstimate (the default) answers the value as this proxy knows
	// it: the last summed read plus the proxy's own increments since. It
	// costs no round trip to the cache (one summed read per key per
	// read-cache TTL), and it never goes below what this proxy itself has
	// added since that read.
	ReplyEstimate Reply = "estimate"
	// ReplyExact answers a fresh summed read taken after the increment:
	// one pipelined round per node holding a sub-counter, N keys read, on
	// every INCR (concurrent INCRs of one key share one read). For a
	// buffered namespace the value includes this proxy's unflushed delta
	// but not other processes' unflushed deltas.
	ReplyExact Reply = "exact"
)

// Defaults used when a Config field is left at its zero value.
const (
	// DefaultMaxCommandSize bounds the bytes of one command that is still
	// being received on a connection (Redis's proto-max-bulk-len).
	DefaultMaxCommandSize = 512 << 20
	// DefaultMaxClients bounds the open client connections (Redis's
	// maxclients).
	DefaultMaxClients = 10000
	// DefaultTimeout bounds each round trip to the cluster of a
	// non-blocking command.
	DefaultTimeout = 5 * time.Second
	// DefaultEstimateTTL is how long an INCR estimate lives before the
	// next summed read, for a namespace whose read-cache TTL is not known.
	DefaultEstimateTTL = hotcount.DefaultReadCacheTTL
	// MaxInlineSize bounds an inline (telnet-style) command line, as
	// Redis's PROTO_INLINE_MAX_SIZE does.
	MaxInlineSize = 64 << 10
	// MaxMultiBulk is the largest argument count a command may announce,
	// as in Redis.
	MaxMultiBulk = 1024 * 1024
)

// ErrConfig is wrapped by every error for an invalid Config.
var ErrConfig = errors.New("proxy: invalid config")

// ErrClosed is returned by Serve after Shutdown or Close.
var ErrClosed = errors.New("proxy: closed")

// Config configures a Server.
type Config struct {
	// Counters serves the counter keys; required.
	Counters Counters
	// Redis is the cluster (or one standalone Redis) that every other key
	// is passed through to: seed addresses (required), credentials, TLS.
	Redis hotcount.RedisConfig
	// Password, when set, is what clients must give to AUTH (or HELLO
	// AUTH) before other commands; it is unrelated to Redis.Password.
	Password string
	// Replies maps a counter namespace's prefix to its reply mode;
	// namespaces not listed answer ReplyEstimate.
	Replies map[string]Reply
	// MaxCommandSize bounds the bytes of one unfinished command per
	// connection; past it the client gets an error and is disconnected.
	// 0 means DefaultMaxCommandSize.
	MaxCommandSize int
	// MaxClients bounds the open client connections; a connection past it
	// is answered "-ERR max number of clients reached" and closed. 0 means
	// DefaultMaxClients.
	MaxClients int
	// Timeout bounds each round trip to Redis of a non-blocking command
	// (blocking commands wait as long as they ask). 0 means DefaultTimeout.
	Timeout time.Duration
	// Clock is the time source of estimates and client ages; nil means
	// the system clock.
	Clock clock.Clock
	// Logger receives connection errors and upstream failures; nil
	// discards them.
	Logger *slog.Logger
}

// settings is a validated copy of a Config with the defaults applied.
type settings struct {
	Config
}

func (c Config) validate() (settings, error) {
	s := settings{Config: c}
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if c.Counters == nil {
		return bad("Counters is required")
	}
	if len(c.Redis.Addrs) == 0 {
		return bad("Redis.Addrs needs at least one seed address")
	}
	for _, a := range c.Redis.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("Redis address %q is not host:port", a)
		}
	}
	if c.MaxCommandSize < 0 || c.MaxClients < 0 || c.Timeout < 0 {
		return bad("MaxCommandSize, MaxClients and Timeout must not be negative")
	}
	if strings.ContainsAny(c.Password, "\r\n") {
		return bad("Password must not contain line breaks")
	}
	s.Redis.Addrs = append([]string(nil), c.Redis.Addrs...)
	s.Replies = make(map[string]Reply, len(c.Replies))
	for p, r := range c.Replies {
		switch r {
		case ReplyEstimate, ReplyExact:
		case "":
			r = ReplyEstimate
		default:
			return bad("reply of namespace %q must be %q or %q, got %q", p, ReplyEstimate, ReplyExact, r)
		}
		s.Replies[p] = r
	}
	if s.MaxCommandSize == 0 {
		s.MaxCommandSize = DefaultMaxCommandSize
	}
	if s.MaxClients == 0 {
		s.MaxClients = DefaultMaxClients
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	s.Clock = clock.OrReal(c.Clock)
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}
