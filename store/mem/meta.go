package mem

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/hotcount/hotcount/store"

	"github.com/hotcount/hotcount/keyspace"
)

// Counter metadata and folds (the Backend of package meta).
//
// Records live in a table of the Store (not in a node: metadata is small
// and read rarely). Fold markers are integer keys in the node of their
// sub-counter, exactly where Redis keeps them; the embedded store never
// expires them (Del removes them).

type metaTable struct {
	mu   sync.Mutex
	recs map[string][]byte    // counter key → record
	exp  map[string]time.Time // counter key → when its record expires
}

// deadlineRe finds a record's deadline (Unix ms).
var deadlineRe = regexp.MustCompile(`"deadline":(\d+)`)

// get returns key's record unless it expired; caller holds t.mu.
func (t *metaTable) get(key string, now time.Time) ([]byte, bool) {
	data, ok := t.recs[key]
	if ok {
		if at, has := t.exp[key]; has && !now.Before(at) {
			delete(t.recs, key)
			delete(t.exp, key)
			return nil, false
		}
	}
	return data, ok
}

func (s *Store) metaTable() *metaTable {
	t := &s.meta
	t.mu.Lock()
	if t.recs == nil {
		t.recs = map[string][]byte{}
		t.exp = map[string]time.Time{}
	}
	t.mu.Unlock()
	return t
}

// GetMeta returns the metadata record of counter key.
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, false, err
	}
	t := s.metaTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	data, ok := t.get(key, s.now())
	return bytes.Clone(data), ok, nil
}

// GetMetas returns the metadata records of counters keys (nil: none).
func (s *Store) GetMetas(ctx context.Context, keys []string) ([][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	// Records are kept in one table, but each lookup is counted as a
	// round of the node that owns the record's key (a GET of
	// keyspace.MetaKey in Redis), one per node.
	mks := make([]string, len(keys))
	for i, k := range keys {
		mks[i] = keyspace.MetaKey(k)
	}
	for n, idx := range s.groups(mks) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		nd.cmds["get"] += int64(len(idx))
		nd.mu.Unlock()
	}
	t := s.metaTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([][]byte, len(keys))
	now := s.now()
	for i, k := range keys {
		if data, ok := t.get(k, now); ok {
			out[i] = bytes.Clone(data)
		}
	}
	return out, nil
}

// CASMeta stores data (nil: deletes the record) as key's record if the
// stored record's "epoch"
// member equals epoch (0: there is no record).
func (s *Store) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	t := s.metaTable()
	t.mu.Lock()
	ok, seq := s.casMeta(t, key, epoch, data)
	t.mu.Unlock()
	if err := s.durable(seq); err != nil {
		return false, err
	}
	return ok, nil
}

// casMeta is CASMeta under t.mu; it returns the journal record's sequence
// number.
func (s *Store) casMeta(t *metaTable, key string, epoch uint64, data []byte) (bool, uint64) {
	var cur uint64
	if old, ok := t.get(key, s.now()); ok {
		e, ok := recordEpoch(old)
		if !ok {
			return false, 0
		}
		cur = e
	}
	if cur != epoch {
		return false, 0
	}
	delete(t.exp, key)
	if data == nil {
		delete(t.recs, key)
		return true, s.logMeta(t, key)
	}
	t.recs[key] = bytes.Clone(data)
	if m := deadlineRe.FindSubmatch(data); m != nil {
		if ms, err := strconv.ParseInt(string(m[1]), 10, 64); err == nil {
			t.exp[key] = time.UnixMilli(ms).Add(2 * store.DeadlineGrace)
		}
	}
	return true, s.logMeta(t, key)
}

// logMeta journals key's record; caller holds t.mu.
func (s *Store) logMeta(t *metaTable, key string) uint64 {
	if s.j == nil {
		return 0
	}
	return s.j.add(metaRec(key, t.recs[key], t.exp[key]))
}

