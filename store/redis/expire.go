package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/store"
)

// Key deadlines: PEXPIREAT, PERSIST and PEXPIRETIME (Redis 7), in batches
// of one pipelined round per node.

// IncrByExpire adds delta to key and, when at is not zero, gives key the
// deadline at unless it has one (PEXPIREAT … NX): two commands pipelined
// in one round trip. On overflow nothing changes.
func (s *Store) IncrByExpire(ctx context.Context, key string, delta int64, at time.Time) (int64, error) {
	if at.IsZero() {
		return s.IncrBy(ctx, key, delta)
	}
	ms := at.UnixMilli()
	res, err := s.run(ctx, batch{
		n:   2,
		key: func(int) string { return key },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			if i == 0 {
				return b.Incrby().Key(key).Increment(delta).Build()
			}
			return b.Pexpireat().Key(key).MillisecondsTimestamp(ms).Nx().Build()
		},
	})
	if err != nil {
		return 0, err
	}
	v, err := res[0].AsInt64()
	if err != nil {
		return 0, s.mapErr(err)
	}
	if err := res[1].Error(); err != nil {
		return v, fmt.Errorf("PEXPIREAT %q: %w", key, s.mapErr(err))
	}
	return v, nil
}

// ExpireAt gives keys the deadline at (zero: none, PERSIST) and reports,
// per key, whether it changed: the key exists (PEXPIREAT), or it had a
// deadline (PERSIST). A deadline in the past removes the key.
func (s *Store) ExpireAt(ctx context.Context, keys []string, at time.Time) ([]bool, error) {
	ms := at.UnixMilli()
	res, err := s.run(ctx, batch{
		n:   len(keys),
		key: func(i int) string { return keys[i] },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			if at.IsZero() {
				return b.Persist().Key(keys[i]).Build()
			}
			return b.Pexpireat().Key(keys[i]).MillisecondsTimestamp(ms).Build()
		},
	})
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for i, r := range res {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("expire %q: %w", keys[i], s.mapErr(err))
		}
		out[i] = n == 1
	}
	return out, nil
}

// Deadlines reports, for each key, whether it exists and its deadline
// (PEXPIRETIME).
func (s *Store) Deadlines(ctx context.Context, keys []string) ([]store.Deadline, error) {
	res, err := s.run(ctx, batch{
		n:   len(keys),
		key: func(i int) string { return keys[i] },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			return b.Pexpiretime().Key(keys[i]).Build()
		},
		readonly: true,
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Deadline, len(keys))
	for i, r := range res {
		ms, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("PEXPIRETIME %q: %w", keys[i], s.mapErr(err))
		}
		switch {
		case ms == -2: // missing
		case ms == -1:
			out[i] = store.Deadline{Exists: true}
		default:
			out[i] = store.Deadline{Exists: true, At: time.UnixMilli(ms)}
		}
	}
	return out, nil
}
