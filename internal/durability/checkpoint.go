package durability

// Fast-mode checkpoints and restore.
//
// # Checkpoints
//
// Incr of a fast-mode counter marks it touched (a lock-free map lookup in
// the common case). Every CheckpointInterval a round reads the current value
// of every sub-counter of the touched counters, uncached, in one Get (one
// pipelined round per node), and saves each sub-counter whose value changed
// since this process last saved it as a durable.Checkpoint keyed by its
// sub-key "{K#L}". A checkpoint is an absolute value with the time it was
// read, and the durable store keeps the newest, so saving one twice, or a
// late save of an older reading, changes nothing. A counter stays watched
// while it is touched or has unflushed buffered deltas. A counter written
// only by unbuffered increments that the cache acknowledged leaves the
// watch once a round that saved it with every node intact sent its read
// after the last reply: that read saw what they wrote, so a long tail of
// counters written once each costs about one read each. Any other counter (a buffered
// delta lands a flush later; a write without a reply may still land) stays
// for two intervals after its last touch, and until a good round listed
// it at least the longest flush interval plus Timeout after that touch, so
// a write that lands after the round that saw its touch is still saved. At
// most MaxTracked counters are watched.
//
// # Detecting cache loss
//
// Each cache node holds a sentinel: the key "hotcount:sentinel:{n}" for the
// smallest n whose slot the node owns. Its value is the node's incarnation,
// a random positive number written once by whichever process first finds
// the key missing, with an idempotent increment guarded by a token in the
// same slot (the SET NX of the Store interface); everyone else reads the
// value that won. The incarnation each process has accepted is also recorded
// in the durable store's metadata, under "hotcount:sentinel:" + key.
//
// Every round first reads the sentinels. A node whose sentinel is missing,
// or holds another incarnation than the one recorded, lost its data (it
// restarted empty, was flushed, or failed over to a replica that never had
// the sentinel). Such a sentinel is read again after the record: in
// between, another process may have created it, restored the node and
// recorded the new incarnation, and a value read before the record would
// take the node as lost a second time (a missing one would even create a
// second incarnation on top of the first, its creation token being named
// after the new record) and restore it twice. A lost node's sub-counters
// are then restored: every sub-counter checkpoint whose slot the node owns
// is added to the sub-counter with an increment guarded by the token
// keyspace.AuxKey(K, L, "restore", incarnation), so a restore retried, or
// run by several processes at once, counts once; only then is the new
// incarnation recorded (a restore whose record failed is reported all the
// same, and the next round records it). Values written to
// the node after it came back (writers do not stop) are kept: the restore
// adds to them. What is lost is what reached the node between its last
// checkpoint and the loss: at most one checkpoint interval of writes (plus
// the round's own duration).
//
// A round saves checkpoints only for nodes whose sentinel, read in the
// same pipelined round as the sub-counters, still holds the incarnation
// accepted before the round, so a reading taken after a loss is never
// saved over a good checkpoint.
//
// # Store identity
//
// Beside its sentinel each node holds a mark, "hotcount:store:{n}" (same
// slot), derived from the durable store's StoreID: it is written, once,
// by a process that accepts the node, before it creates a missing
// sentinel. A node that looks lost by the store's records (its sentinel
// differs from the recorded incarnation) although it holds a sentinel and
// no mark, or the mark of another store, was not lost: the store does not
// belong to this cluster (it served another one, or was restored from
// elsewhere). Nothing is restored or recorded then, and the round fails
// with ErrForeignStore. A cluster whose every node came back empty keeps
// no trace of its store and cannot be told apart.
//
// Not detected: a failover that loses only the last writes of a node (the
// replica had the sentinel), and a per-counter "sum went below its
// checkpoint" check is not made, since counters may be decremented.
// Sentinels must not be evicted: run the cache with a noeviction or
// volatile-* maxmemory policy.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

