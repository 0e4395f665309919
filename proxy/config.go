package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	// IncrValue is Incr that writes a cold counter of a buffered
	// namespace at once and returns the value the cache answered, exact
	// when the counter is known to be cold (hotcount.Client.IncrValue).
	IncrValue(ctx context.Context, key string, delta int64) (value int64, exact bool, err error)
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
	// DefaultMaxBulkLen is the largest bulk argument a client may send
	// (Redis's proto-max-bulk-len, 512 MB there): a longer bulk length is
	// refused at once with "invalid bulk length".
	DefaultMaxBulkLen = 64 << 20
	// DefaultQueryBufferLimit bounds the unparsed input one connection
	// holds (Redis's client-query-buffer-limit, 1 GB there).
	DefaultQueryBufferLimit = 128 << 20
	// DefaultMemoryBudget bounds the input all connections hold beyond
	// their first read buffer (readChunk each).
	DefaultMemoryBudget = 1 << 30
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
	// as in Redis 7 (2^31-1; the query buffer limit bounds what they
	// hold).
	MaxMultiBulk = 1<<31 - 1
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
	// Durable says that Counters have a durable store: the admin port's
	// /metrics then exports its series (group commits, rollups,
	// checkpoints and restores, the view healer, the clean-up pass) under
	// the names and labels serve exports them.
	Durable bool
	// MaxBulkLen is the largest bulk argument (Redis's
	// proto-max-bulk-len): a larger bulk length is answered "-ERR
	// Protocol error: invalid bulk length" as soon as its header arrives,
	// and the connection is closed. 0 means DefaultMaxBulkLen; it must not
	// exceed QueryBufferLimit.
	MaxBulkLen int64
	// QueryBufferLimit bounds the input one connection holds before it is
	// parsed into whole commands (Redis's client-query-buffer-limit): past
	// it the client gets an error and is disconnected. 0 means
	// DefaultQueryBufferLimit.
	QueryBufferLimit int
	// MemoryBudget bounds the input all connections hold together beyond
	// their first read buffer (16 KiB each), with what open transactions
	// keep of their queued commands. A connection whose command needs more
	// than the budget has left waits, not reading (the client's sends
	// block), for up to Timeout; then it is answered an error and closed.
	// A transaction's copy (at most QueryBufferLimit) that does not fit is
	// dropped instead: the transaction runs, but a slot moved under it
	// aborts it. A keyless command queued before the transaction's first
	// key, held by the proxy (at most QueryBufferLimit per transaction),
	// that does not fit is answered an error, and EXEC EXECABORT, as Redis
	// answers a command it has no memory to queue. 0 means
	// DefaultMemoryBudget.
	MemoryBudget int64
	// Announce is the host:port cluster clients are told to reach this
	// proxy at (CLUSTER SLOTS, SHARDS, NODES); "" means the address each
	// client connected to. Required with Peers.
	Announce string
	// Peers are the announced addresses of the other proxies of a group:
	// the group's addresses, sorted, split the slots in equal ranges in
	// what CLUSTER answers. Every proxy of the group must be given the
	// same set. Empty: this proxy serves every slot.
	Peers []string
	// AllowFlush lets clients run FLUSHALL and FLUSHDB: every primary is
	// emptied (hotcount's own state kept) and every counter of the
	// durable store cleared. Off by default: one client would delete every
	// counter of every process sharing the cluster.
	AllowFlush bool
	// AllowConfig lets clients run CONFIG SET and CONFIG RESETSTAT: each
	// is sent to every node of the cluster, primaries and replicas (a
	// node's configuration is not replicated, and CONFIG GET is answered
	// by any node), and answered OK only when every node said OK. Off by
	// default: one client would change every node of a cluster that other
	// processes share.
	AllowConfig bool
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
	if c.MaxBulkLen < 0 || c.QueryBufferLimit < 0 || c.MemoryBudget < 0 || c.MaxClients < 0 || c.Timeout < 0 {
		return bad("MaxBulkLen, QueryBufferLimit, MemoryBudget, MaxClients and Timeout must not be negative")
	}
	if strings.ContainsAny(c.Password, "\r\n") {
		return bad("Password must not contain line breaks")
	}
	if len(c.Peers) > 0 && c.Announce == "" {
		return bad("Peers needs Announce (this proxy's own address in the group)")
	}
	for _, a := range append([]string{c.Announce}, c.Peers...) {
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" || port == "0" {
			return bad("cluster address %q is not host:port", a)
		}
	}
	s.Peers = append([]string(nil), c.Peers...)
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
	if s.MaxBulkLen == 0 {
		s.MaxBulkLen = DefaultMaxBulkLen
	}
	if s.QueryBufferLimit == 0 {
		s.QueryBufferLimit = max(DefaultQueryBufferLimit, int(min(s.MaxBulkLen, math.MaxInt32))+MaxInlineSize)
	}
	if s.MemoryBudget == 0 {
		s.MemoryBudget = DefaultMemoryBudget
	}
	if s.MaxBulkLen > int64(s.QueryBufferLimit) {
		return bad("MaxBulkLen (%d) must not exceed QueryBufferLimit (%d)", s.MaxBulkLen, s.QueryBufferLimit)
	}
	if int64(s.QueryBufferLimit) > s.MemoryBudget {
		return bad("QueryBufferLimit (%d) must not exceed MemoryBudget (%d)", s.QueryBufferLimit, s.MemoryBudget)
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
