package regions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// Defaults of Config.
const (
	// DefaultInterval is how often changed counters are shipped.
	DefaultInterval = time.Second
	// DefaultBatch is the most counters one shard of an outbox gives one
	// ship round (and of an inbox, one drain). A counter marked in two
	// pushes is read once by a round that takes both, and twice by two
	// rounds: a batch that holds an interval's pushes at tens of
	// thousands of increments per second keeps one round per interval.
	DefaultBatch = 4000
	// DefaultReadTTL is how long a counter's region hash is cached for
	// reads.
	DefaultReadTTL = time.Second
	// DefaultTimeout bounds each round trip to a region's Redis.
	DefaultTimeout = 2 * time.Second
	// DefaultRetention is how long a counter's region records are kept
	// after it was cleared or expired here before they are collected.
	DefaultRetention = 24 * time.Hour
	// maxCached bounds the read cache; past it the cache starts over.
	maxCached = 1 << 16
	// stuckClear is how long an odd (clearing) epoch may stand before the
	// shipper ends it: the process that cleared died mid-clear.
	stuckClear = 30 * time.Second
)

// ErrConfig: a Config value is out of range.
var ErrConfig = errors.New("hotcount: invalid regions config")

// Totals reads the region's own totals of keys: the sum of each counter's
// sub-counters in the cache (without any process's unflushed deltas), or
// the exact durable total of a durable-mode counter.
type Totals func(ctx context.Context, keys []string) (map[string]int64, error)

// Peer is another region.
type Peer struct {
	// Name is the peer region's name.
	Name string
	// Connect opens a client of the peer region's cache. The Service
	// calls it at its first round to the peer and again after a failure
	// to connect, so that a peer unreachable at start delays nothing, and
	// closes the client at Close.
	Connect func(ctx context.Context) (rueidis.Client, error)
}

// Config configures New.
type Config struct {
	// Region is this region's name (see ValidName).
	Region string
	// Local is this region's cache. The Service does not close it.
	Local rueidis.Client
	// Peers are the other regions.
	Peers []Peer
	// Totals reads this region's own totals; required.
	Totals Totals
	// Deadlines reads the deadlines of this region's own counters (keys in
	// order, as the cache holds them), so that the deadline register a
	// counter's records carry and its own deadline here agree. Nil:
	// deadlines do not travel.
	Deadlines func(ctx context.Context, keys []string) ([]store.Deadline, error)
	// Expire gives this region's own counter key the deadline at (zero:
	// none) that a register set elsewhere holds; it does not touch the
	// register. Required with Deadlines.
	Expire func(ctx context.Context, key string, at time.Time) error
	// Ended, when set, is called after the expiry of key at at ran here
	// (the clear at its deadline), e.g. for the durable store to drop what
	// the ended counter left.
	Ended func(ctx context.Context, key string, at time.Time) error
	// Expiring, when set, reports whether counter key gets a deadline at
	// its first write (a namespace ttl): its own deadline is read at every
	// ship and becomes the register's (StampTTL) when it has none.
	Expiring func(key string) bool
	// Durable, when set, keeps the region's own contributions (so that a
	// peer whose cache lost them gets them again, and an own epoch lost
	// with the cache comes back) and the peers' parts received.
	Durable durable.Regions
	// Counters, when set, calls fn with every counter the region's
	// durable store holds something of (a checkpoint, log events, a
	// total), a page at a time (a counter may come more than once), and
	// returns fn's error. After the region's cache lost data (Resync)
	// they are shipped again with the contributions Durable holds: a
	// counter whose marks were lost with the cache before it was first
	// shipped has no contribution there.
	Counters func(ctx context.Context, fn func(keys []string) error) error
	// Interval is how often changed counters are shipped (0:
	// DefaultInterval). It bounds the lag a link adds.
	Interval time.Duration
	// LeaseTTL is how long the shipping lease lasts without renewal (0: 5
	// × Interval, at least 2 s): the time another process takes over
	// after the shipping process died.
	LeaseTTL time.Duration
	// Settle is how long after an increment its counter is shipped again
	// (0: Interval), so that a buffered delta flushed after the first ship
	// is shipped too. Set it to at least the longest flush interval.
	Settle time.Duration
	// ReadTTL is how long a region hash is cached for reads (0:
	// DefaultReadTTL; negative: not cached).
	ReadTTL time.Duration
	// Timeout bounds each round trip (0: DefaultTimeout).
	Timeout time.Duration
	// Batch is the most counters one outbox shard gives a round (0:
	// DefaultBatch; below 50, 50: an outbox entry holds up to 50).
	Batch int
	// Retention is how long the region records of a counter cleared or
	// expired here are kept before they are collected (0:
	// DefaultRetention). A record from a peer that arrives later than
	// that (a partition longer than it) counts again.
	Retention time.Duration
	// Clock is the time source (nil: the system clock).
	Clock clock.Clock
}