// recordEpoch reads the leading `{"epoch":N` of a record.
func recordEpoch(data []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"epoch":`))
	if !ok {
		return 0, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	e, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	return e, err == nil
}

// FoldOut moves the value of key's sub-counter label into the marker
// keyspace.AuxKey(key, label, "fold", foldID) and returns it; when the
// marker exists already it returns the marker's value and changes nothing.
// One atomic step under the node's lock.
func (s *Store) FoldOut(ctx context.Context, key, label, foldID string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	sub, marker := keyspace.SubKey(key, label), keyspace.AuxKey(key, label, "fold", foldID)
	nd := s.nodes[s.topo.Owner[keyspace.Slot(sub)]]
	nd.rounds.Add(1)
	nd.mu.Lock()
	nd.cmds["evalsha"]++
	if v, ok := nd.ints[marker]; ok {
		nd.mu.Unlock()
		return v, nil
	}
	v := nd.value(sub, s.now())
	if v != 0 {
		nd.ints[sub] = 0
	}
	nd.ints[marker] = v
	seq := max(nd.logKey(sub), nd.logKey(marker))
	nd.mu.Unlock()
	if err := s.durable(seq); err != nil {
		return 0, err
	}
	return v, nil
}

// FoldIn adds delta to key's sub-counter label unless the marker
// keyspace.AuxKey(key, label, "foldin", foldID) exists, and then sets the
// marker. It reports whether delta was added. expireAt, when not zero, is
// given to the sub-counter as its deadline if it has none. One atomic
// step.
func (s *Store) FoldIn(ctx context.Context, key, label, foldID string, delta int64, expireAt time.Time) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	sub, marker := keyspace.SubKey(key, label), keyspace.AuxKey(key, label, "foldin", foldID)
	nd := s.nodes[s.topo.Owner[keyspace.Slot(sub)]]
	nd.rounds.Add(1)
	nd.mu.Lock()
	nd.cmds["evalsha"]++
	if _, ok := nd.ints[marker]; ok {
		nd.mu.Unlock()
		return false, nil
	}
	v, err := add(nd.value(sub, s.now()), delta)
	if err != nil {
		nd.mu.Unlock()
		return false, fmt.Errorf("fold into %q: %w", sub, err)
	}
	nd.ints[sub] = v
	if delta != 0 && !expireAt.IsZero() {
		nd.expireNX(sub, expireAt)
	}
	nd.ints[marker] = delta
	seq := max(nd.logKey(sub), nd.logKey(marker))
	nd.mu.Unlock()
	if err := s.durable(seq); err != nil {
		return false, err
	}
	return true, nil
}

// SetMarks writes the record marks of counters (keyspace.MarkKey) as
// integer keys in the node of their cold sub-counter; with onlyNew a mark
// that exists is left as it is. One round per node. It reports which
// marks it wrote.
func (s *Store) SetMarks(ctx context.Context, marks []store.Mark, onlyNew bool) ([]bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	written := make([]bool, len(marks))
	keys := make([]string, len(marks))
	for i, m := range marks {
		keys[i] = keyspace.MarkKey(m.Key)
	}
	now := s.now()
	var seq uint64
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			nd.cmds["set"]++
			k := keys[i]
			if _, ok := nd.live(k, now); ok && onlyNew {
				continue
			}
			written[i] = true
			nd.ints[k] = marks[i].Value
			delete(nd.exp, k)
			if at := marks[i].ExpireAt; !at.IsZero() {
				nd.exp[k] = at
				nd.live(k, now)
			}
			seq = max(seq, nd.logKey(k))
		}
		nd.mu.Unlock()
	}
	if err := s.durable(seq); err != nil {
		return nil, err
	}
	return written, nil
}

// DelMark deletes the record mark of counter key if it holds v: one
// atomic step under the node's lock.
func (s *Store) DelMark(ctx context.Context, key string, v int64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	k := keyspace.MarkKey(key)
	nd := s.nodeOf(k)
	nd.rounds.Add(1)
	nd.mu.Lock()
	nd.cmds["evalsha"]++
	if cur, ok := nd.live(k, s.now()); !ok || cur != v {
		nd.mu.Unlock()
		return nil
	}
	delete(nd.ints, k)
	delete(nd.exp, k)
	seq := nd.logKey(k)
	nd.mu.Unlock()
	return s.durable(seq)
}

// IncrByMarked reports whether the record mark mark, in sub's node,
// exists, and adds delta to the sub-counter sub (giving it the deadline
// at, when not zero, unless it has one): one round. An empty mark is not
// checked.
func (s *Store) IncrByMarked(ctx context.Context, sub, mark string, delta int64, at time.Time) (int64, bool, error) {
	if err := s.check(ctx); err != nil {
		return 0, false, err
	}
	nd := s.nodeOf(sub)
	nd.rounds.Add(1)
	nd.mu.Lock()
	now := s.now()
	marked := false
	if mark != "" {
		nd.cmds["exists"]++
		_, marked = nd.live(mark, now)
	}
	v, seq, err := nd.incrByExpire(sub, delta, at, now)
	nd.mu.Unlock()
	if err != nil {
		return 0, false, err
	}
	if err := s.durable(seq); err != nil {
		return 0, false, err
	}
	return v, marked, nil
}