const (
	// sentinelPrefix starts every sentinel key (and its metadata key).
	sentinelPrefix = "hotcount:sentinel:"
	// markPrefix starts every store mark key.
	markPrefix = "hotcount:store:"
	// sentinelTokenTTL guards the creation of a sentinel: long enough for
	// two processes that both saw it missing to write it once.
	sentinelTokenTTL = time.Hour
	// restoreTokenTTL is how long a restore token is kept, so a process
	// that finds a loss late repeats nothing.
	restoreTokenTTL = 24 * time.Hour
	// ckChunk is the most sub-counters restored per call.
	ckChunk = 10000
	// ckCounters is the most counters read and saved per round trip.
	ckCounters = 1000
	// maxRestores is the number of Restore records kept.
	maxRestores = 16
)

// ErrForeignStore: the durable store does not belong to the cache
// cluster: a node it would take as lost holds another store's mark (see
// the package documentation of checkpoint.go). Nothing was restored.
var ErrForeignStore = errors.New("hotcount: the durable store does not belong to this cache cluster")

// Restore describes one repair of a cache node that lost its data.
type Restore struct {
	// Node is the cache node and Incarnation its new sentinel value.
	Node        string
	Incarnation int64
	// At is when the loss was detected and repaired.
	At time.Time
	// Keys is the number of sub-counters restored and Amount the sum of
	// their checkpoint values added back.
	Keys   int
	Amount int64
	// Metas is the number of counters whose label-set record (held by
	// this node) was restored with them.
	Metas int
	// Partial reports a restore limited to some counters (a limited or
	// dry Rebuild): the node's new incarnation was not recorded, so its
	// other counters are restored later. DryRun reports that nothing was
	// written: Keys, Amount and Metas are what would have been.
	Partial, DryRun bool
	// Window is the age of the oldest checkpoint used: the longest span
	// of writes that may have been lost.
	Window time.Duration
	// EstimatedLoss estimates the increments lost: each restored
	// sub-counter's rate between this process's last two checkpoints of
	// it, times the time from its checkpoint to the loss (taken as one
	// checkpoint interval after the node was last seen intact, or the
	// detection if sooner). 0 when this process had no rate.
	EstimatedLoss int64
}

// CheckpointReport is the outcome of one checkpoint round.
type CheckpointReport struct {
	// Counters is the number of watched counters read.
	Counters int
	// Saved is the number of sub-counter checkpoints written.
	Saved int
	// Skipped is the number of nodes whose counters were not saved this
	// round (new or changed incarnation).
	Skipped int
	// Restores lists the node repairs made by this round.
	Restores []Restore
}

// touchEntry is the last touch of a watched counter, in Unix nanoseconds,
// or deadTouch once retired. A write that reports its outcome (an
// unbuffered one: Service.TouchWrite) also counts itself in flight until
// it completes, and a successful one sets done to when its reply came: a
// counter written only by such writes, with nothing in flight, is in the
// cache as written, and a read sent after done, by a round that saved it
// with every node intact (readAt), has saved it. Any other touch (a buffered delta, a write that failed) makes
// the entry unsure: the idle rule alone retires it.
type touchEntry struct {
	at       atomic.Int64
	done     atomic.Int64 // unix ns of the last acknowledged write's reply (0: none)
	inflight atomic.Int64 // writes touched with Write and not completed
	unsure   atomic.Bool  // touched other than by an acknowledged write
	readAt   atomic.Int64 // unix ns before the last good round's read of it was sent (0: none)
}

const deadTouch = math.MinInt64

// savedCP is what this process last saved for a sub-counter.
type savedCP struct {
	v    int64
	at   time.Time
	rate float64 // per second, between the last two saves; 0 unknown
}

type checkpointer struct {
	d         *Service
	touched   sync.Map // counter key → *touchEntry
	ntracked  atomic.Int64
	untracked atomic.Uint64
	kick      chan struct{}
	clearedMu sync.Mutex
	clears    []string // counters cleared since the last round

	mu       sync.Mutex                    // one round at a time; guards the fields below
	listed   int64                         // unix ns the last good round listed its counters (0: none yet)
	saved    map[string]map[string]savedCP // counter key → sub-key → last save
	known    map[string]int64              // sentinel key → accepted incarnation
	lastOK   map[string]time.Time          // sentinel key → last read that found it intact
	topo     *store.Topology               // the topology sentKeys belongs to
	sentKeys []string                      // sentinel key per node index ("" without slots)
	restores []Restore
	mark     int64                 // this store's mark (0: the store has no identity)
	dls      map[string]recordedDL // counter key → deadline this process recorded with its checkpoints

	lastRound                                          atomic.Int64 // unix ns of the last good round
	rounds, roundErrs, nsaved, nrestores, restoredKeys atomic.Uint64
	restoredAmount                                     atomic.Int64
}