// Service ships this region's contributions to its peers and reads theirs.
// Every process of a region runs one; one of them (the lease holder)
// ships.
type Service struct {
	cfg   Config
	me    string // process id, the lease's holder value
	peers []string

	mu      sync.Mutex
	dirty   map[string]dirtyMark // counters changed here, not yet pushed for good
	pushing map[string]dirtyMark // the counters a push is adding to the outboxes

	pushMu sync.Mutex // held by a push: one at a time

	cacheMu sync.Mutex
	cache   map[string]cachedState

	token     atomic.Uint64 // the lease's fencing token while held, else 0
	collected atomic.Uint64 // counters whose region records were collected
	seq       atomic.Uint64
	links     []*link

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// dirtyMark is when a counter was first marked since its last push, and
// whether it must be pushed again Settle later (a buffered delta).
type dirtyMark struct {
	at     time.Time
	settle bool
}

type cachedState struct {
	s  State
	at time.Time
}

// link is the shipping state of one peer.
type link struct {
	name    string
	connect func(context.Context) (rueidis.Client, error)
	client  rueidis.Client // nil until connected; owned by the link's loop
	more    bool           // the last round took a full batch (the loop's)
	stats   LinkStats
	first   time.Time // the first round this process tried
	mu      sync.Mutex
}

// LinkStats are the figures of one link, for metrics.
type LinkStats struct {
	// Peer is the peer's name.
	Peer string
	// Shipped counts the records written to the peer, Bytes their size.
	Shipped, Bytes uint64
	// Errors counts failed ship rounds; LastError is the last one's
	// error ("" after a success).
	Errors    uint64
	LastError string
	// LastSuccess is when a ship round last succeeded (zero: never, or
	// not the lease holder).
	LastSuccess time.Time
	// Lag is the time since the last successful round (or, before the
	// first, since the first try), for the lease holder (zero otherwise):
	// about the ship interval plus a round trip when the link is healthy,
	// growing while the peer is unreachable.
	Lag time.Duration
	// Holder reports whether this process holds the shipping lease.
	Holder bool
}

// New validates cfg and starts the Service's loops.
func New(cfg Config) (*Service, error) {
	switch {
	case !ValidName(cfg.Region):
		return nil, fmt.Errorf("%w: region name %q (1-64 letters, digits, - or _)", ErrConfig, cfg.Region)
	case cfg.Local == nil || cfg.Totals == nil:
		return nil, fmt.Errorf("%w: Local and Totals are required", ErrConfig)
	case cfg.Deadlines != nil && cfg.Expire == nil:
		return nil, fmt.Errorf("%w: Deadlines needs Expire", ErrConfig)
	case cfg.Interval < 0 || cfg.LeaseTTL < 0 || cfg.Settle < 0 || cfg.Timeout < 0 || cfg.Batch < 0 || cfg.Retention < 0:
		return nil, fmt.Errorf("%w: negative setting", ErrConfig)
	}
	seen := map[string]bool{cfg.Region: true}
	for _, p := range cfg.Peers {
		if !ValidName(p.Name) || seen[p.Name] || p.Connect == nil {
			return nil, fmt.Errorf("%w: peer %q: bad or repeated name, or no client", ErrConfig, p.Name)
		}
		seen[p.Name] = true
	}
	cfg.Interval = or(cfg.Interval, DefaultInterval)
	cfg.LeaseTTL = or(cfg.LeaseTTL, max(5*cfg.Interval, 2*time.Second))
	cfg.Settle = or(cfg.Settle, cfg.Interval)
	cfg.ReadTTL = or(cfg.ReadTTL, DefaultReadTTL)
	cfg.Timeout = or(cfg.Timeout, DefaultTimeout)
	cfg.Batch = or(cfg.Batch, DefaultBatch)
	cfg.Retention = or(cfg.Retention, DefaultRetention)
	cfg.Clock = clock.OrReal(cfg.Clock)
	var id [8]byte
	rand.Read(id[:])
	s := &Service{cfg: cfg, me: hex.EncodeToString(id[:]), dirty: make(map[string]dirtyMark),
		cache: make(map[string]cachedState), stop: make(chan struct{})}
	for _, p := range cfg.Peers {
		s.peers = append(s.peers, p.Name)
		s.links = append(s.links, &link{name: p.Name, connect: p.Connect, stats: LinkStats{Peer: p.Name}})
	}
	s.wg.Add(2)
	go s.pushLoop()
	go s.leaseLoop()
	for _, l := range s.links {
		s.wg.Add(1)
		go s.shipLoop(l)
	}
	s.wg.Add(1)
	go s.inboxLoop()
	return s, nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Region returns this region's name.
func (s *Service) Region() string { return s.cfg.Region }

// Mark records that counter key changed in this region: it is shipped at
// the next round. With settle (a buffered delta, which reaches the cache
// up to a flush interval later) it is pushed again until Settle has
// passed. It costs a map insert; the cache hears of it every half
// Interval, for all counters marked meanwhile.
func (s *Service) Mark(key string, settle bool) {
	s.mu.Lock()
	m, ok := s.dirty[key]
	switch {
	case !ok:
		s.dirty[strings.Clone(key)] = dirtyMark{at: s.cfg.Clock.Now(), settle: settle} // key may be on the caller's stack
	case settle && !m.settle:
		m.settle = true
		s.dirty[strings.Clone(key)] = m // not key itself: it would escape
	}
	s.mu.Unlock()
}

// Read returns the region state of keys (from the read cache when fresh
// enough).
func (s *Service) Read(ctx context.Context, keys []string, fresh bool) ([]State, error) {
	now := s.cfg.Clock.Now()
	out := make([]State, len(keys))
	var miss []int
	s.cacheMu.Lock()
	for i, k := range keys {
		if c, ok := s.cache[k]; ok && !fresh && s.cfg.ReadTTL > 0 && now.Sub(c.at) < s.cfg.ReadTTL {
			out[i] = c.s
			continue
		}
		miss = append(miss, i)
	}
	s.cacheMu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	mk := make([]string, len(miss))
	for j, i := range miss {
		mk[j] = keys[i]
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	hashes, err := readHashes(ctx, s.cfg.Local, mk)
	if err != nil {
		return nil, err
	}
	s.cacheMu.Lock()
	if len(s.cache) > maxCached {
		s.cache = make(map[string]cachedState)
	}
	for j, i := range miss {
		out[i], _ = Parse(mk[j], hashes[j])
		if s.cfg.ReadTTL > 0 {
			s.cache[mk[j]] = cachedState{s: out[i], at: now}
		}
	}
	s.cacheMu.Unlock()
	return out, nil
}

// BeginClear starts a clear of key in this region: a new (odd) own epoch,
// and fences for every peer's contribution received (observed-remove).
// The caller then deletes the counter's own state and calls EndClear with
// the epoch returned.
func (s *Service) BeginClear(ctx context.Context, key string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.moving(ctx, key); err != nil {
		return 0, err
	}
	if err := s.hasHash(ctx, key); err != nil {
		return 0, err
	}
	v, err := hexec(ctx, s.cfg.Local, clearScript, key).ToString()
	if err != nil {
		return 0, fmt.Errorf("regions: clear %q: %w", key, err)
	}
	s.drop(key)
	return strconv.ParseUint(v, 10, 64)
}

// EndClear ends the clear of key begun with epoch odd: the own epoch
// becomes odd+1 and the counter is shipped (the new epoch and the fences).
func (s *Service) EndClear(ctx context.Context, key string, odd uint64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := hexec(ctx, s.cfg.Local, epochScript, key, strconv.FormatUint(odd+1, 10)).Error()
	s.drop(key)
	s.Mark(key, false)
	if err == nil {
		err = s.moving(ctx, key)
	}
	if err == nil {
		err = s.collectLater(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("regions: clear %q: %w", key, err)
	}
	return nil
}

// SetDeadline sets the deadline register of key from this region: at
// (zero: none, a Persist), stamped with the cache's clock, so that every
// region gives its own part of the counter that deadline and ends the
// counter when it passes. here says whether the counter exists in this
// region; the register is set only when it exists in some region (or
// holds a deadline), and exists reports whether it does. The caller has
// given its own counter the deadline already. had reports whether the
// register held a deadline still to come.
func (s *Service) SetDeadline(ctx context.Context, key string, at time.Time, here bool) (exists, had bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ms := int64(0)
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	flag := "0"
	if here {
		flag = "1"
	}
	if err := s.hasHash(ctx, key); err != nil {
		return here, false, err
	}
	res := round(ctx, s.cfg.Local, nil, []call{hcall(setDeadlineScript, key, strconv.FormatInt(ms, 10), "0", flag, s.cfg.Region)})
	out, err := res[0].AsIntSlice()
	s.drop(key)
	if err != nil || len(out) != 4 {
		return here, false, fmt.Errorf("regions: deadline %q: %w (%v)", key, err, out)
	}
	if out[2] != 0 {
		s.ended(ctx, key, out[2])
	}
	if out[0] == 1 && ms != 0 {
		if err := s.schedule(ctx, key, ms, true); err != nil {
			return out[1] == 1, out[3] == 1, err
		}
	}
	s.Mark(key, false)
	return out[1] == 1, out[3] == 1, nil
}

// hasHash notes that key has a region hash here (hasKey), before the
// hash is written.
func (s *Service) hasHash(ctx context.Context, key string) error {
	if err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Sadd().Key(hasKey(shardOf(key))).Member(key).Build()).Error(); err != nil {
		return fmt.Errorf("regions: %q: %w", key, err)
	}
	return nil
}

// schedule puts key on the deadline schedule at ms (Unix): only earlier
// than it is when lt.
func (s *Service) schedule(ctx context.Context, key string, ms int64, lt bool) error {
	b := s.cfg.Local.B().Zadd().Key(dlKey(shardOf(key)))
	var cmd rueidis.Completed
	if lt {
		cmd = b.Lt().ScoreMember().ScoreMember(float64(ms), key).Build()
	} else {
		cmd = b.ScoreMember().ScoreMember(float64(ms), key).Build()
	}
	if err := s.cfg.Local.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("regions: schedule %q: %w", key, err)
	}
	return nil
}

// ended tells the caller that key's expiry at ms ran here (Config.Ended)
// and ships it (the new epoch and the fences).
func (s *Service) ended(ctx context.Context, key string, ms int64) {
	_ = s.moving(ctx, key)
	s.drop(key)
	s.Mark(key, false)
	if s.cfg.Ended != nil {
		_ = s.cfg.Ended(ctx, key, time.UnixMilli(ms))
	}
	_ = s.collectLater(ctx, key)
}

// collectLater puts key on the collection schedule, Retention from now
// (later, if it is there already for later).
func (s *Service) collectLater(ctx context.Context, key string) error {
	at := s.cfg.Clock.Now().Add(s.cfg.Retention).UnixMilli()
	err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Zadd().Key(gcKey(shardOf(key))).Gt().ScoreMember().
		ScoreMember(float64(at), key).Build()).Error()
	if err != nil {
		return fmt.Errorf("regions: collect %q later: %w", key, err)
	}
	return nil
}

func (s *Service) drop(key string) {
	s.cacheMu.Lock()
	delete(s.cache, key)
	s.cacheMu.Unlock()
}

// Collected returns how many counters' region records this process has
// collected.
func (s *Service) Collected() uint64 { return s.collected.Load() }

// Stats returns the figures of every link.
func (s *Service) Stats() []LinkStats {
	out := make([]LinkStats, len(s.links))
	holder := s.token.Load() != 0
	now := s.cfg.Clock.Now()
	for i, l := range s.links {
		l.mu.Lock()
		out[i] = l.stats
		from := l.first
		l.mu.Unlock()
		out[i].Holder = holder
		if !out[i].LastSuccess.IsZero() {
			from = out[i].LastSuccess
		}
		if holder && !from.IsZero() {
			out[i].Lag = max(now.Sub(from), 0)
		}
	}
	return out
}

// Close pushes the counters marked here, gives the lease up and stops the
// loops. It is idempotent.
func (s *Service) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		err = s.push(ctx, true)
		for _, l := range s.links {
			if l.client != nil {
				l.client.Close()
			}
		}
		if s.token.Load() != 0 {
			rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			_ = releaseScript.Exec(rctx, s.cfg.Local, []string{leaseKey}, []string{s.me}).Error()
			cancel()
		}
	})
	return err
}
