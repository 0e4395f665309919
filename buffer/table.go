package buffer

import (
	"sync"
	"sync/atomic"

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
// Add reads only key (and hash on the hashed path) and updates v; since
// belongs to the flusher.
type cell struct {
	key   string
	hash  uint64
	since atomic.Int64 // UnixNano: creation or the last cut, whichever is later
	_     [cacheLine - 32]byte
	v     atomic.Int64
	_     [cacheLine - 8]byte
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
		if c.hash == h && c.key == key {
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