func (ck *checkpointer) init(d *Service) {
	ck.d = d
	ck.kick = make(chan struct{}, 1)
	ck.saved = map[string]map[string]savedCP{}
	ck.dls = map[string]recordedDL{}
	ck.known = map[string]int64{}
	ck.lastOK = map[string]time.Time{}
	ck.mark = storeMark(d.be.StoreID())
}

// storeMark derives a node mark from a store id: positive, within
// store.MaxValue; 0 for no id.
func storeMark(id string) int64 {
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return int64(h.Sum64()>>12) | 1
}

// markKeys returns the mark key beside each sentinel key ("" stays "").
func markKeys(sent []string) []string {
	out := make([]string, len(sent))
	for i, k := range sent {
		if k != "" {
			out[i] = markPrefix + strings.TrimPrefix(k, sentinelPrefix)
		}
	}
	return out
}

// markNode writes this store's mark to a node that has none (cur 0). As
// for the sentinel, the token that guards the write is named after the
// incarnation recorded before (inc), so a token that outlived the mark
// never blocks the write.
func (ck *checkpointer) markNode(ctx context.Context, key string, cur, inc int64) error {
	if ck.mark == 0 || cur != 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
	defer cancel()
	res, err := ck.d.eng.Store().IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: ck.mark, TokenKey: key + ":init:" + strconv.FormatInt(inc, 10), TTL: sentinelTokenTTL}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		return fmt.Errorf("store mark %s: %w", key, err)
	}
	return nil
}

// touch marks a fast-mode counter for the next checkpoint. An entry the
// checkpointer retired (at == deadTouch) is replaced, never revived, so a
// touch racing with the retirement is not lost.
func (ck *checkpointer) touch(key string) { ck.note(key, false) }

// note is touch; with write, the write is also counted in flight on
// the entry returned (nil when the counter is not watched), which the
// caller completes with wrote.
func (ck *checkpointer) note(key string, write bool) *touchEntry {
	now := ck.d.cfg.Clock.Now().UnixNano()
	for {
		v, ok := ck.touched.Load(key)
		if !ok {
			break
		}
		e := v.(*touchEntry)
		if write {
			// Counted before the touch is stored, so that a round that
			// sees the touch sees the write in flight too.
			e.inflight.Add(1)
		}
		old := e.at.Load()
		if old == deadTouch {
			if write {
				e.inflight.Add(-1)
			}
			ne := newTouchEntry(now, write)
			if ck.touched.CompareAndSwap(key, v, ne) {
				return ne // the retiring round counts the entry out; we count it in
			}
			continue
		}
		if !write && !e.unsure.Load() {
			e.unsure.Store(true) // a buffered delta: when it lands is not known here
		}
		if now-old <= int64(time.Millisecond) || e.at.CompareAndSwap(old, now) {
			return e
		}
		if write {
			e.inflight.Add(-1)
		}
	}
	if ck.ntracked.Load() >= MaxTracked {
		ck.untracked.Add(1)
		select {
		case ck.kick <- struct{}{}:
		default:
		}
		return nil
	}
	e := newTouchEntry(now, write)
	if _, loaded := ck.touched.LoadOrStore(key, e); loaded {
		return ck.note(key, write) // lost a race: update the entry that won
	}
	ck.ntracked.Add(1)
	return e
}

// newTouchEntry returns the entry of a first touch at now: a write's (in
// flight), or another's (unsure: a buffered delta).
func newTouchEntry(now int64, write bool) *touchEntry {
	e := &touchEntry{}
	e.at.Store(now)
	if write {
		e.inflight.Store(1)
	} else {
		e.unsure.Store(true)
	}
	return e
}

