package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/redis/rueidis"
)

// Counter keys: the keys a counter namespace matches. They are served by
// Counters, never passed through.

// counterCommand runs a command that names at least one counter key
// (counter[i] says which of keys are).
func (c *conn) counterCommand(name string, ci *cmdInfo, args [][]byte, strs []string, keys []int, counter []bool) {
	first := ""
	for i, k := range keys {
		if counter[i] {
			first = strs[k]
			break
		}
	}
	switch name {
	case "incr", "decr":
		delta := int64(1)
		if name == "decr" {
			delta = -1
		}
		c.counterIncr(first, delta)
	case "incrby", "decrby":
		delta, ok := string2ll([]byte(strs[2]))
		if !ok {
			c.out = appendErr(c.out, "ERR value is not an integer or out of range")
			return
		}
		if name == "decrby" {
			if delta == math.MinInt64 {
				c.out = appendErr(c.out, "ERR decrement would overflow")
				return
			}
			delta = -delta
		}
		c.counterIncr(first, delta)
	case "get":
		c.counterGet(first)
	case "type":
		ctx, cancel := c.timeout()
		defer cancel()
		_, exists, err := c.counterValue(ctx, first)
		switch {
		case err != nil:
			c.out = appendErr(c.out, counterError(err))
		case exists:
			c.out = appendStatus(c.out, "string")
		default:
			c.out = appendStatus(c.out, "none")
		}
	case "set":
		c.counterSet(first, strs)
	case "mget":
		c.mget(strs[1:], counter)
	case "del", "unlink", "exists":
		c.countKeys(name, strs[1:], counter)
	case "expire", "pexpire", "expireat", "pexpireat":
		c.counterExpire(name, first, strs)
	case "ttl", "pttl", "expiretime", "pexpiretime":
		c.counterTTL(name, first)
	case "persist":
		ctx, cancel := c.timeout()
		defer cancel()
		had, err := c.s.counters.Persist(ctx, first)
		if err != nil {
			c.out = appendErr(c.out, counterError(err))
			return
		}
		c.out = appendInt(c.out, boolInt(had))
	default:
		c.out = appendErr(c.out, notForCounters(name, first))
	}
}

func (c *conn) timeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.s.cfg.Timeout)
}

