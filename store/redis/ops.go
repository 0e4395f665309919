package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// incrOnceScript applies KEYS[1] += ARGV[1] unless token KEYS[2] exists,
// then sets the token with a TTL of ARGV[2] ms and, when ARGV[3] is not
// empty, gives KEYS[1] the deadline ARGV[3] (Unix ms) if it has none. It returns nil when the token
// was used, the INCRBY error (with the token untouched) when INCRBY fails,
// an overflow error (with the increment taken back and the token
// untouched) when the new value passes ±store.MaxValue, and otherwise the
// new value as the string Redis stores: a Lua number is a double and cannot
// carry every int64, so no arithmetic happens in Lua. The bound check
// compares a double with 2^53 − 1, which a double holds exactly, and every
// integer beyond it rounds to 2^53 or more: the comparison is exact.
const incrOnceScript = `
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local r = redis.pcall('INCRBY', KEYS[1], ARGV[1])
if type(r) == 'table' and r.err then
  return r
end
if r > 9007199254740991 or r < -9007199254740991 then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  return redis.error_reply('ERR increment would overflow the sub-counter bound 2^53-1')
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
if ARGV[3] and ARGV[3] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[3], 'NX')
end
return redis.call('GET', KEYS[1])
`

var incrOnceSHA = func() string {
	sum := sha1.Sum([]byte(incrOnceScript))
	return hex.EncodeToString(sum[:])
}()

// incrSeqScript applies KEYS[1] += ARGV[1] unless the hash KEYS[2] records,
// for writer ARGV[4], a sequence number at or above ARGV[5]; then it
// records "ARGV[5]:ARGV[6]" (sequence, the writer's clock in Unix ms) for
// the writer, keeps the hash for ARGV[2] ms, and, when ARGV[3] is not
// empty, gives KEYS[1] the deadline ARGV[3] if it has none. Its replies
// are incrOnceScript's. A hash with more than 64 writers drops those not
// heard from for ARGV[2] ms (processes that ended), so it holds about one
// field per live writer. Sequence numbers stay far below 2^53, so Lua's
// doubles compare them exactly.
const incrSeqScript = `
local last = redis.call('HGET', KEYS[2], ARGV[4])
if last and tonumber(string.match(last, '^%d+')) >= tonumber(ARGV[5]) then
  return false
end
local r = redis.pcall('INCRBY', KEYS[1], ARGV[1])
if type(r) == 'table' and r.err then
  return r
end
if r > 9007199254740991 or r < -9007199254740991 then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  return redis.error_reply('ERR increment would overflow the sub-counter bound 2^53-1')
end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5] .. ':' .. ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('HLEN', KEYS[2]) > 64 then
  local all = redis.call('HGETALL', KEYS[2])
  local old = tonumber(ARGV[6]) - tonumber(ARGV[2])
  for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], ':(%d+)$'))
    if at and at < old then
      redis.call('HDEL', KEYS[2], all[i])
    end
  end
end
if ARGV[3] and ARGV[3] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[3], 'NX')
end
return redis.call('GET', KEYS[1])
`

var incrSeqSHA = func() string {
	sum := sha1.Sum([]byte(incrSeqScript))
	return hex.EncodeToString(sum[:])
}()

// Get reads keys, one pipelined round of GETs per node; a missing key reads
// 0. A value that is not a decimal int64 fails the call with
// store.ErrNotInteger.
func (s *Store) Get(ctx context.Context, keys []string) ([]int64, error) {
	res, err := s.run(ctx, batch{
		n:   len(keys),
		key: func(i int) string { return keys[i] },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			return b.Get().Key(keys[i]).Build()
		},
		readonly: true,
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	for i, r := range res {
		if err := r.Error(); err != nil {
			if rueidis.IsRedisNil(err) {
				continue
			}
			return nil, fmt.Errorf("GET %q: %w", keys[i], s.mapErr(err))
		}
		v, err := r.ToString()
		if err != nil {
			return nil, fmt.Errorf("GET %q: %w", keys[i], store.ErrNotInteger)
		}
		if out[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, fmt.Errorf("GET %q: %w", keys[i], store.ErrNotInteger)
		}
	}
	return out, nil
}

// Del deletes keys with one DEL per key, pipelined per node.
func (s *Store) Del(ctx context.Context, keys []string) error {
	res, err := s.run(ctx, batch{
		n:   len(keys),
		key: func(i int) string { return keys[i] },
		build: func(b rueidis.Builder, i int, _ bool) rueidis.Completed {
			return b.Del().Key(keys[i]).Build()
		},
		readonly: false,
	})
	if err != nil {
		return err
	}
	for i, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("DEL %q: %w", keys[i], s.mapErr(err))
		}
	}
	return nil
}

