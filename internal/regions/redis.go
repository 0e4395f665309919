package regions

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Cache keys. Every key of the package starts with "hotcount:rg:"; a key
// that scripts touch together shares one hash tag.
const (
	// Shards is the number of shards of the outboxes and inboxes, so that
	// their load spreads over the cluster's nodes.
	Shards = 16
	// leaseKey and tokenKey: the shipping lease of a region and its
	// fencing token.
	leaseKey = "hotcount:rg:lease:{hotcount-rg}"
	tokenKey = "hotcount:rg:token:{hotcount-rg}"
)

// aliveKey is set in the region's own cache by its lease holder; a holder
// that finds it missing knows the cache came back empty (or is new) and
// ships every counter of the region again.
const aliveKey = "hotcount:rg:alive:{hotcount-rg}"

// peersKey is the set of peers the region's lease holder ships to, as
// its configuration last named them: a holder whose configuration names
// a peer the set lacks (a new peer, or one removed and added again, whose
// marks the region dropped meanwhile) ships every counter of the region
// to it again.
const peersKey = "hotcount:rg:peers:{hotcount-rg}"

// Buckets is the number of bucket hashes that hold the region records of
// every counter (bucketKey): a counter costs fields in one of them, not a
// key of its own.
const Buckets = 4096

// bucketKey returns the bucket hash that holds the region records of
// counter key: its fields key + NUL + name (see vhash).
func bucketKey(key string) string { return bucketName(bucketOf(key)) }

// bucketOf returns the number of counter key's bucket.
func bucketOf(key string) uint32 { return fnv32a(key) % Buckets }

// fnv32a returns the 32-bit FNV-1a hash of s (hash/fnv's, without its
// allocations).
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// bucketName returns the key of bucket n.
func bucketName(n uint32) string {
	return "hotcount:rg:b:{hotcount-rg-b-" + strconv.Itoa(int(n)) + "}"
}

// RecordsKey returns where counter key's region records are: the bucket
// hash, and the bucket's field that lists the names of the counter's
// records (present while it has any).
func RecordsKey(key string) (bucket, index string) { return bucketKey(key), key + "\x00" }

// vhash is the Lua prelude of every script over a counter's region
// records: KEYS[1] is the counter's bucket, ARGV[1] the counter. A record
// named f is the bucket's field counter + NUL + f (counter keys hold no
// control character), and the field counter + NUL alone lists the names
// the counter has, separated by spaces (names are "e", "d", "c:" or "f:"
// and a region name), so that hget, hset, hdel and hgetall act on the
// counter's records as on a hash of its own. A script over several
// counters of one bucket (vhashMany) sets P before each.
const vhash = vhashMany + `
P = ARGV[1] .. '\0'
`

// vhashMany is vhash's functions without a counter: a script over several
// counters of the bucket KEYS[1] sets P to counter .. NUL before it acts
// on each (readManyScript, applyManyScript).
const vhashMany = `
local B = KEYS[1]
local P
local function names()
  local t = {}
  local idx = redis.call('HGET', B, P)
  if idx then
    for f in string.gmatch(idx, '[^ ]+') do t[#t+1] = f end
  end
  return t
end
local function hget(f) return redis.call('HGET', B, P .. f) end
local function hset(f, v)
  if redis.call('HSET', B, P .. f, v) == 1 then
    local idx = redis.call('HGET', B, P)
    if idx then idx = idx .. ' ' .. f else idx = f end
    redis.call('HSET', B, P, idx)
  end
end
local function hdel(f)
  if redis.call('HDEL', B, P .. f) == 1 then
    local t = {}
    for _, g in ipairs(names()) do
      if g ~= f then t[#t+1] = g end
    end
    if #t == 0 then redis.call('HDEL', B, P) else redis.call('HSET', B, P, table.concat(t, ' ')) end
  end
end
local function hgetall()
  local t = names()
  local out = {}
  if #t == 0 then return out end
  local ks = {}
  for i, f in ipairs(t) do ks[i] = P .. f end
  local vs = redis.call('HMGET', B, unpack(ks))
  for i, f in ipairs(t) do
    if vs[i] then
      out[#out+1] = f
      out[#out+1] = vs[i]
    end
  end
  return out
end
`