// counterError is the reply for an error of the Client.
func counterError(err error) string {
	switch {
	case errors.Is(err, hotcount.ErrOverflow):
		return "ERR increment or decrement would overflow"
	case errors.Is(err, hotcount.ErrInvalidKey):
		return "ERR invalid counter key: " + err.Error()
	case errors.Is(err, hotcount.ErrBackpressure):
		return "ERR hotcount: increments are held back because the cluster is not taking them; retry later"
	case errors.Is(err, hotcount.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return "ERR hotcount: cluster unavailable: " + err.Error()
	case errors.Is(err, hotcount.ErrClosed), errors.Is(err, context.Canceled):
		return "ERR hotcount proxy: shutting down"
	}
	return "ERR hotcount: " + err.Error()
}

// ttlOf is how long an estimate of the namespace lives: its read-cache
// TTL, so that each summed read finds the Client's cache expired too.
func ttlOf(ns hotcount.Namespace) time.Duration {
	if ns.ReadCacheTTL > 0 {
		return ns.ReadCacheTTL
	}
	return DefaultEstimateTTL
}

// counterIncr adds delta to a counter and answers its value: the estimate,
// or a fresh summed read for a namespace with ReplyExact. INCRBY by 0
// answers the value, as in Redis.
func (c *conn) counterIncr(key string, delta int64) {
	ns, _ := c.s.counters.Namespace(key)
	ctx, cancel := c.timeout()
	defer cancel()
	if delta == 0 {
		v, _, err := c.counterValue(ctx, key)
		if err != nil {
			c.out = appendErr(c.out, counterError(err))
			return
		}
		c.out = appendInt(c.out, v)
		return
	}
	cv, known, err := c.s.counters.IncrValue(ctx, key, delta)
	if err != nil {
		c.out = appendErr(c.out, counterError(err))
		return
	}
	c.s.stats.counterIncrs.Add(1)
	if known {
		// A cold counter, written with one INCRBY: its reply is the
		// counter's value, exact, and no read is needed. An estimate of
		// it counts the increment (dropping it could lose what other
		// connections counted in it while a read was in flight).
		c.s.est.count(key, delta)
		c.out = appendInt(c.out, cv)
		return
	}
	now := c.s.cfg.Clock.Now()
	// With ReplyExact the estimate still counts this proxy's increments
	// (it is the answer when the read fails), but every reply is a read.
	exact := c.replyOf(ns) == ReplyExact
	v, ok, a0 := c.s.est.added(key, delta, now, ttlOf(ns), exact)
	if !ok {
		c.s.stats.counterReads.Add(1)
		get := c.s.counters.Get
		if exact {
			get = c.s.counters.GetFresh
		}
		r, err := get(ctx, key)
		switch {
		case err != nil:
			// The increment is applied: answer what is known rather than
			// an error that a client would retry, counting it twice.
			c.s.cfg.Logger.Warn("summed read after INCR failed; answering the last estimate", "key", key, "err", err)
			v = c.s.est.failed(key)
		case exact:
			c.s.est.read(key, r, true, a0, c.s.cfg.Clock.Now())
			v = r.Value
		default:
			v, _ = c.s.est.read(key, r, true, a0, c.s.cfg.Clock.Now())
		}
	} else {
		c.s.stats.estimateReads.Add(1)
	}
	c.out = appendInt(c.out, v)
}

// counterValue returns a counter's value and whether it holds state: the
// estimate while fresh, else a summed read (always, for ReplyExact).
func (c *conn) counterValue(ctx context.Context, key string) (int64, bool, error) {
	ns, _ := c.s.counters.Namespace(key)
	if c.replyOf(ns) != ReplyExact {
		now := c.s.cfg.Clock.Now()
		if v, exists, ok, _ := c.s.est.cached(key, now, ttlOf(ns)); ok {
			c.s.stats.estimateReads.Add(1)
			return v, exists, nil
		}
	}
	vals, err := c.counterValues(ctx, []string{key})
	if err != nil {
		return 0, false, err
	}
	return vals[0].v, vals[0].exists, nil
}

type counterVal struct {
	v      int64
	exists bool
}

// counterValues returns the values of counters: estimates where fresh,
// and one GetMulti for the rest (one round per node).
func (c *conn) counterValues(ctx context.Context, keys []string) ([]counterVal, error) {
	out := make([]counterVal, len(keys))
	var missing, fresh []string
	idx := map[string][]int{}
	a0s := map[string]int64{}
	now := c.s.cfg.Clock.Now()
	for i, k := range keys {
		ns, _ := c.s.counters.Namespace(k)
		exact := c.replyOf(ns) == ReplyExact
		if !exact {
			if v, exists, ok, a0 := c.s.est.cached(k, now, ttlOf(ns)); ok {
				c.s.stats.estimateReads.Add(1)
				out[i] = counterVal{v, exists}
				continue
			} else if _, seen := idx[k]; !seen {
				a0s[k] = a0
			}
		}
		if _, seen := idx[k]; !seen {
			if exact {
				fresh = append(fresh, k)
			} else {
				missing = append(missing, k)
			}
		}
		idx[k] = append(idx[k], i)
	}
	if len(missing)+len(fresh) == 0 {
		return out, nil
	}
	c.s.stats.counterReads.Add(int64(len(missing) + len(fresh)))
	got := map[string]hotcount.Reading{}
	if len(missing) > 0 {
		var err error
		if got, err = c.s.counters.GetMulti(ctx, missing); err != nil {
			return nil, err
		}
	}
	// Exact namespaces read past the Client's summed-read cache: one
	// fresh read (one round per node) per counter.
	for _, k := range fresh {
		r, err := c.s.counters.GetFresh(ctx, k)
		if err != nil {
			return nil, err
		}
		got[k] = r
	}
	now = c.s.cfg.Clock.Now()
	for _, k := range append(missing, fresh...) {
		r := got[k]
		// A non-zero sum proves the counter exists; a zero one may be a
		// counter brought back to 0, which exists, or none.
		existed := r.Value != 0
		if !existed {
			n, err := c.s.counters.Exists(ctx, k)
			if err != nil {
				return nil, err
			}
			existed = n > 0
		}
		val := counterVal{r.Value, existed}
		if a0, ok := a0s[k]; ok {
			val.v, val.exists = c.s.est.read(k, r, existed, a0, now)
		}
		for _, i := range idx[k] {
			out[i] = val
		}
	}
	return out, nil
}

func (c *conn) counterGet(key string) {
	ctx, cancel := c.timeout()
	defer cancel()
	v, exists, err := c.counterValue(ctx, key)
	switch {
	case err != nil:
		c.out = appendErr(c.out, counterError(err))
	case !exists:
		c.out = appendNull(c.out, c.proto)
	default:
		c.out = appendBulk(c.out, strconv.FormatInt(v, 10))
	}
}

// counterSet: SET key <integer> resets the counter — it is cleared, then
// the integer is added. Options (EX, NX, GET, ...) and non-integers are
// refused.
func (c *conn) counterSet(key string, strs []string) {
	if len(strs) != 3 {
		c.out = appendErr(c.out, fmt.Sprintf("ERR counter key '%.200s' takes SET key <integer> without options", key))
		return
	}
	v, ok := string2ll([]byte(strs[2]))
	if !ok {
		c.out = appendErr(c.out, fmt.Sprintf("ERR counter key '%.200s' holds an integer: SET takes an integer", key))
		return
	}
	if v > hotcount.MaxDelta || v < -hotcount.MaxDelta {
		// Refused before the clear: a value no sub-counter can hold must
		// not cost the counter the value it has.
		c.out = appendErr(c.out, fmt.Sprintf("ERR counter key '%.200s' holds at most ±%d: SET takes an integer within it", key, int64(hotcount.MaxDelta)))
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	c.s.est.drop(key)
	if err := c.s.counters.Clear(ctx, key); err != nil {
		c.out = appendErr(c.out, counterError(err))
		return
	}
	c.s.stats.counterClears.Add(1)
	if v != 0 {
		if err := c.s.counters.Incr(ctx, key, v); err != nil {
			c.out = appendErr(c.out, counterError(err))
			return
		}
	}
	c.s.est.drop(key)
	c.out = appendOK(c.out)
}

// mget answers MGET over counter and plain keys (counter[i] marks the
// counters; nil: none), plain keys split by slot.
func (c *conn) mget(keys []string, counter []bool) {
	ctx, cancel := c.timeout()
	defer cancel()
	var ckeys, pkeys []string
	for i, k := range keys {
		if counter != nil && counter[i] {
			ckeys = append(ckeys, k)
		} else {
			pkeys = append(pkeys, k)
		}
	}
	var cvals []counterVal
	if len(ckeys) > 0 {
		var err error
		if cvals, err = c.counterValues(ctx, ckeys); err != nil {
			c.out = appendErr(c.out, counterError(err))
			return
		}
	}
	var pvals []rueidis.RedisMessage
	if len(pkeys) > 0 {
		var errReply string
		if pvals, errReply = c.splitMGet(ctx, pkeys); errReply != "" {
			c.out = appendErr(c.out, errReply)
			return
		}
	}
	c.out = appendArray(c.out, len(keys))
	for i := range keys {
		if counter != nil && counter[i] {
			v := cvals[0]
			cvals = cvals[1:]
			if v.exists {
				c.out = appendBulk(c.out, strconv.FormatInt(v.v, 10))
			} else {
				c.out = appendNull(c.out, c.proto)
			}
			continue
		}
		m := &pvals[0]
		pvals = pvals[1:]
		out, err := appendMessage(c.out, m, c.proto, nil, &c.scratch)
		if err != nil {
			out = appendNull(c.out, c.proto)
		}
		c.out = out
	}
}

// countKeys answers DEL, UNLINK and EXISTS over counter and plain keys:
// the number of keys that existed (for DEL and UNLINK, and were removed).
func (c *conn) countKeys(name string, keys []string, counter []bool) {
	ctx, cancel := c.timeout()
	defer cancel()
	var ckeys, pkeys []string
	for i, k := range keys {
		if counter != nil && counter[i] {
			ckeys = append(ckeys, k)
		} else {
			pkeys = append(pkeys, k)
		}
	}
	var n int64
	if len(ckeys) > 0 {
		vals, err := c.counterValues(ctx, ckeys)
		if err != nil {
			c.out = appendErr(c.out, counterError(err))
			return
		}
		cleared := map[string]bool{}
		for i, k := range ckeys {
			if name == "exists" {
				if vals[i].exists {
					n++
				}
				continue
			}
			if cleared[k] {
				continue
			}
			cleared[k] = true
			if vals[i].exists {
				n++
			}
			c.s.est.drop(k)
			if err := c.s.counters.Clear(ctx, k); err != nil {
				c.out = appendErr(c.out, counterError(err))
				return
			}
			c.s.est.drop(k)
			c.s.stats.counterClears.Add(1)
		}
	}
	if len(pkeys) > 0 {
		m, errReply := c.splitInts(ctx, name, pkeys)
		if errReply != "" {
			c.out = appendErr(c.out, errReply)
			return
		}
		n += m
	}
	c.out = appendInt(c.out, n)
}

// counterExpire: EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT on a counter key
// give the counter a deadline (without the NX, XX, GT and LT options). A
// deadline not in the future removes the counter, as Redis does.
func (c *conn) counterExpire(name, key string, strs []string) {
	if len(strs) != 3 {
		c.out = appendErr(c.out, fmt.Sprintf("ERR counter key '%.200s' takes %s key <time> without options", key, strings.ToUpper(name)))
		return
	}
	n, ok := string2ll([]byte(strs[2]))
	if !ok {
		c.out = appendErr(c.out, "ERR value is not an integer or out of range")
		return
	}
	// As Redis: a time whose conversion to milliseconds, or whose sum
	// with the current time, passes int64 is refused (it must never wrap
	// into a deadline in the past, which would clear the counter).
	if name == "expire" || name == "expireat" {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			c.out = appendErr(c.out, "ERR invalid expire time in '"+name+"' command")
			return
		}
		n *= 1000
	}
	if name == "expire" || name == "pexpire" {
		base := c.s.cfg.Clock.Now().UnixMilli()
		if n > math.MaxInt64-base {
			c.out = appendErr(c.out, "ERR invalid expire time in '"+name+"' command")
			return
		}
		n += base
	}
	const maxMs = 1 << 52 // far past any deadline, within a time.Time
	at := time.UnixMilli(clampInt(n, -maxMs, maxMs))
	ctx, cancel := c.timeout()
	defer cancel()
	c.s.est.drop(key)
	existed, err := c.s.counters.Expire(ctx, key, at)
	c.s.est.drop(key)
	if err != nil {
		c.out = appendErr(c.out, counterError(err))
		return
	}
	c.out = appendInt(c.out, boolInt(existed))
}

// counterTTL: TTL and PTTL answer the time left (-1: no deadline, -2: no
// counter); EXPIRETIME and PEXPIRETIME the deadline as a Unix time.
func (c *conn) counterTTL(name, key string) {
	ctx, cancel := c.timeout()
	defer cancel()
	at, exists, err := c.s.counters.Deadline(ctx, key)
	switch {
	case err != nil:
		c.out = appendErr(c.out, counterError(err))
		return
	case !exists:
		c.out = appendInt(c.out, -2)
		return
	case at.IsZero():
		c.out = appendInt(c.out, -1)
		return
	}
	left := max(at.Sub(c.s.cfg.Clock.Now()), 0)
	var v int64
	switch name {
	case "ttl":
		v = (left.Milliseconds() + 500) / 1000 // as Redis rounds
	case "pttl":
		v = left.Milliseconds()
	case "expiretime":
		v = at.Unix()
	case "pexpiretime":
		v = at.UnixMilli()
	}
	c.out = appendInt(c.out, v)
}

func clampInt(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