// IncrBy adds delta to key with INCRBY and returns the new value. On
// overflow it returns store.ErrOverflow and the value is unchanged.
//
// This is the hot path of an unbuffered increment, so it skips the batch
// machinery: one slot lookup in the current map, one INCRBY built with
// rueidis' pooled command builder on the owner's connection (pipelined
// with every other caller's commands). When ctx cannot be cancelled, the
// store's watchdog bounds the round (see the package documentation), and
// a round it ends returns store.ErrUnavailable wrapping
// context.DeadlineExceeded. An increment of 1 (any delta of magnitude
// below 100) costs no allocation.
func (s *Store) IncrBy(ctx context.Context, key string, delta int64) (int64, error) {
	return s.IncrBySlot(ctx, key, keyspace.Slot(key), delta)
}

// IncrBySlot is IncrBy for a key whose slot, keyspace.Slot(key), the
// caller has at hand (it keeps the slots of a counter's sub-keys), so that
// the key is not hashed again.
func (s *Store) IncrBySlot(ctx context.Context, key string, slot uint16, delta int64) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	st := s.state.Load()
	n := st.topo.Owner[slot]
	c, nc := st.clients[n], st.counters[n]
	var r rueidis.RedisResult
	if c != nil && ctx.Done() == nil {
		// Nothing can cancel ctx: the watchdog bounds the round, so
		// that rueidis waits on the reply alone.
		f, cut := s.watch.begin(nc)
		r = c.Do(ctx, c.B().Incrby().Key(key).Increment(delta).Build())
		f.done.Add(1)
		if err := r.Error(); err != nil && nc.cuts.Load() != cut && !isReply(err) {
			return 0, fmt.Errorf("%w: %w: INCRBY %q: no reply from %s within %v: %w", store.ErrUnavailable, store.ErrNoReply, key, st.topo.Nodes[n], s.cfg.Timeout, context.DeadlineExceeded)
		}
	} else {
		if c == nil {
			c = s.client
		}
		rctx, cancel := s.roundCtx(ctx)
		nc.count(1, false)
		r = c.Do(rctx, c.B().Incrby().Key(key).Increment(delta).Build())
		if cancel != nil {
			cancel()
		}
	}
	if r.Error() != nil {
		r = s.resendOne(ctx, key, r, false, func(b rueidis.Builder) rueidis.Completed {
			return b.Incrby().Key(key).Increment(delta).Build()
		})
	}
	v, err := r.AsInt64()
	if err != nil {
		return 0, s.mapErr(err)
	}
	return v, nil
}

// resendOne is run's resend step for one command on key that was answered
// r: after MOVED or ASK it refreshes the map and resends through the
// cluster client, which follows redirects; after TRYAGAIN, NOSCRIPT or
// (readonly) a closed connection it resends; after a connection error it
// asks for a background refresh. It returns the final result.
func (s *Store) resendOne(ctx context.Context, key string, r rueidis.RedisResult, readonly bool, build func(rueidis.Builder) rueidis.Completed) rueidis.RedisResult {
	seen := s.refreshStarted.Load()
	switch s.classify(r.Error(), readonly) {
	case actMoved:
		if !s.closed.Load() {
			_ = s.refresh(ctx, seen, true) // on failure the cluster client still follows the redirect
		}
	case actResend:
	case actResendConn:
		s.kickRefresh()
	case actConnErr:
		s.kickRefresh()
		return r
	default:
		return r
	}
	if s.closed.Load() {
		return r
	}
	st := s.state.Load()
	rctx, cancel := s.roundCtx(ctx)
	if cancel != nil {
		defer cancel()
	}
	st.counters[st.topo.Owner[keyspace.Slot(key)]].count(1, true)
	return s.client.Do(rctx, build(s.client.B()))
}

