// Package redis is the Redis backend of store.Store, on
// github.com/redis/rueidis. It talks to one standalone Redis or to a Redis
// Cluster; New detects which.
//
// # Topology
//
// The store keeps its own slot→primary map, read with CLUSTER SLOTS (the
// first node of each slot range is its primary; nodes are named by the
// "host:port" the cluster announces). The map is an immutable
// *store.Topology swapped atomically; its Epoch increases whenever the map
// changes. A goroutine refreshes it every Config.TopologyRefresh, and a
// refresh also runs on any MOVED or ASK reply (synchronously, before the
// redirected commands are resent) and after a connection error (in the
// background). A standalone server is one node that owns every slot.
//
// # Rounds
//
// Every batch call (Get, Del, IncrMulti) groups its keys by node with one
// snapshot of the map and sends one pipelined round per node: a DoMulti on
// the rueidis connection of that node, with its own Config.Timeout. Rounds to
// different nodes run concurrently, at most Config.MaxConcurrency at a time
// per call. No command ever names keys of two slots: reads are GET per key,
// never MGET, and deletes are DEL per key.
//
// IncrBy, the hot path of an unbuffered increment, is a round of one
// without the batch machinery: a slot lookup in the current map and one
// INCRBY from rueidis' pooled command builder on the owner's connection,
// where rueidis pipelines it with every concurrent caller's commands. It
// allocates nothing for a delta below 100 in magnitude.
//
// A round's timeout costs no allocation either, in the common cases. When
// the caller's context already ends within Config.Timeout it serves as it
// is. When it cannot be cancelled at all (context.Background and the
// like), a batch round gets a context shared by every round that starts in
// the same sixteenth of Config.Timeout, ending Timeout after the last of
// them may start; each round is thus bounded by Timeout to Timeout·17/16.
// Only a cancellable context with a later deadline is wrapped with
// context.WithTimeout.
//
// IncrBy with such a context passes it to rueidis as it is, so that the
// caller waits on the reply alone (waiting on a reply and a context
// together costs a select over both, a good part of what the store adds to
// a bare INCRBY), and a watchdog bounds it instead. The watchdog ticks 32
// times per Timeout and counts IncrBy's rounds per node by the tick they
// started in; when Timeout has passed since the end of a tick while a
// round of that tick is still waiting, it closes every connection the
// store has to that node. rueidis then fails every command waiting on
// them, IncrBy returns store.ErrUnavailable wrapping
// store.ErrNoReply and context.DeadlineExceeded (its outcome unknown, as after any timeout),
// and the next command dials again. Such a round thus ends between
// Timeout and about Timeout·17/16 after it started, plus however late the
// watchdog's goroutine is scheduled. Unlike a per-round deadline, which
// leaves the connection up for the late reply, a node that leaves a round
// unanswered for Timeout has its connections closed: the batch rounds
// waiting on them fail at once, with store.ErrUnavailable.
//
// A command answered with MOVED or ASK (the slot moved since the snapshot),
// TRYAGAIN, or NOSCRIPT is resent once, after the refresh, through the
// rueidis cluster client, which follows redirects itself; these resends are
// counted as redirects in Stats. Read commands are also resent after
// rueidis.ErrClosing (a connection of a node that left the cluster). A write
// whose outcome is unknown (timeout, broken connection) is never resent
// here: its result wraps store.ErrUnavailable and store.ErrNoReply, and the
// caller retries with the same flush token, which is what makes the retry
// idempotent, or, for a plain INCRBY, does not retry it. A command that
// failed because its connection could not be dialled wraps
// store.ErrUnavailable alone: it was never written.
//
// # Idempotent increments
//
// An IncrOp with a TokenKey runs a Lua script (EVALSHA, EVAL when the node
// does not know the script yet) over KEYS = {key, token} in the key's slot:
// if the token exists the op is not applied; otherwise INCRBY runs through
// redis.pcall, and only when it succeeds is the token written with
// SET PX ttl. An overflow therefore leaves both the value and the token
// untouched. Lua numbers are doubles, so the script does no arithmetic on the
// value and returns the new value as the string stored by INCRBY (read back
// with GET), which is exact over the whole int64 range.
//
// An IncrOp with a SeqKey (a buffer's hot-key flush) runs a second script
// over KEYS = {key, hash}: the hash holds, per writer, "seq:ms" (the last
// sequence number applied and the writer's clock). The op is applied only
// when its Seq is above the recorded one; then the field is set and the
// hash's TTL renewed. A hash with more than 64 fields drops those older
// than the TTL (writers that ended). One hash per hot sub-counter, one
// field per writer: the state does not grow with the number of flushes,
// as a token key per flush did. An IncrOp with neither is one plain
// INCRBY.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/store"
)

