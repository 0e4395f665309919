package proxy

import (
	"context"
	"strings"
)

// CounterClearer is what FLUSHALL asks of Counters when the Counters
// implements it (*hotcount.Client does): clear every counter the durable
// store knows of, so that no checkpoint restore or rebuild brings a
// flushed counter back.
type CounterClearer interface {
	ClearAll(ctx context.Context) (int, error)
}

// flushScript empties one primary but for hotcount's own state (the
// sentinels and store marks "hotcount:...", the Client's "{hotcount:...}"
// keys), which it puts back as they were, in one atomic step: a
// checkpoint round never finds a node without its sentinel, which would
// make it restore every counter.
const flushScript = `local keep = {}
for _, pat in ipairs({'hotcount:*', '{hotcount:*'}) do
  for _, k in ipairs(redis.call('KEYS', pat)) do
    keep[#keep + 1] = {k, redis.call('DUMP', k), redis.call('PTTL', k)}
  end
end
redis.call('FLUSHALL')
for _, e in ipairs(keep) do
  local ttl = e[3]
  if ttl < 0 then ttl = 0 end
  redis.call('RESTORE', e[1], ttl, e[2], 'REPLACE')
end
return #keep`

// flushAll: FLUSHALL and FLUSHDB [ASYNC|SYNC]. Refused unless
// Config.AllowFlush: one client would delete every counter of every
// process that shares the cluster. Allowed, it first clears every counter
// of the durable store (CounterClearer, after this proxy's buffered
// deltas are sent), then empties every primary but for hotcount's own
// state (flushScript; SYNC, whatever was asked), then drops the proxy's
// counter estimates. Increments that other processes buffered before the
// flush still land after it.
func (c *conn) flushAll(args [][]byte) {
	var nb [32]byte
	name := strings.ToUpper(string(lower(nb[:0], args[0])))
	if !c.s.cfg.AllowFlush {
		c.s.stats.refused.Add(1)
		c.out = appendErr(c.out, "ERR "+name+" is refused by the hotcount proxy: it would delete every counter of every process sharing the cluster; set resp_allow_flush: true to allow it")
		return
	}
	if len(args) > 2 {
		c.out = appendErr(c.out, "ERR syntax error")
		return
	}
	if len(args) == 2 {
		if opt := strings.ToLower(string(args[1])); opt != "async" && opt != "sync" {
			c.out = appendErr(c.out, "ERR syntax error")
			return
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, 4*c.s.cfg.Timeout)
	defer cancel()
	if cc, ok := c.s.counters.(CounterClearer); ok {
		if _, err := cc.ClearAll(ctx); err != nil {
			c.s.stats.upstreamErrors.Add(1)
			c.out = appendErr(c.out, "ERR hotcount proxy: "+name+": clearing the counters: "+err.Error())
			return
		}
	}
	res, err := c.allPrimaries(ctx, []string{"EVAL", flushScript, "0"})
	if err != nil {
		c.out = appendErr(c.out, upstreamError(err))
		return
	}
	for i := range res {
		if e := resultError(&res[i]); e != "" {
			c.out = appendErr(c.out, e)
			return
		}
	}
	c.s.est.clearAll()
	c.out = appendOK(c.out)
}

// clearAll drops every estimate.
func (e *estimates) clearAll() {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}
