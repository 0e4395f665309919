package mem

import (
	"context"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Key deadlines, as Redis keeps them: a key past its deadline reads as
// missing, and is removed when touched.

// live returns key's value and whether it exists (and is not past its
// deadline), removing it when it is; caller holds nd.mu.
func (nd *node) live(key string, now time.Time) (int64, bool) {
	v, ok := nd.ints[key]
	if !ok {
		return 0, false
	}
	if at, has := nd.exp[key]; has && !now.Before(at) {
		delete(nd.ints, key)
		delete(nd.exp, key)
		return 0, false
	}
	return v, true
}

// value is live without the existence flag.
func (nd *node) value(key string, now time.Time) int64 {
	v, _ := nd.live(key, now)
	return v
}

// expireNX gives key the deadline at unless it has one; caller holds nd.mu.
func (nd *node) expireNX(key string, at time.Time) {
	if _, has := nd.exp[key]; !has {
		nd.exp[key] = at
	}
}

// IncrByExpire adds delta to key and, when at is not zero and key has no
// deadline, gives it the deadline at; one round.
func (s *Store) IncrByExpire(ctx context.Context, key string, delta int64, at time.Time) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	nd := s.nodes[s.topo.Owner[keyspace.Slot(key)]]
	nd.rounds.Add(1)
	nd.mu.Lock()
	v, seq, err := nd.incrByExpire(key, delta, at, s.now())
	nd.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := s.durable(seq); err != nil {
		return 0, err
	}
	return v, nil
}

// incrByExpire is IncrByExpire's step in the node, whose lock the caller
// holds: it returns the new value and the log position to wait for.
func (nd *node) incrByExpire(key string, delta int64, at, now time.Time) (int64, uint64, error) {
	nd.cmds["incrby"]++
	v, err := add(nd.value(key, now), delta)
	if err != nil {
		return 0, 0, err
	}
	nd.ints[key] = v
	if !at.IsZero() {
		nd.cmds["pexpireat"]++
		nd.expireNX(key, at)
	}
	return v, nd.logKey(key), nil
}

// ExpireAt gives keys the deadline at (zero: none, as PERSIST) and reports
// which exist; a deadline not after now removes the key. One round per
// node.
func (s *Store) ExpireAt(ctx context.Context, keys []string, at time.Time) ([]bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	now := s.now()
	var seq uint64
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			k := keys[i]
			if _, ok := nd.live(k, now); !ok {
				continue
			}
			out[i] = true
			switch {
			case at.IsZero():
				nd.cmds["persist"]++
				delete(nd.exp, k)
			default:
				nd.cmds["pexpireat"]++
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
	return out, nil
}

// Deadlines reports, for each key, whether it exists and its deadline. One
// round per node.
func (s *Store) Deadlines(ctx context.Context, keys []string) ([]store.Deadline, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]store.Deadline, len(keys))
	now := s.now()
	for n, idx := range s.groups(keys) {
		nd := s.nodes[n]
		nd.rounds.Add(1)
		nd.mu.Lock()
		for _, i := range idx {
			nd.cmds["pexpiretime"]++
			if _, ok := nd.live(keys[i], now); ok {
				out[i] = store.Deadline{Exists: true, At: nd.exp[keys[i]]}
			}
		}
		nd.mu.Unlock()
	}
	return out, nil
}

// ExpireNow removes key as if its deadline had passed (a test hook: it
// lets a test expire the sub-counters of a counter one by one).
func (s *Store) ExpireNow(key string) {
	nd := s.nodes[s.topo.Owner[keyspace.Slot(key)]]
	nd.mu.Lock()
	delete(nd.ints, key)
	delete(nd.exp, key)
	seq := nd.logKey(key)
	nd.mu.Unlock()
	_ = s.durable(seq)
}