// Defaults for the zero values of Config.
const (
	DefaultTimeout         = 2 * time.Second
	DefaultDialTimeout     = 2 * time.Second
	DefaultTopologyRefresh = 5 * time.Second
	DefaultMaxConcurrency  = 16
)

// ErrInvalidConfig is wrapped by New when the Config is not usable.
var ErrInvalidConfig = errors.New("store/redis: invalid config")

// ErrInvalidOp is wrapped by the result of an IncrOp that cannot be sent: a
// TokenKey in another slot than Key, or a negative TTL.
var ErrInvalidOp = errors.New("store/redis: invalid increment")

// Config configures a Store. The zero value of every field but Addrs is a
// documented default.
type Config struct {
	// Addrs are "host:port" seed addresses; at least one is required. With
	// one address of a server that is not in cluster mode, the store runs
	// standalone.
	Addrs []string
	// Username and Password authenticate each connection (AUTH), when set.
	Username, Password string
	// TLS, when set, secures every connection.
	TLS *tls.Config
	// Timeout bounds each round (one pipelined batch to one node) and each
	// topology query; zero means DefaultTimeout.
	Timeout time.Duration
	// DialTimeout bounds each connection attempt; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// TopologyRefresh is the period of the background slot-map refresh;
	// zero means DefaultTopologyRefresh.
	TopologyRefresh time.Duration
	// MaxConcurrency bounds the rounds one call sends in parallel; zero
	// means DefaultMaxConcurrency.
	MaxConcurrency int
	// ForceSingle treats the first address as a standalone server without
	// probing for cluster mode.
	ForceSingle bool
	// FlushDelay, when positive, lets each connection's writer wait up to
	// this long after a write to gather more commands into the next one
	// (rueidis's MaxFlushDelay): fewer system calls per command, in this
	// process and in the cache, when many callers send at once, at up to
	// FlushDelay more latency for a command that arrives right after a
	// write. Zero writes every command as soon as it can.
	FlushDelay time.Duration
	// BatchWindow, when positive, sends IncrByMarked's increments of
	// concurrent callers together, one batch written to every node at
	// once, on connections of their own that do not wait (see
	// coalescer). An increment waits at most about this long. Zero sends
	// each call on its own.
	BatchWindow time.Duration
}

// withDefaults returns a validated copy of c with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if len(c.Addrs) == 0 {
		return c, fmt.Errorf("%w: no addresses", ErrInvalidConfig)
	}
	for _, a := range c.Addrs {
		if a == "" {
			return c, fmt.Errorf("%w: empty address", ErrInvalidConfig)
		}
	}
	if c.Timeout < 0 || c.DialTimeout < 0 || c.TopologyRefresh < 0 || c.MaxConcurrency < 0 || c.FlushDelay < 0 || c.BatchWindow < 0 {
		return c, fmt.Errorf("%w: negative timeout, refresh period, concurrency, flush delay or batch window", ErrInvalidConfig)
	}
	c.Addrs = append([]string(nil), c.Addrs...)
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.TopologyRefresh == 0 {
		c.TopologyRefresh = DefaultTopologyRefresh
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	return c, nil
}

// Store is a store.Store on Redis. It is safe for concurrent use.
type Store struct {
	cfg     Config
	client  rueidis.Client
	cluster bool

	state  atomic.Pointer[state]
	closed atomic.Bool

	refreshMu      sync.Mutex    // serialises topology refreshes
	refreshStarted atomic.Uint64 // sequence number of the last refresh started
	refreshDone    atomic.Uint64 // sequence number of the last refresh installed
	kick           chan struct{} // asks the refresh loop for a refresh now
	base           context.Context
	cancel         context.CancelFunc // cancels base, in Close
	done           chan struct{}      // closed by Close
	wg             sync.WaitGroup
	closeOnce      sync.Once

	stats     sync.Map // node name → *nodeCounters
	deadlines *deadlines
	watch     *watchdog
	marked    *coalescer // nil without BatchWindow
}

var _ store.Store = (*Store)(nil)

// state is one topology snapshot and the connection of each of its nodes.
type state struct {
	topo     *store.Topology
	clients  []rueidis.Client // by node index; nil: route through the cluster client
	counters []*nodeCounters  // by node index
}

