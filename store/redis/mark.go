package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Record marks (keyspace.MarkKey): a plain string key in the slot of the
// counter's cold sub-counter, so that the INCRBY of that sub-counter and
// the EXISTS of the mark go to one node in one pipelined write.

// delMarkScript deletes KEYS[1] if it holds ARGV[1]. Returns 1 if deleted.
const delMarkScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`

var delMark = newScript(delMarkScript)

// SetMarks writes the record marks of counters (SET, with PXAT when a
// mark expires, and NX with onlyNew), one pipelined round per node, and
// reports which it wrote (with onlyNew, those that did not exist).
func (s *Store) SetMarks(ctx context.Context, marks []store.Mark, onlyNew bool) ([]bool, error) {
	if len(marks) == 0 {
		return nil, nil
	}
	keys := make([]string, len(marks))
	for i, m := range marks {
		keys[i] = keyspace.MarkKey(m.Key)
	}
	res, err := s.run(ctx, batch{
		n:   len(marks),
		key: func(i int) string { return keys[i] },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			v := strconv.FormatInt(marks[i].Value, 10)
			switch at := marks[i].ExpireAt; {
			case at.IsZero() && onlyNew:
				return b.Set().Key(keys[i]).Value(v).Nx().Build()
			case at.IsZero():
				return b.Set().Key(keys[i]).Value(v).Build()
			case onlyNew:
				return b.Set().Key(keys[i]).Value(v).Nx().Pxat(at).Build()
			default:
				return b.Set().Key(keys[i]).Value(v).Pxat(at).Build()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	written := make([]bool, len(res))
	for i, r := range res {
		switch err := r.Error(); {
		case err == nil:
			written[i] = true
		case !rueidis.IsRedisNil(err): // NX that found the mark: nil
			return nil, fmt.Errorf("SET %q: %w", keys[i], s.mapErr(err))
		}
	}
	return written, nil
}

// DelMark deletes the record mark of counter key if it holds v, in one
// script.
func (s *Store) DelMark(ctx context.Context, key string, v int64) error {
	mk := keyspace.MarkKey(key)
	r, err := s.eval(ctx, delMark, []string{mk}, strconv.FormatInt(v, 10))
	if err != nil {
		return err
	}
	if err := r.Error(); err != nil {
		return fmt.Errorf("delete mark %q: %w", mk, s.mapErr(err))
	}
	return nil
}

// IncrByMarked adds delta to the sub-counter sub and reports whether the
// record mark mark, which must be in sub's slot, existed just before:
// EXISTS, then INCRBY (and PEXPIREAT … NX when at is not zero), pipelined
// in one round trip to one node. An error of the EXISTS alone reports
// marked true: the caller then looks the record up, as without a mark.
// An empty mark is not checked: INCRBY alone, and marked false.
//
// With Config.BatchWindow set, concurrent calls are sent together (see
// coalescer); without it, a call with neither mark nor deadline is
// IncrBy.
func (s *Store) IncrByMarked(ctx context.Context, sub, mark string, delta int64, at time.Time) (v int64, marked bool, err error) {
	if s.closed.Load() {
		return 0, false, store.ErrClosed
	}
	call := &markedCall{sub: sub, mark: mark, delta: delta, at: at}
	if s.marked != nil {
		return s.marked.do(ctx, call)
	}
	if mark == "" && at.IsZero() {
		v, err := s.IncrBy(ctx, sub, delta)
		return v, false, err
	}
	res, err := s.run(ctx, batch{
		n:     call.commands(),
		key:   func(int) string { return sub },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed { return call.build(b, i) },
	})
	if err != nil {
		return 0, false, err
	}
	return s.markedResult(sub, mark != "", res)
}

// markedResult reads IncrByMarked's replies: EXISTS (when checked),
// INCRBY and PEXPIREAT (when sent).
func (s *Store) markedResult(sub string, checked bool, res []rueidis.RedisResult) (v int64, marked bool, err error) {
	if checked {
		e, err := res[0].AsInt64()
		marked = err != nil || e != 0
		res = res[1:]
	}
	if v, err = res[0].AsInt64(); err != nil {
		return 0, false, s.mapErr(err)
	}
	if len(res) == 2 {
		if err := res[1].Error(); err != nil {
			return v, marked, fmt.Errorf("PEXPIREAT %q: %w", sub, s.mapErr(err))
		}
	}
	return v, marked, nil
}
