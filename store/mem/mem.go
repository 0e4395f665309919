// Package mem is the embedded, in-process store: K simulated nodes that own
// contiguous slot ranges exactly as a freshly created Redis Cluster does, so
// keys are routed by the same CRC16 slot rule as on a real cluster.
//
// Each node is one mutex-guarded map. A batch (Get, Del, IncrMulti) takes
// each involved node's lock once, which is the in-process counterpart of one
// pipelined round per node, and is counted as such in Stats. Token keys and
// keys with a deadline (expire.go) expire by the injected clock, as Redis
// keys do: a key past its deadline reads as missing and is removed when
// touched.
package mem

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// DefaultNodes is the number of simulated nodes when Config.Nodes is 0.
const DefaultNodes = 3

// Config configures the embedded store. The zero value is usable.
type Config struct {
	// Nodes is the number of simulated nodes; 0 means DefaultNodes.
	Nodes int
	// Clock is used for token expiry; nil means the system clock.
	Clock clock.Clock
	// AOF is the path of an append-only file (see aof.go): the store
	// replays it at Open and appends every change to it, fsynced before
	// the change is acknowledged. Empty means none: the store lives in
	// memory only. New refuses it; use Open.
	AOF string
	// AOFSync is when the append-only file is fsynced: SyncEverySec (""
	// means it) or SyncAlways.
	AOFSync string
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("mem: invalid config")

// Store is the embedded store. It is safe for concurrent use.
type Store struct {
	topo   *store.Topology
	nodes  []*node
	now    func() time.Time
	closed atomic.Bool
	meta   metaTable // counter metadata records (meta.go)
	j      *journal  // the append-only file; nil without one
}

type node struct {
	mu     sync.Mutex
	ints   map[string]int64
	exp    map[string]time.Time // key -> deadline, for keys that have one
	tokens map[string]time.Time // token key -> expiry
	seqs   map[string]seqEntry  // sequence hash + "\x00" + writer -> last applied
	rounds atomic.Int64
	cmds   map[string]int64 // guarded by mu
	j      *journal         // the Store's, or nil
}

var _ store.Store = (*Store)(nil)

// Open returns the embedded store with the state its append-only file
// cfg.AOF holds (empty when the file does not exist yet), appending every
// change to it from then on. Without cfg.AOF it is New.
func Open(cfg Config) (*Store, error) {
	path := cfg.AOF
	cfg.AOF = ""
	s, err := New(cfg)
	if err != nil || path == "" {
		return s, err
	}
	if err := s.openJournal(path, cfg.AOFSync); err != nil {
		return nil, err
	}
	return s, nil
}

// nodeOf returns the node that owns key's slot.
func (s *Store) nodeOf(key string) *node { return s.nodes[s.topo.Owner[keyspace.Slot(key)]] }

// New returns an empty embedded store.
func New(cfg Config) (*Store, error) {
	if cfg.AOF != "" {
		return nil, fmt.Errorf("%w: AOF needs Open", ErrConfig)
	}
	if cfg.AOFSync != "" && cfg.AOFSync != SyncEverySec && cfg.AOFSync != SyncAlways {
		return nil, fmt.Errorf("%w: AOFSync must be %q or %q, got %q", ErrConfig, SyncEverySec, SyncAlways, cfg.AOFSync)
	}
	if cfg.Nodes < 0 || cfg.Nodes > 1024 {
		return nil, fmt.Errorf("%w: Nodes must be 0..1024, got %d", ErrConfig, cfg.Nodes)
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	names := make([]string, cfg.Nodes)
	s := &Store{now: clock.OrReal(cfg.Clock).Now, nodes: make([]*node, cfg.Nodes)}
	for i := range names {
		names[i] = fmt.Sprintf("mem-%02d", i)
		s.nodes[i] = &node{ints: map[string]int64{}, exp: map[string]time.Time{}, tokens: map[string]time.Time{}, seqs: map[string]seqEntry{}, cmds: map[string]int64{}}
	}
	s.topo = store.Even(names)
	return s, nil
}

// groups splits key indexes by owning node.
func (s *Store) groups(keys []string) map[int][]int {
	g := make(map[int][]int)
	for i, k := range keys {
		n := int(s.topo.Owner[keyspace.Slot(k)])
		g[n] = append(g[n], i)
	}
	return g
}

// IncrBy adds delta to key.
func (s *Store) IncrBy(ctx context.Context, key string, delta int64) (int64, error) {
	return s.IncrByExpire(ctx, key, delta, time.Time{})
}

// IncrMulti applies ops, taking each node's lock once.
func (s *Store) IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	out := make([]store.IncrResult, len(ops))
	now := s.now()
	var seq uint64
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			op := ops[i]
			seqField := ""
			if op.TokenKey == "" && op.SeqKey != "" {
				nd.cmds["evalsha"]++
				if keyspace.Slot(op.SeqKey) != keyspace.Slot(op.Key) || op.Writer == "" || op.Seq == 0 {
					out[i].Err = fmt.Errorf("mem: sequenced op on %q: hash %q, writer %q, seq %d", op.Key, op.SeqKey, op.Writer, op.Seq)
					continue
				}
				seqField = op.SeqKey + "\x00" + op.Writer
				if e, ok := nd.seqs[seqField]; ok && now.Before(e.exp) && e.last >= op.Seq {
					continue // already applied
				}
			} else if op.TokenKey != "" {
				nd.cmds["evalsha"]++
				if keyspace.Slot(op.TokenKey) != keyspace.Slot(op.Key) {
					out[i].Err = fmt.Errorf("mem: token key %q is not in the slot of %q", op.TokenKey, op.Key)
					continue
				}
				if exp, ok := nd.tokens[op.TokenKey]; ok && now.Before(exp) {
					continue // already applied
				}
			} else {
				nd.cmds["incrby"]++
			}
			v, err := add(nd.value(op.Key, now), op.Delta)
			if err == nil && (op.TokenKey != "" || seqField != "") && (v > store.MaxValue || v < -store.MaxValue) {
				err = fmt.Errorf("%w: %s would pass the sub-counter bound ±%d", store.ErrOverflow, op.Key, int64(store.MaxValue))
			}
			if err != nil {
				out[i].Err = err
				continue
			}
			nd.ints[op.Key] = v
			if op.TokenKey != "" || seqField != "" {
				ttl := op.TTL
				if ttl <= 0 {
					ttl = store.DefaultTokenTTL
				}
				if seqField != "" {
					nd.seqs[seqField] = seqEntry{last: op.Seq, exp: now.Add(ttl)}
					seq = max(seq, nd.logSeq(seqField))
				} else {
					nd.tokens[op.TokenKey] = now.Add(ttl)
					seq = max(seq, nd.logToken(op.TokenKey))
				}
			}
			if !op.ExpireAt.IsZero() {
				nd.expireNX(op.Key, op.ExpireAt)
			}
			seq = max(seq, nd.logKey(op.Key))
			out[i] = store.IncrResult{Applied: true, Value: v}
		}
		nd.expireTokens(now)
		nd.mu.Unlock()
	}
	if err := s.durable(seq); err != nil {
		return nil, err
	}
	return out, nil
}