// readScript returns the region records of the counter ARGV[1] (see
// vhash), as HGETALL would.
var readScript = newScript(vhash + `
return hgetall()
`)

// readManyScript returns the region records of the counters ARGV (all
// of bucket KEYS[1], see vhash): one array per counter, as HGETALL would
// give it, in order. It reads the counters' name lists in one HMGET and
// their records in another.
var readManyScript = newScript(`
local B = KEYS[1]
local idx = {}
for i = 1, #ARGV do idx[i] = ARGV[i] .. '\0' end
local lists = redis.call('HMGET', B, unpack(idx))
local fs, owner, nm = {}, {}, {}
for i = 1, #ARGV do
  if lists[i] then
    for f in string.gmatch(lists[i], '[^ ]+') do
      fs[#fs+1] = idx[i] .. f
      owner[#owner+1] = i
      nm[#nm+1] = f
    end
  end
end
local out = {}
for i = 1, #ARGV do out[i] = {} end
if #fs > 0 then
  local vs = redis.call('HMGET', B, unpack(fs))
  for k = 1, #fs do
    if vs[k] then
      local t = out[owner[k]]
      t[#t+1] = nm[k]
      t[#t+1] = vs[k]
    end
  end
end
return out
`)

// shardOf returns the outbox shard of counter key.
func shardOf(key string) int { return int(fnv32a(key) % Shards) }

// boxKey returns shard s of the outbox to peer (kind "out") or of the
// inbox (kind "in", peer ""): a stream of marks, each entry the counters
// one push marked (at most entryKeys of them), joined by NUL in the one
// field entryField.
func boxKey(kind string, s int, peer string) string {
	return "hotcount:rg:" + kind + "box:{hotcount-rg-" + strconv.Itoa(s) + "}:" + peer
}

// oldBoxKey returns shard s of a box of the earlier layout
// ("hotcount:rg:outlog:…", "hotcount:rg:inlog:…"), whose entries hold
// each counter as a field of its own with an empty value: what a process
// of an earlier build still marks. The lease holder reads them beside
// the current boxes (takeBoxes); a process of the earlier build never
// reads the current ones, so it cannot misread an entry of the current
// form (it waits for a holder of this build).
func oldBoxKey(kind string, s int, peer string) string {
	return "hotcount:rg:" + kind + "log:{hotcount-rg-" + strconv.Itoa(s) + "}:" + peer
}

// takeBoxes returns the boxes a round takes from, of kind and peer as
// boxKey's: every shard's current box, then every shard's box of the
// earlier layout (oldBoxKey).
func takeBoxes(kind, peer string) []string {
	out := make([]string, 2*Shards)
	for i := range Shards {
		out[i] = boxKey(kind, i, peer)
		out[Shards+i] = oldBoxKey(kind, i, peer)
	}
	return out
}

// ackInto returns the box that the counters a round took from box and
// left for later go to: box itself, or for a box of the earlier layout,
// the current box of its shard and kind (the same hash tag, so that one
// script writes both).
func ackInto(box string) string {
	for _, kind := range [...]string{"out", "in"} {
		if rest, ok := strings.CutPrefix(box, "hotcount:rg:"+kind+"log:"); ok {
			return "hotcount:rg:" + kind + "box:" + rest
		}
	}
	return box
}

// entryField is the one field of an entry of a box: its value is the
// entry's counters joined by NUL (counter keys hold no control
// character). One field per entry keeps an XADD to a few arguments, and
// every entry of a stream has the same field, which the stream stores
// once per node of entries.
const entryField = "\x00"

// entryKeysOf returns the counters an entry of a box holds, appended to
// dst: those joined in its entryField, and, in an entry of the earlier
// layout, each other field (a counter, its value empty).
func entryKeysOf(dst []string, fields map[string]string) []string {
	for f, v := range fields {
		if f != entryField {
			dst = append(dst, f)
			continue
		}
		for len(v) > 0 {
			k, rest, _ := strings.Cut(v, entryField)
			if k != "" {
				dst = append(dst, k)
			}
			v = rest
		}
	}
	return dst
}

