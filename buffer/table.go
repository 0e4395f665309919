package buffer

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hotcount/hotcount/store"
)

// Value encoding of cell.v. A live cell holds its accumulated delta, kept
// within ±MaxDelta (2^53 − 1) by Add. A retired (dead) cell holds deadMark
// (-7·2^60) plus the transient deltas of Adds racing with the retirement,
// which undo themselves; anything below deadZone (-5·2^60) is dead. The
// dead zone is 2^60 away both from the live range and from wrapping past
// math.MinInt64. Fast-path Adds are below fastLimit (2^31) in magnitude,
// so concurrent Adds move a value by at most (goroutines in flight) × 2^31
// past where it was checked: crossing a 2^60 gap would take 2^29
// goroutines inside the same few instructions.
const (
	// MaxDelta is the largest magnitude of one key's accumulating local
	// delta; an Add that would take it further returns ErrOverflow. It is
	// store.MaxValue: a delta the cache could never accept is refused
	// before it is buffered.
	MaxDelta  = store.MaxValue
	fastLimit = 1 << 31
	deadMark  = -7 << 60
	deadZone  = -5 << 60
)

// cell is one key's accumulating delta. The read-mostly fields and the
// contended counter sit on separate cache lines, so Adds on one hot key
// from many cores do not also invalidate the key that lookups compare.
// Add reads only key, hot (and hash on the hashed path) and updates v
// (and adds, for a cold key); since belongs to the flusher.
type cell struct {
	key   string
	hash  uint64
	since atomic.Int64 // UnixNano: creation or the last cut, whichever is later
	lanes atomic.Pointer[lanes]
	hot   atomic.Bool // the key was hot at the last cut (set by cuts, under opsMu)
	_     [cacheLine - 44]byte
	v     atomic.Int64
	adds  atomic.Int64 // a cold key's Adds since the last cut
	_     [cacheLine - 16]byte
}

// lanes spread a hot cell's small adds over several counters, each on its
// own cache line, so that cores adding to one key at once do not take
// turns owning one line. Each lane uses cell.v's encoding (a live delta or
// the dead mark) within ±laneLimit; while a cell has lanes, its own v takes
// only the adds that do not fit a lane, within ±(MaxDelta − laneReserve),
// so the cell's total never passes ±MaxDelta.
type lanes struct {
	mask uint32
	l    []lane
}

// lane is one padded counter of lanes. It takes two cache lines: cores
// that fetch lines in aligned pairs would otherwise still pass two lanes'
// lines between them.
type lane struct {
	v atomic.Int64
	_ [2*cacheLine - 8]byte
}

const (
	// laneLimit bounds one lane's delta; maxLanes lanes reserve
	// laneReserve of the cell's ±MaxDelta.
	laneLimit   = 1 << 44
	maxLanes    = 64
	laneReserve = maxLanes * laneLimit
	// spreadAt is the cut delta magnitude from which a cell gets lanes:
	// a key this hot is likely added to from several cores at once.
	spreadAt = 1 << 14
	// maxSpread bounds the cells with lanes, whose memory is
	// 128 bytes per lane.
	maxSpread = 1024
)

// newLanes returns lanes for procs Ps: one per P, rounded up to a power
// of two, at most maxLanes.
func newLanes(procs int) *lanes {
	n := 1
	for n < procs && n < maxLanes {
		n *= 2
	}
	return &lanes{mask: uint32(n - 1), l: make([]lane, n)}
}

// sum returns the live lanes' total.
func (ls *lanes) sum() int64 {
	var s int64
	for i := range ls.l {
		if v := ls.l[i].v.Load(); v >= deadZone {
			s += v
		}
	}
	return s
}

// swap sets every lane to v and returns the sum of the live deltas it
// replaced.
func (ls *lanes) swap(v int64) int64 {
	var s int64
	for i := range ls.l {
		if x := ls.l[i].v.Swap(v); x >= deadZone {
			s += x
		}
	}
	return s
}

// cacheLine is the cache line size assumed for padding.
const cacheLine = 64

// table is an open-addressing hash table (linear probing, at most half
// full) whose slots are read without locks. Under the shard lock a slot
// only ever goes from nil to a cell; removing cells or growing builds a
// new table that is published atomically. A reader holding an old table
// may miss a new key (it then takes the locked path) or find a retired
// cell (its Add sees the dead mark and takes the locked path); a live
// cell is always in the current table.
type table struct {
	mask  uint64
	n     int // cells stored; written under the shard lock
	slots []atomic.Pointer[cell]
}

func newTable(size int) *table {
	return &table{mask: uint64(size - 1), slots: make([]atomic.Pointer[cell], size)}
}

// find returns the cell for key, or nil.
func (t *table) find(h uint64, key string) *cell {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		c := t.slots[i].Load()
		if c == nil {
			return nil
		}
		if c.hash == h && sameKey(c.key, key) {
			return c
		}
	}
}

// put stores c, which must not be in t; t must have a free slot to spare.
func (t *table) put(c *cell) {
	for i := c.hash & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == nil {
			t.slots[i].Store(c)
			t.n++
			return
		}
	}
}

const (
	shardBits    = 6
	numShards    = 1 << shardBits
	minTableSize = 8
)

// shard is one of numShards independent tables; a key's shard is chosen
// by the top bits of its hash. The lock serialises new keys, retirement
// and cuts within the shard; Adds to existing keys take no lock.
type shard struct {
	tab atomic.Pointer[table]
	_   [56]byte
	mu  sync.Mutex
	_   [56]byte
}

// insert adds c under sh.mu, growing the table when it would be more than
// half full.
func (sh *shard) insert(c *cell) {
	t := sh.tab.Load()
	if 2*(t.n+1) > len(t.slots) {
		nt := newTable(2 * len(t.slots))
		for i := range t.slots {
			if old := t.slots[i].Load(); old != nil {
				nt.put(old)
			}
		}
		sh.tab.Store(nt)
		t = nt
	}
	t.put(c)
}

// rebuild publishes a table holding only the cells keep accepts, under
// sh.mu.
func (sh *shard) rebuild(keep func(*cell) bool) {
	t := sh.tab.Load()
	var live []*cell
	for i := range t.slots {
		if c := t.slots[i].Load(); c != nil && keep(c) {
			live = append(live, c)
		}
	}
	size := minTableSize
	for 2*len(live) > size {
		size *= 2
	}
	nt := newTable(size)
	for _, c := range live {
		nt.put(c)
	}
	sh.tab.Store(nt)
}

// procPin and procUnpin are the runtime's: procPin returns the id of the
// P (the core's scheduler slot) the goroutine runs on. The runtime keeps
// them for outside callers (go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// pick returns the lane of the calling goroutine's P. The goroutine may
// move to another P right after; any lane is correct, the P's own one is
// merely uncontended.
func (ls *lanes) pick() *atomic.Int64 {
	p := procPin()
	procUnpin()
	return &ls.l[uint32(p)&ls.mask].v
}

// sameKey reports whether a == b. Keys of 8 to 16 bytes (most counter
// keys) are compared inline, as two overlapping 8-byte words, instead of
// through the runtime's call for strings of any length.
func sameKey(a, b string) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	if n < 8 || n > 16 {
		return a == b
	}
	pa, pb := unsafe.Pointer(unsafe.StringData(a)), unsafe.Pointer(unsafe.StringData(b))
	return load64(pa) == load64(pb) && load64(unsafe.Add(pa, n-8)) == load64(unsafe.Add(pb, n-8))
}