// seqEntry is a writer's last sequence applied to a sub-counter.
type seqEntry struct {
	last uint64
	exp  time.Time
}

// expireTokens drops expired tokens and sequences once their maps grow;
// caller holds mu.
func (nd *node) expireTokens(now time.Time) {
	if len(nd.tokens) >= 4096 {
		for k, exp := range nd.tokens {
			if !now.Before(exp) {
				delete(nd.tokens, k)
			}
		}
	}
	if len(nd.seqs) >= 4096 {
		for k, e := range nd.seqs {
			if !now.Before(e.exp) {
				delete(nd.seqs, k)
			}
		}
	}
}

func add(v, d int64) (int64, error) {
	if (d > 0 && v > math.MaxInt64-d) || (d < 0 && v < math.MinInt64-d) {
		return v, store.ErrOverflow
	}
	return v + d, nil
}

// Get reads keys, taking each node's lock once.
func (s *Store) Get(ctx context.Context, keys []string) ([]int64, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	now := s.now()
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			nd.cmds["get"]++
			out[i] = nd.value(keys[i], now)
		}
		nd.mu.Unlock()
	}
	return out, nil
}

// Del deletes keys.
func (s *Store) Del(ctx context.Context, keys []string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	var seq uint64
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			nd.cmds["del"]++
			delete(nd.ints, keys[i])
			delete(nd.exp, keys[i])
			seq = max(seq, nd.logKey(keys[i]))
		}
		nd.mu.Unlock()
	}
	return s.durable(seq)
}

// Topology returns the fixed slot map of the simulated nodes.
func (s *Store) Topology(ctx context.Context) (*store.Topology, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.topo, nil
}

// Close marks the store closed; later calls fail with store.ErrClosed.
// The append-only file, if any, is synced and closed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.closeJournal()
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// NodeStats counts what one simulated node received.
type NodeStats struct {
	// Rounds is the number of batches (lock acquisitions) the node served.
	Rounds int64
	// Commands counts commands by lower-case Redis name (get, incrby,
	// evalsha for token increments, del).
	Commands map[string]int64
}

// Stats returns per-node counters, keyed by node name.
func (s *Store) Stats() map[string]NodeStats {
	out := make(map[string]NodeStats, len(s.nodes))
	for i, nd := range s.nodes {
		nd.mu.Lock()
		c := make(map[string]int64, len(nd.cmds))
		for k, v := range nd.cmds {
			c[k] = v
		}
		nd.mu.Unlock()
		out[s.topo.Nodes[i]] = NodeStats{Rounds: nd.rounds.Load(), Commands: c}
	}
	return out
}

// Keys returns every integer key held, sorted (for tests and tools).
func (s *Store) Keys() []string {
	var out []string
	now := s.now()
	for _, nd := range s.nodes {
		nd.mu.Lock()
		for k := range nd.ints {
			if _, ok := nd.live(k, now); ok {
				out = append(out, k)
			}
		}
		nd.mu.Unlock()
	}
	sort.Strings(out)
	return out
}