// IncrMulti applies ops, one pipelined round per node. Ops without a
// TokenKey are plain INCRBYs; ops with one run the token script (see the
// package documentation). Errors are per op; err is set only when the store
// is closed.
func (s *Store) IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	out := make([]store.IncrResult, len(ops))
	valid := make([]int, 0, len(ops)) // indexes into ops of the ops to send
	ttls := make([]string, len(ops))
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i, op := range ops {
		if op.TokenKey == "" && op.SeqKey == "" {
			valid = append(valid, i)
			continue
		}
		switch {
		case op.TTL < 0:
			out[i].Err = fmt.Errorf("%w: negative TTL %v for %q", ErrInvalidOp, op.TTL, op.Key)
			continue
		case op.TokenKey != "" && keyspace.Slot(op.TokenKey) != keyspace.Slot(op.Key):
			out[i].Err = fmt.Errorf("%w: token %q is not in the slot of %q", ErrInvalidOp, op.TokenKey, op.Key)
			continue
		case op.TokenKey == "" && keyspace.Slot(op.SeqKey) != keyspace.Slot(op.Key):
			out[i].Err = fmt.Errorf("%w: sequence hash %q is not in the slot of %q", ErrInvalidOp, op.SeqKey, op.Key)
			continue
		case op.TokenKey == "" && (op.Writer == "" || op.Seq == 0):
			out[i].Err = fmt.Errorf("%w: a sequenced op on %q needs a writer and a sequence number above 0", ErrInvalidOp, op.Key)
			continue
		}
		ttl := op.TTL
		if ttl == 0 {
			ttl = store.DefaultTokenTTL
		}
		ttls[i] = strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
		valid = append(valid, i)
	}
	res, err := s.run(ctx, batch{
		n:   len(valid),
		key: func(j int) string { return ops[valid[j]].Key },
		build: func(b rueidis.Builder, j int, resend bool) rueidis.Completed {
			op := &ops[valid[j]]
			if op.TokenKey == "" && op.SeqKey == "" {
				return b.Incrby().Key(op.Key).Increment(op.Delta).Build()
			}
			delta, ttl := strconv.FormatInt(op.Delta, 10), ttls[valid[j]]
			var at string
			if !op.ExpireAt.IsZero() {
				at = strconv.FormatInt(op.ExpireAt.UnixMilli(), 10)
			}
			if op.TokenKey == "" {
				seq := strconv.FormatUint(op.Seq, 10)
				if resend {
					return b.Eval().Script(incrSeqScript).Numkeys(2).Key(op.Key, op.SeqKey).Arg(delta, ttl, at, op.Writer, seq, now).Build()
				}
				return b.Evalsha().Sha1(incrSeqSHA).Numkeys(2).Key(op.Key, op.SeqKey).Arg(delta, ttl, at, op.Writer, seq, now).Build()
			}
			if resend {
				return b.Eval().Script(incrOnceScript).Numkeys(2).Key(op.Key, op.TokenKey).Arg(delta, ttl, at).Build()
			}
			return b.Evalsha().Sha1(incrOnceSHA).Numkeys(2).Key(op.Key, op.TokenKey).Arg(delta, ttl, at).Build()
		},
	})
	if err != nil {
		return nil, err
	}
	for j, r := range res {
		i := valid[j]
		out[i] = s.incrResult(ops[i].TokenKey != "" || ops[i].SeqKey != "", r)
	}
	return out, nil
}

func (s *Store) incrResult(script bool, r rueidis.RedisResult) store.IncrResult {
	err := r.Error()
	switch {
	case script && rueidis.IsRedisNil(err):
		return store.IncrResult{} // the token was used: applied earlier
	case err != nil:
		return store.IncrResult{Err: s.mapErr(err)}
	case script:
		str, err := r.ToString()
		if err != nil {
			return store.IncrResult{Err: s.mapErr(err)}
		}
		v, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return store.IncrResult{Err: fmt.Errorf("%w (script returned %q)", store.ErrNotInteger, str)}
		}
		return store.IncrResult{Applied: true, Value: v}
	default:
		v, err := r.AsInt64()
		if err != nil {
			return store.IncrResult{Err: s.mapErr(err)}
		}
		return store.IncrResult{Applied: true, Value: v}
	}
}

// isReply reports whether err is an error reply of the server (the
// command ran, or was refused, there), not a failure to get a reply.
func isReply(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