// entryKeys is the most counters one entry of a box holds, and
// takeEntries(limit) the entries a round takes, so that a round takes at
// most max(limit, entryKeys) counters per box.
const entryKeys = 50

func takeEntries(limit int) int64 { return int64(max(1, limit/entryKeys)) }

// seenKey is set in a peer's cache once origin has shipped everything it
// has to it; a peer whose cache lost it gets everything again.
func seenKey(origin string) string { return "hotcount:rg:seen:{hotcount-rg}:" + origin }

// newer is the Lua comparison of two records: whether v's version
// (epoch, lease, seq: fields 2-4) is at least old's. A malformed old
// record (not six fields, the first "1") is replaced. It takes the
// fields apart with one string.match each, without building tables.
const newer = `
local function fields(s)
  local t = {}
  for x in string.gmatch(s, '[^:]+') do t[#t+1] = x end
  return t
end
local function version(s)
  return string.match(s, '^:*1:+([^:]+):+([^:]+):+([^:]+):+[^:]+:+[^:]+:*$')
end
local function newer(v, old)
  if not old then return true end
  local a2, a3, a4 = version(old)
  if not a2 then return true end
  local b2, b3, b4 = version(v)
  local p, q = tonumber(b2), tonumber(a2)
  if p ~= q then return p > q end
  p, q = tonumber(b3), tonumber(a3)
  if p ~= q then return p > q end
  p, q = tonumber(b4), tonumber(a4)
  if p ~= q then return p > q end
  return true
end
`

// deadlines holds the Lua functions of the deadline register (field 'd',
// "stamp:at_ms"): nowms, the cache's clock in ms; reg, a register's stamp
// and deadline; dset, which stores register v unless the stored one wins
// (a higher stamp; of one stamp, the earlier deadline, none counting as
// the latest), never takes up a deadline that passed, and leaves a stored
// one that passed (its expiry not yet run) alone; and expire, which runs
// the expiry of a register whose deadline passed, as a clear at the
// deadline: the own epoch rises to 2 × the deadline + 2, every
// contribution of an older epoch is fenced (observed-remove), and the
// register goes. expire returns the deadline (ms) when it ran, else 0.
const deadlines = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function reg(v)
  if not v then return nil end
  local s, at = string.match(v, '^(%d+):(%d+)$')
  if not s then return nil end
  return tonumber(s), tonumber(at)
end
local function dset(v, now)
  local s, at = reg(v)
  if not s or s == 0 or (at ~= 0 and at <= now) then return 0 end
  local ost, oat = reg(hget('d'))
  if ost then
    if oat ~= 0 and oat <= now then return 0 end
    if s < ost then return 0 end
    if s == ost then
      local a, b = at, oat
      if a == 0 then a = math.huge end
      if b == 0 then b = math.huge end
      if a >= b then return 0 end
    end
  end
  hset('d', v)
  return 1
end
local function expire(now)
  local s, at = reg(hget('d'))
  if not s or at == 0 or at > now then return 0 end
  local ex = 2 * at + 2
  local e = tonumber(hget('e') or '0')
  if e < ex then hset('e', string.format('%.0f', ex)) end
  local all = hgetall()
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' then
      local v = fields(all[i+1])
      if v[1] == '1' and #v == 6 and tonumber(v[2]) < ex then
        local f = 'f:' .. string.sub(all[i], 3)
        if newer(all[i+1], hget(f)) then
          hset(f, all[i+1])
        end
      end
    end
  end
  hdel('d')
  return at