// wrote completes a write counted by note: acknowledged (ok), its
// reply time becomes the entry's done; otherwise (not written, or no
// reply) its outcome may still show in the cache, so the entry is left to
// the idle rule alone, and the write counts as a touch now.
func (ck *checkpointer) wrote(e *touchEntry, ok bool) {
	if e == nil {
		return
	}
	now := ck.d.cfg.Clock.Now().UnixNano()
	if ok {
		for {
			old := e.done.Load()
			if old >= now || e.done.CompareAndSwap(old, now) {
				break
			}
		}
	} else {
		// A hot key's every increment comes here (buffered): the same
		// reads-first and 1 ms tolerance as touch, so that it does not
		// write the shared entry each time.
		if !e.unsure.Load() {
			e.unsure.Store(true)
		}
		if at := e.at.Load(); at != deadTouch && now-at > int64(time.Millisecond) {
			e.at.CompareAndSwap(at, now)
		}
	}
	e.inflight.Add(-1)
}

// cleared notes that counter key was cleared in the store: the next round
// forgets what this process saved of it, and saves none of its
// sub-counters that read 0 (the cleared value) until one is written again,
// so that a cleared counter leaves no rows.
func (ck *checkpointer) cleared(key string) {
	ck.clearedMu.Lock()
	ck.clears = append(ck.clears, key)
	ck.clearedMu.Unlock()
}

// takeClears applies the clears noted since it last ran and returns
// their counters; ck.mu is held.
func (ck *checkpointer) takeClears() map[string]bool {
	ck.clearedMu.Lock()
	keys := ck.clears
	ck.clears = nil
	ck.clearedMu.Unlock()
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
		delete(ck.dls, k)
		if _, watched := ck.touched.Load(k); watched {
			ck.saved[k] = map[string]savedCP{} // known, with nothing saved
		} else {
			delete(ck.saved, k)
		}
	}
	return out
}

func (ck *checkpointer) stats(s *Stats) {
	s.Checkpoints, s.CheckpointErrors, s.Saved = ck.rounds.Load(), ck.roundErrs.Load(), ck.nsaved.Load()
	s.Tracked, s.Untracked = uint64(max(ck.ntracked.Load(), 0)), ck.untracked.Load()
	s.Restores, s.RestoredKeys, s.RestoredAmount = ck.nrestores.Load(), ck.restoredKeys.Load(), ck.restoredAmount.Load()
	if t := ck.lastRound.Load(); t != 0 {
		s.LastCheckpoint = time.Unix(0, t)
	}
}

// round runs one checkpoint round: check the sentinels (restoring lost
// nodes), then save the watched counters of the nodes that are intact.
func (ck *checkpointer) round(ctx context.Context) (CheckpointReport, error) {
	start := ck.d.cfg.Clock.Now()
	rep, err := ck.roundLocked(ctx)
	ck.d.obs.observe("checkpoint", ck.d.cfg.Clock.Now().Sub(start))
	ck.rounds.Add(1)
	if err != nil {
		ck.roundErrs.Add(1)
	}
	if len(rep.Restores) > 0 && ck.d.heal.d != nil {
		ck.d.heal.nodeLost(rep.Restores[0].At) // durable counters lived there too
	}
	if cb := ck.d.cfg.OnRestore; cb != nil {
		for _, r := range rep.Restores {
			cb(r)
		}
	}
	return rep, err
}

func (ck *checkpointer) roundLocked(ctx context.Context) (CheckpointReport, error) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	var rep CheckpointReport
	topo, err := ck.topology(ctx)
	if err != nil {
		return rep, err
	}
	rep.Restores, err = ck.checkSentinels(ctx, topo, nil)
	if err != nil {
		return rep, err
	}
	listed := ck.d.cfg.Clock.Now().UnixNano()
	keys := ck.watched()
	rep.Counters = len(keys)
	for start := 0; start < len(keys); start += ckCounters {
		n, skipped, err := ck.save(ctx, topo, keys[start:min(start+ckCounters, len(keys))])
		rep.Saved += n
		rep.Skipped = max(rep.Skipped, skipped)
		if err != nil {
			return rep, err
		}
	}
	ck.listed = listed
	ck.lastRound.Store(ck.d.cfg.Clock.Now().UnixNano())
	return rep, nil
}