// New connects to the servers in cfg, detects cluster mode and reads the
// slot map. Connection and topology failures wrap store.ErrUnavailable.
// Connecting is bounded by cfg.DialTimeout per address, the first topology
// read by ctx and cfg.Timeout. A cluster whose slots are not all served
// fails with store.ErrUnavailable.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	watch := newWatchdog(cfg.Timeout, time.Now())
	opt := rueidis.ClientOption{
		InitAddress:       cfg.Addrs,
		Username:          cfg.Username,
		Password:          cfg.Password,
		TLSConfig:         cfg.TLS,
		Dialer:            netDialer(cfg.DialTimeout),
		DialCtxFn:         watch.dial,
		ConnWriteTimeout:  cfg.Timeout + cfg.DialTimeout,
		DisableCache:      true,
		ForceSingleClient: cfg.ForceSingle,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
		MaxFlushDelay:     cfg.FlushDelay,
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("%w: connect %v: %w", store.ErrUnavailable, cfg.Addrs, err)
	}
	s := &Store{
		cfg:     cfg,
		client:  client,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		watch:   watch,
	}
	s.deadlines = newDeadlines(cfg.Timeout)
	s.base, s.cancel = context.WithCancel(context.Background())
	if err := s.RefreshTopology(ctx); err != nil {
		s.cancel()
		client.Close()
		return nil, err
	}
	if cfg.BatchWindow > 0 {
		// The batches are gathered here: their connections write at once.
		opt.MaxFlushDelay = 0
		bc, err := rueidis.NewClient(opt)
		if err != nil {
			s.cancel()
			client.Close()
			return nil, fmt.Errorf("%w: connect %v: %w", store.ErrUnavailable, cfg.Addrs, err)
		}
		s.marked = newCoalescer(s, bc, cfg.BatchWindow)
	}
	s.wg.Add(1)
	go s.watchLoop()
	if s.cluster {
		s.wg.Add(1)
		go s.refreshLoop()
	}
	return s, nil
}

// Client returns the underlying rueidis client, for benchmarks and tools.
func (s *Store) Client() rueidis.Client { return s.client }

// Cluster reports whether the servers run in cluster mode.
func (s *Store) Cluster() bool { return s.cluster }

// Topology returns the current slot→node map.
func (s *Store) Topology(ctx context.Context) (*store.Topology, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	return s.state.Load().topo, nil
}

// Close stops the refresh goroutine and closes the connections. It is
// idempotent; every call after the first returns nil, and every other method
// returns store.ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		s.cancel()
		s.wg.Wait()
		if s.marked != nil {
			s.marked.close()
		}
		s.client.Close()
	})
	return nil
}

// NodeStats counts what the store sent to one node.
type NodeStats struct {
	// Rounds is the number of pipelined batches sent (a single command
	// counts as a round of one).
	Rounds int64
	// Commands is the number of commands in those rounds.
	Commands int64
	// Redirects is the number of those commands that were resends after
	// MOVED, ASK, TRYAGAIN, NOSCRIPT or a closed connection.
	Redirects int64
}

// Stats maps node names ("host:port") to their counts.
type Stats map[string]NodeStats

// Stats returns a copy of the per-node counts since New.
func (s *Store) Stats() Stats {
	out := Stats{}
	s.stats.Range(func(k, v any) bool {
		c := v.(*nodeCounters)
		var single int64 // IncrBy's rounds of one command
		for i := range c.flights {
			single += c.flights[i].started.Load()
		}
		out[k.(string)] = NodeStats{Rounds: c.rounds.Load() + single, Commands: c.commands.Load() + single, Redirects: c.redirects.Load()}
		return true
	})
	return out
}

// nodeCounters counts what the store sent to one node: batch rounds and
// resends in rounds, commands and redirects, IncrBy's rounds in flights.
type nodeCounters struct {
	rounds, commands, redirects atomic.Int64
	cuts                        atomic.Uint64 // times the watchdog closed the node's connections
	_                           [32]byte      // keep flights off the line of the counters above
	flights                     [watchSlots]flight
}

// counters returns the counts of node, creating them on first use.
func (s *Store) counters(node string) *nodeCounters {
	v, ok := s.stats.Load(node)
	if !ok {
		v, _ = s.stats.LoadOrStore(node, new(nodeCounters))
	}
	return v.(*nodeCounters)
}

// count records one round of commands sent to a node.
func (c *nodeCounters) count(commands int, redirect bool) {
	c.rounds.Add(1)
	c.commands.Add(int64(commands))
	if redirect {
		c.redirects.Add(int64(commands))
	}
}
