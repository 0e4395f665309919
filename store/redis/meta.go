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

// Counter metadata and folds (the Backend of package meta). Every script
// touches the keys of one hash tag only, so it runs in one slot, and does
// no arithmetic in Lua: values travel as the decimal strings Redis stores.

// FoldMarkerTTL is how long fold markers are kept: far longer than any
// fold can stay interrupted before it is resumed.
const FoldMarkerTTL = 7 * 24 * time.Hour

// casMetaScript sets KEYS[1] to ARGV[2] (deletes it when ARGV[2] is empty)
// if the record's leading `{"epoch":N` has N equal to ARGV[1] ("0": no
// record); a record with a "deadline" (Unix ms, within a double's exact
// range) expires ARGV[3] ms after it. Returns 1 if set.
const casMetaScript = `
local cur = redis.call('GET', KEYS[1])
local e = '0'
if cur then
  e = string.match(cur, '^{"epoch":(%d+)') or ''
end
if e ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return 1
end
local d = string.match(ARGV[2], '"deadline":(%d+)')
if d then
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', string.format('%.0f', tonumber(d) + tonumber(ARGV[3])))
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
`

// foldOutScript: KEYS = {sub-counter, marker}, ARGV = {marker ttl ms}. If
// the marker exists it returns its value; otherwise it moves the value of
// the sub-counter into the marker and returns it.
const foldOutScript = `
local m = redis.call('GET', KEYS[2])
if m then
  return m
end
local v = redis.call('GET', KEYS[1])
if not v then
  v = '0'
end
if v ~= '0' then
  local r = redis.pcall('DECRBY', KEYS[1], v)
  if type(r) == 'table' and r.err then
    return r
  end
end
redis.call('SET', KEYS[2], v, 'PX', ARGV[1])
return v
`

// foldInScript: KEYS = {sub-counter, marker}, ARGV = {delta, marker ttl
// ms, deadline ms or ""}. Unless the marker exists, INCRBY the sub-counter,
// give it the deadline unless it has one (PEXPIREAT … NX), and set the
// marker. Returns 1 when applied, 0 when the marker was there.
const foldInScript = `
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if ARGV[1] ~= '0' then
  local r = redis.pcall('INCRBY', KEYS[1], ARGV[1])
  if type(r) == 'table' and r.err then
    return r
  end
  if ARGV[3] and ARGV[3] ~= '' then
    redis.call('PEXPIREAT', KEYS[1], ARGV[3], 'NX')
  end
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
`

type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	casMeta = newScript(casMetaScript)
	foldOut = newScript(foldOutScript)
	foldIn  = newScript(foldInScript)
)

// eval runs sc over keys (one slot) with args: EVALSHA, or EVAL when
// resent after NOSCRIPT or a redirect.
func (s *Store) eval(ctx context.Context, sc script, keys []string, args ...string) (rueidis.RedisResult, error) {
	res, err := s.run(ctx, batch{
		n:   1,
		key: func(int) string { return keys[0] },
		build: func(b rueidis.Builder, _ int, resend bool) rueidis.Completed {
			if resend {
				return b.Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
			}
			return b.Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		},
	})
	if err != nil {
		return rueidis.RedisResult{}, err
	}
	return res[0], nil
}

var markerTTL = strconv.FormatInt(FoldMarkerTTL.Milliseconds(), 10)

// recordGrace is how long after its deadline a record is kept: twice
// store.DeadlineGrace, in ms.
var recordGrace = strconv.FormatInt((2 * store.DeadlineGrace).Milliseconds(), 10)

// GetMeta returns the metadata record of counter key (GET of
// keyspace.MetaKey(key)).
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, bool, error) {
	mk := keyspace.MetaKey(key)
	res, err := s.run(ctx, batch{
		n:        1,
		key:      func(int) string { return mk },
		build:    func(b rueidis.Builder, _ int, _ bool) rueidis.Completed { return b.Get().Key(mk).Build() },
		readonly: true,
	})
	if err != nil {
		return nil, false, err
	}
	data, err := res[0].AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("GET %q: %w", mk, s.mapErr(err))
	}
	return data, true, nil
}

// GetMetas returns the metadata records of counters keys (nil: none), one
// pipelined round per node.
func (s *Store) GetMetas(ctx context.Context, keys []string) ([][]byte, error) {
	mks := make([]string, len(keys))
	for i, k := range keys {
		mks[i] = keyspace.MetaKey(k)
	}
	res, err := s.run(ctx, batch{
		n:        len(mks),
		key:      func(i int) string { return mks[i] },
		build:    func(b rueidis.Builder, i int, _ bool) rueidis.Completed { return b.Get().Key(mks[i]).Build() },
		readonly: true,
	})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, r := range res {
		data, err := r.AsBytes()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("GET %q: %w", mks[i], s.mapErr(err))
		}
		out[i] = data
	}
	return out, nil
}

// CASMeta stores data as key's record if the stored record's "epoch"
// member equals epoch (0: there is no record), in one script.
func (s *Store) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	mk := keyspace.MetaKey(key)
	r, err := s.eval(ctx, casMeta, []string{mk}, strconv.FormatUint(epoch, 10), string(data), recordGrace)
	if err != nil {
		return false, err
	}
	n, err := r.AsInt64()
	if err != nil {
		return false, fmt.Errorf("CAS %q: %w", mk, s.mapErr(err))
	}
	return n == 1, nil
}

// FoldOut moves the value of key's sub-counter label into the marker
// keyspace.AuxKey(key, label, "fold", foldID), once: a replay returns the
// marker's value and changes nothing.
func (s *Store) FoldOut(ctx context.Context, key, label, foldID string) (int64, error) {
	sub := keyspace.SubKey(key, label)
	r, err := s.eval(ctx, foldOut, []string{sub, keyspace.AuxKey(key, label, "fold", foldID)}, markerTTL)
	if err != nil {
		return 0, err
	}
	str, err := r.ToString()
	if err != nil {
		return 0, fmt.Errorf("fold out of %q: %w", sub, s.mapErr(err))
	}
	v, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fold out of %q: %w (%q)", sub, store.ErrNotInteger, str)
	}
	return v, nil
}

// FoldIn adds delta to key's sub-counter label unless the marker
// keyspace.AuxKey(key, label, "foldin", foldID) exists, then sets the
// marker. It reports whether delta was added. expireAt, when not zero, is
// given to the sub-counter as its deadline if it has none.
func (s *Store) FoldIn(ctx context.Context, key, label, foldID string, delta int64, expireAt time.Time) (bool, error) {
	sub := keyspace.SubKey(key, label)
	at := ""
	if !expireAt.IsZero() {
		at = strconv.FormatInt(expireAt.UnixMilli(), 10)
	}
	r, err := s.eval(ctx, foldIn, []string{sub, keyspace.AuxKey(key, label, "foldin", foldID)}, strconv.FormatInt(delta, 10), markerTTL, at)
	if err != nil {
		return false, err
	}
	n, err := r.AsInt64()
	if err != nil {
		return false, fmt.Errorf("fold into %q: %w", sub, s.mapErr(err))
	}
	return n == 1, nil
}