// topology returns the current map and makes sentKeys match it.
func (ck *checkpointer) topology(ctx context.Context) (*store.Topology, error) {
	tctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
	defer cancel()
	topo, err := ck.d.eng.Store().Topology(tctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if topo != ck.topo {
		ck.topo, ck.sentKeys = topo, sentinelKeys(topo)
	}
	return topo, nil
}

// sentinelKeys returns, per node index, "hotcount:sentinel:{n}" for the
// smallest n whose slot the node owns ("" for a node without slots).
func sentinelKeys(topo *store.Topology) []string {
	keys := make([]string, len(topo.Nodes))
	owns := make([]bool, len(topo.Nodes))
	want := 0
	for _, o := range topo.Owner {
		if int(o) < len(owns) && !owns[o] {
			owns[o] = true
			want++
		}
	}
	for n := 0; want > 0 && n < 1<<22; n++ {
		k := sentinelPrefix + "{" + strconv.Itoa(n) + "}"
		o := topo.Owner[keyspace.Slot(k)]
		if keys[o] == "" {
			keys[o] = k
			want--
		}
	}
	return keys
}

// watched returns the counters to checkpoint and forgets the ones idle
// for long enough.
func (ck *checkpointer) watched() []string {
	d := ck.d
	var longest time.Duration
	for _, iv := range d.ns.FlushIntervals() {
		longest = max(longest, iv)
	}
	slack := max(longest, 500*time.Millisecond) + d.cfg.Timeout
	keep := 2*d.cfg.CheckpointInterval + slack
	// A counter is kept until a good round listed it after its last touch
	// (and its flush): idle time alone does not count, or a gap between
	// good rounds (failing rounds, a slow one) would drop it unsaved.
	cut := min(d.cfg.Clock.Now().Add(-keep).UnixNano(), ck.listed-int64(slack))
	var keys []string
	ck.touched.Range(func(k, v any) bool {
		key := k.(string)
		e := v.(*touchEntry)
		at := e.at.Load()
		// Its writes all acknowledged (none in flight, the last reply
		// after the last touch), and read after that reply by a round
		// that saved it with every node intact: it saved what they wrote.
		done := e.done.Load()
		landed := e.inflight.Load() == 0 && !e.unsure.Load() && done >= at && done < e.readAt.Load()
		if at != deadTouch && (at < cut || landed) && d.eng.Pending(key) == 0 && e.at.CompareAndSwap(at, deadTouch) {
			// Idle since at least two intervals, and a good round that
			// started after its last writes saved them; or written only
			// by acknowledged writes that such a round read.
			ck.touched.CompareAndDelete(key, v)
			ck.ntracked.Add(-1)
			for sub := range ck.saved[key] {
				delete(ck.saved[key], sub)
			}
			delete(ck.saved, key)
			delete(ck.dls, key)
			return true
		}
		keys = append(keys, key)
		return true
	})
	return keys
}

// save reads the sub-counters of keys together with the sentinels (one
// round per node) and saves the changed values of the sub-counters whose
// node kept its accepted incarnation.
func (ck *checkpointer) save(ctx context.Context, topo *store.Topology, keys []string) (saved, skipped int, err error) {
	d := ck.d
	ck.takeClears()
	readStart := d.cfg.Clock.Now().UnixNano()
	reads, sent, at, err := d.eng.Read(ctx, keys, nonEmpty(ck.sentKeys))
	if err != nil {
		return 0, 0, fmt.Errorf("checkpoint read: %w", err)
	}
	clearedNow := ck.takeClears() // during the read: its reading is not saved
	sent = spread(ck.sentKeys, sent)
	intact := make([]bool, len(ck.sentKeys))
	for i, k := range ck.sentKeys {
		intact[i] = k != "" && sent[i] != 0 && sent[i] == ck.known[k]
		if k != "" && !intact[i] {
			skipped++
		}
	}
	var cps []durable.Checkpoint
	for _, r := range reads {
		if clearedNow[r.Key] || (allZero(r.Values) && d.pastNote(r.Key, at)) {
			continue
		}
		for j, sub := range r.Subs {
			v := r.Values[j]
			if !intact[topo.Owner[keyspace.Slot(sub)]] {
				continue
			}
			old, ok := ck.saved[r.Key][sub]
			if ok && old.v == v {
				continue
			}
			if !ok && v == 0 && ck.saved[r.Key] != nil {
				continue // cleared here, not written since
			}
			cps = append(cps, durable.Checkpoint{Key: sub, Total: v, At: at})
		}
	}
	if len(cps) == 0 {
		ck.readBy(reads, clearedNow, skipped, readStart)
		return 0, skipped, nil
	}
	dls, err := ck.deadlinesToRecord(ctx, cps, at)
	if err != nil {
		return 0, skipped, fmt.Errorf("checkpoint deadlines: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	if len(dls) > 0 {
		// Before the values: no checkpoint is restored without the
		// deadline its counter had.
		if dls, err = d.recordExact(ctx, dls); err != nil {
			return 0, skipped, fmt.Errorf("checkpoint deadlines: %w", err)
		}
		for k, dl := range dls {
			ck.dls[k] = recordedDL{at: dl, known: true}
		}
	}
	if err := d.be.SaveCheckpoints(sctx, cps); err != nil {
		return 0, skipped, fmt.Errorf("checkpoint save: %w", err)
	}
	for _, cp := range cps {
		key, _, _ := keyspace.ParseSubKey(cp.Key)
		s := savedCP{v: cp.Total, at: at}
		if old, ok := ck.saved[key][cp.Key]; ok && at.After(old.at) {
			s.rate = float64(cp.Total-old.v) / at.Sub(old.at).Seconds()
		}
		if ck.saved[key] == nil {
			ck.saved[key] = map[string]savedCP{}
		}
		ck.saved[key][cp.Key] = s
	}
	ck.nsaved.Add(uint64(len(cps)))
	ck.readBy(reads, clearedNow, skipped, readStart)
	return len(cps), skipped, nil
}

// readBy notes, on the watch entry of each counter of reads that a round
// read and saved with every node intact (not cleared during the read),
// that its read was sent after start: its writes acknowledged before
// start are in what was saved.
func (ck *checkpointer) readBy(reads []engine.SubRead, cleared map[string]bool, skipped int, start int64) {
	if skipped > 0 {
		return
	}
	for _, r := range reads {
		if cleared[r.Key] {
			continue
		}
		if v, ok := ck.touched.Load(r.Key); ok {
			e := v.(*touchEntry)
			for {
				old := e.readAt.Load()
				if old >= start || e.readAt.CompareAndSwap(old, start) {
					break
				}
			}
		}
	}
}

// recordedDL is the deadline this process recorded for a counter with its
// checkpoints; known is false until it did.
type recordedDL struct {
	at    time.Time
	known bool
}

// deadlinesToRecord returns the deadlines to record with the checkpoints
// cps, read at now: those of their counters in a namespace with a TTL that
// this process has not recorded yet, or whose recorded deadline passed (a
// counter started again under the key). They are read from the cache,
// exactly (a cold counter's key, a sharded one's record), so a counter
// first written by another process, or whose estimate the clean-up pass
// has not written yet, comes back from these checkpoints with the
// deadline it had. A deadline set with Expire or removed with Persist is
// recorded by the call itself; a counter the cache no longer holds gets
// nothing.
func (ck *checkpointer) deadlinesToRecord(ctx context.Context, cps []durable.Checkpoint, now time.Time) (map[string]time.Time, error) {
	d := ck.d
	var keys []string
	seen := map[string]bool{}
	for _, cp := range cps {
		key, _, ok := keyspace.ParseSubKey(cp.Key)
		if !ok || seen[key] || d.ns.Lookup(key).TTL <= 0 {
			continue
		}
		seen[key] = true
		if r := ck.dls[key]; r.known && (r.at.IsZero() || now.Before(r.at)) {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ds, err := d.cacheDeadlines(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for i, k := range keys {
		if ds[i].Exists {
			out[k] = ds[i].At
		}
	}
	return out, nil
}

// saveNow reads and saves every sub-counter of counter key now, whether
// or not this process saved the same values before. It fails while a
// cache node is not accepted (lost, or not seen intact yet), whose
// readings are not saved.
func (ck *checkpointer) saveNow(ctx context.Context, key string) error {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	topo, err := ck.topology(ctx)
	if err != nil {
		return err
	}
	delete(ck.saved, key)
	_, skipped, err := ck.save(ctx, topo, []string{key})
	if err == nil && skipped > 0 {
		err = fmt.Errorf("checkpoint %q: %d cache nodes not intact: %w", key, skipped, store.ErrUnavailable)
	}
	return err
}

// allZero reports whether every value is 0.
func allZero(vals []int64) bool {
	for _, v := range vals {
		if v != 0 {
			return false
		}
	}
	return true
}

// nonEmpty drops the "" entries (nodes without slots) from keys.
func nonEmpty(keys []string) []string {
	out := keys[:0:0]
	for _, k := range keys {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// spread maps the values read for nonEmpty(keys) back onto keys (0 for "").
func spread(keys []string, vals []int64) []int64 {
	out := make([]int64, len(keys))
	j := 0
	for i, k := range keys {
		if k != "" {
			out[i] = vals[j]
			j++
		}
	}
	return out
}

// checkSentinels reads every node's sentinel and mark and accepts or
// repairs it (see the file comment). A node repaired or newly seen is
// accepted, and its counters are saved from the next read on. With o (a
// limited or dry Rebuild) every node is checked against the store's
// records, only o's counters are restored, and nothing is recorded.
func (ck *checkpointer) checkSentinels(ctx context.Context, topo *store.Topology, o *RebuildOptions) ([]Restore, error) {
	keys := ck.sentKeys
	marks := markKeys(keys)
	read := nonEmpty(keys)
	read = append(read, nonEmpty(marks)...)
	gctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
	at := ck.d.cfg.Clock.Now()
	vals, err := ck.d.eng.Store().Get(gctx, read)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("checkpoint sentinels: %w", err)
	}
	sv, mv := spread(keys, vals[:len(vals)/2]), spread(marks, vals[len(vals)/2:])
	var out []Restore
	var errs []error
	for i, k := range keys {
		if k == "" {
			continue
		}
		if o == nil && sv[i] != 0 && sv[i] == ck.known[k] {
			ck.lastOK[k] = at
			if err := ck.markNode(ctx, marks[i], mv[i], sv[i]); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		r, err := ck.accept(ctx, topo, topo.Nodes[i], k, sv[i], marks[i], mv[i], o)
		if r != nil {
			out = append(out, *r)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// accept settles a sentinel that this process has not accepted as read:
// it creates a missing one, compares it with the incarnation recorded in
// the durable store, restores the node if it changed, and records it. It
// refuses a node that looks lost but holds another store's mark, and with
// o records nothing. A restore it made is returned also when recording the
// incarnation failed after it.
func (ck *checkpointer) accept(ctx context.Context, topo *store.Topology, node, key string, v int64, markKey string, mark int64, o *RebuildOptions) (*Restore, error) {
	mctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
	data, err := ck.d.be.LoadMeta(mctx, sentinelPrefix+key)
	cancel()
	var recorded int64
	switch {
	case errors.Is(err, durable.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("sentinel %s: %w", key, err)
	default:
		if recorded, err = strconv.ParseInt(string(data), 10, 64); err != nil {
			return nil, fmt.Errorf("sentinel %s: bad record %q: %w", key, data, store.ErrNotInteger)
		}
	}
	if v != recorded {
		// v was read before the record: in between, another process may
		// have created the sentinel, restored the node and recorded the
		// new incarnation. Taken as read, a missing v would create a
		// second incarnation on top of it (the creation token is named
		// after the record, the new one) and restore the node again. Read
		// it again, after the record: a sentinel created before the
		// record was written now reads as recorded.
		gctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
		vals, err := ck.d.eng.Store().Get(gctx, []string{key})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("sentinel %s: %w", key, err)
		}
		v = vals[0]
	}
	lost := v != recorded && (recorded != 0 || ck.known[key] != 0)
	if lost && ck.mark != 0 && v != 0 && mark == 0 {
		// The mark may have been read before the sentinel; its creator
		// wrote the mark first, so read it again after.
		gctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
		vals, err := ck.d.eng.Store().Get(gctx, []string{markKey})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("store mark %s: %w", markKey, err)
		}
		mark = vals[0]
	}
	if lost && ck.mark != 0 && ((mark != 0 && mark != ck.mark) || (v != 0 && mark == 0)) {
		return nil, fmt.Errorf("node %s holds incarnation %d, the store recorded %d, and the node is marked by another store: %w", node, v, recorded, ErrForeignStore)
	}
	dry := o != nil && o.DryRun
	if !dry {
		if err := ck.markNode(ctx, markKey, mark, recorded); err != nil {
			return nil, err
		}
	}
	if v == 0 && !dry {
		if v, err = ck.createSentinel(ctx, key, recorded); err != nil {
			return nil, err
		}
	}
	var r *Restore
	if lost {
		if r, err = ck.restore(ctx, topo, node, v, ck.lastOK[key], o); err != nil {
			return nil, err
		}
	}
	if o != nil {
		return r, nil // limited or dry: the next full round records it
	}
	if v != recorded {
		mctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
		err := ck.d.be.SaveMeta(mctx, sentinelPrefix+key, []byte(strconv.FormatInt(v, 10)))
		cancel()
		if err != nil {
			// The restore was made (and counted): report it; the next
			// round records the incarnation, and restores nothing twice.
			return r, fmt.Errorf("sentinel %s: %w", key, err)
		}
	}
	ck.known[key] = v
	return r, nil
}

// repair checks every node for a loss for a limited or dry Rebuild.
func (ck *checkpointer) repair(ctx context.Context, o RebuildOptions) ([]Restore, error) {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	topo, err := ck.topology(ctx)
	if err != nil {
		return nil, err
	}
	return ck.checkSentinels(ctx, topo, &o)
}

// createSentinel writes a random incarnation to a missing sentinel, once,
// and returns the value that won. The token that guards the write is named
// after the incarnation recorded before (which every process reads alike),
// so each loss has its own token and a stale one never blocks a write.
func (ck *checkpointer) createSentinel(ctx context.Context, key string, recorded int64) (int64, error) {
	st := ck.d.eng.Store()
	ctx, cancel := context.WithTimeout(ctx, ck.d.cfg.Timeout)
	defer cancel()
	inc := int64(ck.d.cfg.Rand()>>11) | 1 // within store.MaxValue
	res, err := st.IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: inc, TokenKey: key + ":init:" + strconv.FormatInt(recorded, 10), TTL: sentinelTokenTTL}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		return 0, fmt.Errorf("sentinel %s: %w", key, err)
	}
	if res[0].Applied {
		return res[0].Value, nil
	}
	vals, err := st.Get(ctx, []string{key})
	if err != nil {
		return 0, fmt.Errorf("sentinel %s: %w", key, err)
	}
	if vals[0] == 0 {
		return 0, fmt.Errorf("sentinel %s: %w: lost again while being created", key, store.ErrUnavailable)
	}
	return vals[0], nil
}

// Checkpoint runs a checkpoint round now: it checks every cache node for
// data loss, restores lost nodes' fast-mode counters from their
// checkpoints, and saves the watched fast-mode counters.
func (d *Service) Checkpoint(ctx context.Context) (CheckpointReport, error) {
	return d.ck.round(ctx)
}

// Restores returns the last node repairs (at most 16), oldest first; none
// for a nil Service.
func (d *Service) Restores() []Restore {
	if d == nil {
		return nil
	}
	ck := &d.ck
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return append([]Restore(nil), ck.restores...)
}