end
`

// applyScript stores records (ARGV[2:]: name, value pairs) among the
// region records of counter ARGV[1] (see vhash), each only when its
// version is not older than the stored one; a name 'd' is the deadline
// register, merged as dset does. It returns 1 when it stored the first
// record (the contribution); the stored record's epoch when that epoch is
// above the sent one (the sender lost its own epoch: its records were
// collected, or its cache lost them); and 0 when a newer record of the
// same epoch was there: the sender's lease has passed to another process.
var applyScript = newScript(vhash + newer + deadlines + `
local first = 0
local now = nowms()
for i = 2, #ARGV, 2 do
  if ARGV[i] == 'd' then
    dset(ARGV[i+1], now)
  else
    local old = hget(ARGV[i])
    if newer(ARGV[i+1], old) then
      hset(ARGV[i], ARGV[i+1])
      if i == 2 then first = 1 end
    elseif i == 2 then
      local a, b = fields(old), fields(ARGV[i+1])
      if tonumber(a[2]) > tonumber(b[2]) then first = tonumber(a[2]) end
    end
  end
end
return first
`)

// applyManyScript stores the records of several counters of bucket
// KEYS[1], each as applyScript does: ARGV holds, per counter, the
// counter, the number n of its records, then n name, value pairs; no
// counter twice, no name twice for one counter. It returns applyScript's
// answer for each counter, in order. It reads the stored records in one
// HMGET and writes the newer ones in one HSET, then the name lists of the
// counters that got a new name (one HMGET, one HSET), and then merges the
// deadline registers (name 'd') one by one, as applyScript does, with the
// cache's clock read once.
var applyManyScript = newScript(vhashMany + newer + deadlines + `
local out = {}
local fs, vs, pre, nm, who, lead, regs = {}, {}, {}, {}, {}, {}, {}
local seen = {}
local i, c = 1, 0
while i <= #ARGV do
  c = c + 1
  out[c] = 0
  local p = ARGV[i] .. '\0'
  local last = i + 2 * tonumber(ARGV[i+1]) -- the last name's place
  for j = i + 2, last, 2 do
    if ARGV[j] == 'd' then
      regs[#regs+1] = {p, ARGV[j+1]}
    else
      local f = p .. ARGV[j]
      if seen[f] then return redis.error_reply('applyMany: ' .. ARGV[j] .. ' twice') end
      seen[f] = true
      fs[#fs+1], vs[#vs+1], pre[#pre+1], nm[#nm+1], who[#who+1] = f, ARGV[j+1], p, ARGV[j], c
      lead[#lead+1] = j == i + 2
    end
  end
  i = last + 2
end
if #fs > 0 then
  local old = redis.call('HMGET', B, unpack(fs))
  local set, added, order = {}, {}, {}
  for k = 1, #fs do
    local o = old[k] or nil
    if newer(vs[k], o) then
      set[#set+1] = fs[k]
      set[#set+1] = vs[k]
      if not o then
        local p = pre[k]
        if not added[p] then
          added[p] = {}
          order[#order+1] = p
        end
        local t = added[p]
        t[#t+1] = nm[k]
      end
      if lead[k] then out[who[k]] = 1 end
    elseif lead[k] then
      local a, b = fields(o), fields(vs[k])
      if tonumber(a[2]) > tonumber(b[2]) then out[who[k]] = tonumber(a[2]) end
    end
  end
  if #set > 0 then redis.call('HSET', B, unpack(set)) end
  if #order > 0 then
    local lists = redis.call('HMGET', B, unpack(order))
    local upd = {}
    for k = 1, #order do
      local s = table.concat(added[order[k]], ' ')
      if lists[k] then s = lists[k] .. ' ' .. s end
      upd[#upd+1] = order[k]
      upd[#upd+1] = s
    end
    redis.call('HSET', B, unpack(upd))
  end
end
if #regs > 0 then
  local now = nowms()
  for _, r in ipairs(regs) do
    P = r[1]
    dset(r[2], now)
  end
end
return out
`)

// collectScript deletes the region records of counter ARGV[1] when they
// are exactly the names and values ARGV[2:] (pairs): what the collection
// found dead, not changed since. It returns 1 when it deleted them.
var collectScript = newScript(vhash + `
local t = names()
if #t * 2 ~= #ARGV - 1 or #t == 0 then return 0 end
for i = 2, #ARGV, 2 do
  if hget(ARGV[i]) ~= ARGV[i+1] then return 0 end
end
for _, f in ipairs(t) do redis.call('HDEL', B, P .. f) end
redis.call('HDEL', B, P)
return 1
`)

// gcKey is shard s of the region's collection schedule: the counters
// cleared or expired here, scored by when (Unix ms) their region records
// may be collected.
func gcKey(s int) string { return "hotcount:rg:gc:{hotcount-rg-" + strconv.Itoa(s) + "}" }

// clearScript starts a clear of counter ARGV[1] (see vhash):
// it sets the own epoch to an odd value above the old one and above 2 ×
// the cache's clock in ms, turns every contribution received into a
// fence (observed-remove), and removes the deadline register (a clear
// ends the counter and its deadline). It returns the odd epoch, as a
// string.
var clearScript = rueidis.NewLuaScript(vhash + newer + `
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local e = tonumber(hget('e') or '0')
local odd = 2 * ms + 1
if odd <= e then
  odd = e + 1
  if odd % 2 == 0 then odd = odd + 1 end
end
local all = hgetall()
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'c:' then
    local f = 'f:' .. string.sub(all[i], 3)
    if newer(all[i+1], hget(f)) then
      hset(f, all[i+1])
    end
  end
end
local s = string.format('%.0f', odd)
hset('e', s)
hdel('d')
return s
`)

// setDeadlineScript sets the deadline register of counter ARGV[1] (see
// vhash) from this region: ARGV[2] is the deadline in ms (0: none),
// ARGV[3] the stamp (0: the cache's clock, above the stored stamp;
// StampTTL for a namespace ttl's), ARGV[4] "1" when the counter exists
// here. It first runs an expiry whose deadline passed. The register is
// set only when the counter exists here or its records hold a peer's
// contribution (ARGV[5] is this region's name) or a deadline, so that no
// counter starts; no deadline (a Persist) is set only over a deadline,
// or when ARGV[4] is "1". It returns {set, whether the counter exists in
// some region, the deadline (ms) of the expiry it ran or 0, whether the
// register held a deadline still to come}.
var setDeadlineScript = newScript(vhash + newer + deadlines + `
local now = nowms()
local ran = expire(now)
local exists = ARGV[4] == '1'
local ost, oat = reg(hget('d'))
if not exists then
  local all = hgetall()
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'c:' and all[i] ~= 'c:' .. ARGV[5] then
      local v = fields(all[i+1])
      local left = tonumber(v[5] or '0')
      local f = hget('f:' .. string.sub(all[i], 3))
      if f then
        local w = fields(f)
        if tonumber(w[2]) == tonumber(v[2]) then
          left = left - tonumber(w[5])
        elseif tonumber(w[2]) > tonumber(v[2]) then
          left = 0
        end
      end
      if left ~= 0 then exists = true end
    end
  end
end
local had = 0
if ost and oat ~= 0 and oat > now then had = 1 end
if not exists and had == 0 then return {0, 0, ran, 0} end
if ARGV[2] == '0' and had == 0 and ARGV[4] ~= '1' then return {0, 1, ran, 0} end
local s = tonumber(ARGV[3])
if s == 0 then
  s = now
  if ost and ost >= s then s = ost + 1 end
end
local set = dset(string.format('%.0f', s) .. ':' .. ARGV[2], now)
local e = 0
if exists then e = 1 end
return {set, e, ran, had}
`)

// expireScript runs the expiry of counter ARGV[1] when its deadline
// register has passed (see deadlines). It returns the deadline (ms) when
// it ran, else 0.
var expireScript = newScript(vhash + newer + deadlines + `
return expire(nowms())
`)

// dlKey is shard s of the region's deadline schedule: a sorted set of the
// counters whose deadline register this region must look at, scored by
// when (Unix ms).
func dlKey(s int) string { return "hotcount:rg:dl:{hotcount-rg-" + strconv.Itoa(s) + "}" }

// dlDoneScript takes counters off the schedule KEYS[1] (ARGV: counter,
// score pairs) unless they were scheduled again meanwhile (another score).
var dlDoneScript = newScript(`
for i = 1, #ARGV, 2 do
  if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]) or '-1') == tonumber(ARGV[i+1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return 0
`)

// epochScript raises the own epoch of counter ARGV[1] to ARGV[2] when it
// is below it (the end of a clear, or an epoch restored from the durable
// store).
var epochScript = rueidis.NewLuaScript(vhash + `
local e = tonumber(hget('e') or '0')
if e < tonumber(ARGV[2]) then
  hset('e', ARGV[2])
  return 1
end
return 0
`)

// leaseScript takes or renews the shipping lease KEYS[1] for ARGV[1]
// (ttl ARGV[2] ms). It returns the holder's fencing token, or 0 when
// another process holds the lease. A new holder's token is above every
// earlier one and at least the cache's clock in ms, so it rises even
// after the cache lost the token.
var leaseScript = rueidis.NewLuaScript(`
local h = redis.call('GET', KEYS[1])
if h == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if h then return 0 end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if tok < ms then tok = ms end
redis.call('SET', KEYS[2], string.format('%.0f', tok))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return tok
`)

// releaseScript gives the lease KEYS[1] up if ARGV[1] holds it.
var releaseScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// ackScript acknowledges the entries of box KEYS[1] up to the one before
// stream ID ARGV[1] (XTRIM MINID), after a round shipped their counters,
// and first adds the counters ARGV[3:] of those entries that the round
// left for later at the end of box KEYS[2] (KEYS[1] itself, or the
// current box of an old one's shard: see ackInto), as entries of the
// current form of at most ARGV[2] counters each, in one step.
var ackScript = newScript(`
local per = tonumber(ARGV[2])
for i = 3, #ARGV, per do
  redis.call('XADD', KEYS[2], '*', '\0', table.concat(ARGV, '\0', i, math.min(i + per - 1, #ARGV)))
end
return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
`)

// hasKey is shard s of the set of the counters that have a region hash in
// this region's cache: a ship round reads the hash of those alone, so
// that a counter written only here costs no hash read. A key goes in
// before this region writes its hash (a clear, a deadline, an epoch) and
// with every record a peer ships here; it leaves when the hash is
// collected.
func hasKey(s int) string { return "hotcount:rg:has:{hotcount-rg-" + strconv.Itoa(s) + "}" }

// adoptScript sets the own epoch of counter ARGV[1] to ARGV[2] when it
// holds none: a peer holds a record of a newer own epoch than this
// region, whose records were collected or lost.
var adoptScript = newScript(vhash + `
if not hget('e') then
  hset('e', ARGV[2])
  return 1
end
return 0
`)

// cseqKey counts the clears and expiries that began or ended among the
// counters of shard s: a ship round that reads a counter's total while
// it moved reads it again the next round.
func cseqKey(s int) string { return "hotcount:rg:cseq:{hotcount-rg-" + strconv.Itoa(s) + "}" }

// batch is what a round took from one box: its counters (each once) and
// the ID of the last entry taken.
type batch struct {
	keys []string
	last string
	full bool // the box may hold more than the round took
}

// markCmds returns the commands that add keys to the boxes named by
// box(shard): one XADD per box and entryKeys counters, the counters
// joined in the entry's one field (entryField).
func markCmds(c rueidis.Client, keys []string, box func(shard int) []string) rueidis.Commands {
	byShard := make(map[int][]string)
	for _, k := range keys {
		s := shardOf(k)
		byShard[s] = append(byShard[s], k)
	}
	var cmds rueidis.Commands
	for s, ks := range byShard {
		for _, b := range box(s) {
			for i := 0; i < len(ks); i += entryKeys {
				v := strings.Join(ks[i:min(i+entryKeys, len(ks))], entryField)
				cmds = append(cmds, c.B().Xadd().Key(b).Id("*").FieldValue().FieldValue(entryField, v).Build())
			}
		}
	}
	return cmds
}

// mark adds keys to the boxes named by box(shard) in c, in one round.
func mark(ctx context.Context, c rueidis.Client, keys []string, box func(shard int) []string) error {
	cmds := markCmds(c, keys, box)
	if len(cmds) == 0 {
		return nil
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("regions: mark: %w", err)
		}
	}
	return nil
}

// take reads the oldest entries of each of the boxes, up to limit
// counters per box, in one pipelined round; it changes nothing (ack
// does), so a round that fails, or whose process dies, leaves them to
// the next. It reads entries of both forms (entryKeysOf).
func take(ctx context.Context, c rueidis.Client, boxes []string, limit int) (map[string]*batch, error) {
	n := takeEntries(limit)
	cmds := make(rueidis.Commands, len(boxes))
	for i, b := range boxes {
		cmds[i] = c.B().Xrange().Key(b).Start("-").End("+").Count(n).Build()
	}
	out := make(map[string]*batch)
	for i, r := range c.DoMulti(ctx, cmds...) {
		es, err := r.AsXRange()
		if err != nil {
			return nil, fmt.Errorf("regions: take %s: %w", boxes[i], err)
		}
		if len(es) == 0 {
			continue
		}
		b := &batch{last: es[len(es)-1].ID, full: int64(len(es)) >= n}
		seen := make(map[string]bool)
		var ks []string
		for _, e := range es {
			ks = entryKeysOf(ks[:0], e.FieldValues)
			for _, k := range ks {
				if !seen[k] {
					seen[k] = true
					b.keys = append(b.keys, k)
				}
			}
		}
		out[boxes[i]] = b
	}
	return out, nil
}

// after returns the stream ID just after id ("ms-seq").
func after(id string) (string, error) {
	ms, seq, ok := strings.Cut(id, "-")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil {
		return "", fmt.Errorf("regions: stream ID %q", id)
	}
	return ms + "-" + strconv.FormatUint(n+1, 10), nil
}

// ack acknowledges what a round took from each box (taken), once
// shipped: the entries go, and the counters of them that keep reports
// false for are added again at the end (of the current box of the
// shard, for a box of the earlier layout: ackInto), in one step per box
// and one pipelined round.
func ack(ctx context.Context, c rueidis.Client, taken map[string]*batch, keep func(key string) bool) error {
	calls := make([]call, 0, len(taken))
	for box, b := range taken {
		next, err := after(b.last)
		if err != nil {
			return err
		}
		args := []string{next, strconv.Itoa(entryKeys)}
		for _, k := range b.keys {
			if !keep(k) {
				args = append(args, k)
			}
		}
		calls = append(calls, call{s: ackScript, keys: []string{box, ackInto(box)}, args: args})
	}
	for _, r := range round(ctx, c, nil, calls) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("regions: ack: %w", err)
		}
	}
	return nil
}

// pending counts the entries left in the boxes, in one round.
func pending(ctx context.Context, c rueidis.Client, boxes []string) (int64, error) {
	cmds := make(rueidis.Commands, len(boxes))
	for i, b := range boxes {
		cmds[i] = c.B().Xlen().Key(b).Build()
	}
	var n int64
	for _, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsInt64()
		if err != nil {
			return 0, fmt.Errorf("regions: pending: %w", err)
		}
		n += m
	}
	return n, nil
}

// readHashes returns the region records of keys (empty maps for counters
// without any), in one pipelined round: one script call per bucket
// (readManyScript), for up to perCall of its counters.
func readHashes(ctx context.Context, c rueidis.Client, keys []string) ([]map[string]string, error) {
	groups := bucketGroups(keys)
	calls := make([]call, len(groups))
	for i, g := range groups {
		args := make([]string, len(g.at))
		for j, at := range g.at {
			args[j] = keys[at]
		}
		calls[i] = call{s: readManyScript, keys: []string{g.bucket}, args: args}
	}
	out := make([]map[string]string, len(keys))
	for i, r := range round(ctx, c, nil, calls) {
		g := groups[i]
		arr, err := r.ToArray()
		if err == nil && len(arr) != len(g.at) {
			err = fmt.Errorf("%d answers for %d counters", len(arr), len(g.at))
		}
		if err != nil {
			return nil, fmt.Errorf("regions: read %q: %w", keys[g.at[0]], err)
		}
		for j := range arr {
			m, err := arr[j].AsStrMap()
			if err != nil {
				return nil, fmt.Errorf("regions: read %q: %w", keys[g.at[j]], err)
			}
			out[g.at[j]] = m
		}
	}
	return out, nil
}

// perCall is the most counters one script call over a bucket acts on
// (readManyScript, applyManyScript), so that no call holds the node long.
const perCall = 64

// group is the counters of one bucket that one script call acts on: the
// bucket's key and the counters' places in the caller's list.
type group struct {
	bucket string
	at     []int
}

// bucketGroups groups the counters keys by bucket, at most perCall to a
// group, in the order of their first counters.
func bucketGroups(keys []string) []group {
	var groups []group
	open := make(map[uint32]int, len(keys))
	for i, k := range keys {
		b := bucketOf(k)
		j, ok := open[b]
		if !ok || len(groups[j].at) == perCall {
			j = len(groups)
			open[b] = j
			groups = append(groups, group{bucket: bucketName(b)})
		}
		groups[j].at = append(groups[j].at, i)
	}
	return groups
}

// applyCalls returns the calls of applyManyScript that write the records
// of keys, pairs[i] holding the names and values of keys[i]'s records:
// one call per group of bucketGroups, which it returns too (the answers
// of call i are those of the counters at groups[i].at).
func applyCalls(keys []string, pairs [][]string) ([]group, []call) {
	groups := bucketGroups(keys)
	calls := make([]call, len(groups))
	for i, g := range groups {
		var args []string
		for _, at := range g.at {
			args = append(append(args, keys[at], strconv.Itoa(len(pairs[at])/2)), pairs[at]...)
		}
		calls[i] = call{s: applyManyScript, keys: []string{g.bucket}, args: args}
	}
	return groups, calls
}

// hcall returns the call of script s (a vhash script) on counter key's
// records, with args after the counter.
func hcall(s *script, key string, args ...string) call {
	return call{s: s, keys: []string{bucketKey(key)}, args: append([]string{key}, args...)}
}

// hexec runs the rueidis script s (a vhash script) on counter key's
// records.
func hexec(ctx context.Context, c rueidis.Client, s *rueidis.Lua, key string, args ...string) rueidis.RedisResult {
	return s.Exec(ctx, c, []string{bucketKey(key)}, append([]string{key}, args...))
}

// script is a Lua script run by EVALSHA, and by EVAL where the node does
// not know it yet, so that calls of several scripts and plain commands
// share one pipelined round.
type script struct{ src, sha string }

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// call is one script call of a round.
type call struct {
	s          *script
	keys, args []string
}

func (cl call) build(c rueidis.Client, eval bool) rueidis.Completed {
	if eval {
		return c.B().Eval().Script(cl.s.src).Numkeys(int64(len(cl.keys))).Key(cl.keys...).Arg(cl.args...).Build()
	}
	return c.B().Evalsha().Sha1(cl.s.sha).Numkeys(int64(len(cl.keys))).Key(cl.keys...).Arg(cl.args...).Build()
}

// round sends the commands cmds and the script calls calls in one
// pipelined round (a second one only for scripts a node did not know) and
// returns their results in order: cmds first.
func round(ctx context.Context, c rueidis.Client, cmds rueidis.Commands, calls []call) []rueidis.RedisResult {
	for _, cl := range calls {
		cmds = append(cmds, cl.build(c, false))
	}
	res := c.DoMulti(ctx, cmds...)
	n := len(res) - len(calls)
	var again rueidis.Commands
	var at []int
	for i, cl := range calls {
		if err, ok := rueidis.IsRedisErr(res[n+i].Error()); ok && err.IsNoScript() {
			again = append(again, cl.build(c, true))
			at = append(at, n+i)
		}
	}
	if len(again) > 0 {
		for j, r := range c.DoMulti(ctx, again...) {
			res[at[j]] = r
		}
	}
	return res
}
