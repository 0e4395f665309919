package proxy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/redis/rueidis"
)

// Commands over keys in several slots, and keyless commands that concern
// the whole keyspace, are split or sent to every primary and answered as
// one, as a standalone Redis would answer them.

const crossSlotErr = "CROSSSLOT Keys in request don't hash to the same slot"

// crossSlot answers a pass-through command whose keys span slots: MGET,
// DEL, UNLINK, EXISTS, TOUCH and MSET are split by slot (not atomically:
// each slot's part is applied on its own); anything else gets Redis
// Cluster's CROSSSLOT error.
func (c *conn) crossSlot(name string, ci *cmdInfo, strs []string, keys []int, _ []bool) {
	ctx, cancel := c.timeout()
	defer cancel()
	switch name {
	case "mget":
		c.mget(strs[1:], nil)
	case "del", "unlink", "exists", "touch":
		n, errReply := c.splitInts(ctx, name, strs[1:])
		if errReply != "" {
			c.out = appendErr(c.out, errReply)
			return
		}
		c.out = appendInt(c.out, n)
	case "mset":
		c.splitMSet(ctx, strs[1:])
	default:
		c.out = appendErr(c.out, crossSlotErr)
	}
}

// bySlot groups positions of keys by slot, in order of first appearance.
func bySlot(keys []string) (slots []uint16, groups map[uint16][]int) {
	groups = map[uint16][]int{}
	for i, k := range keys {
		s := keyspace.Slot(k)
		if _, ok := groups[s]; !ok {
			slots = append(slots, s)
		}
		groups[s] = append(groups[s], i)
	}
	return slots, groups
}

// sendBySlot sends one command per slot (made by mk from the positions of
// its keys) and returns the results in slot order.
func (c *conn) sendBySlot(ctx context.Context, keys []string, mk func(b rueidis.Builder, pos []int) rueidis.Completed) (slots []uint16, groups map[uint16][]int, res []rueidis.RedisResult) {
	up := c.s.upstream(c.proto)
	slots, groups = bySlot(keys)
	cmds := make([]rueidis.Completed, len(slots))
	for i, s := range slots {
		cmds[i] = mk(up.B(), groups[s])
	}
	c.s.stats.split.Add(1)
	return slots, groups, up.DoMulti(ctx, cmds...)
}

// resultError returns the reply for a failed result, or "".
func resultError(r *rueidis.RedisResult) string {
	if err := r.NonRedisError(); err != nil {
		return upstreamError(err)
	}
	if err := r.Error(); err != nil {
		msg, _ := r.ToMessage()
		if s, _ := msg.ToString(); s != "" {
			return s // as Redis wrote it, with its code ("ERR ...")
		}
		return "ERR " + err.Error()
	}
	return ""
}

func pick(keys []string, pos []int) []string {
	out := make([]string, len(pos))
	for i, p := range pos {
		out[i] = keys[p]
	}
	return out
}

// splitMGet reads plain keys with one MGET per slot and returns their
// values in order, or an error reply.
func (c *conn) splitMGet(ctx context.Context, keys []string) ([]rueidis.RedisMessage, string) {
	slots, groups, res := c.sendBySlot(ctx, keys, func(b rueidis.Builder, pos []int) rueidis.Completed {
		return b.Arbitrary("MGET").Keys(pick(keys, pos)...).Build()
	})
	out := make([]rueidis.RedisMessage, len(keys))
	for i, s := range slots {
		if e := resultError(&res[i]); e != "" {
			return nil, e
		}
		vals, err := res[i].ToArray()
		if err != nil || len(vals) != len(groups[s]) {
			return nil, "ERR hotcount proxy: unexpected MGET reply"
		}
		for j, p := range groups[s] {
			out[p] = vals[j]
		}
	}
	return out, ""
}

// splitInts sends name (DEL, UNLINK, EXISTS, TOUCH) per slot and adds the
// integer replies.
func (c *conn) splitInts(ctx context.Context, name string, keys []string) (int64, string) {
	cmdName := strings.ToUpper(name)
	slots, _, res := c.sendBySlot(ctx, keys, func(b rueidis.Builder, pos []int) rueidis.Completed {
		return b.Arbitrary(cmdName).Keys(pick(keys, pos)...).Build()
	})
	var n int64
	for i := range slots {
		if e := resultError(&res[i]); e != "" {
			return 0, e
		}
		v, err := res[i].AsInt64()
		if err != nil {
			return 0, "ERR hotcount proxy: unexpected " + cmdName + " reply"
		}
		n += v
	}
	return n, ""
}

// splitMSet sets key/value pairs with one MSET per slot.
func (c *conn) splitMSet(ctx context.Context, kv []string) {
	if len(kv)%2 != 0 {
		c.out = appendErr(c.out, wrongArity("mset"))
		return
	}
	keys := make([]string, len(kv)/2)
	for i := range keys {
		keys[i] = kv[2*i]
	}
	slots, _, res := c.sendBySlot(ctx, keys, func(b rueidis.Builder, pos []int) rueidis.Completed {
		a := b.Arbitrary("MSET")
		for _, p := range pos {
			a = a.Keys(kv[2*p]).Args(kv[2*p+1])
		}
		return a.Build()
	})
	for i := range slots {
		if e := resultError(&res[i]); e != "" {
			c.out = appendErr(c.out, e)
			return
		}
	}
	c.out = appendOK(c.out)
}

// primaries returns a client for every primary, ordered by address (one,
// for a standalone upstream).
func (c *conn) primaries(ctx context.Context) ([]string, map[string]rueidis.Client, error) {
	up := c.s.upstream(c.proto)
	nodes := up.Nodes()
	if !c.s.cluster {
		var addrs []string
		for a := range nodes {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		return addrs[:min(1, len(addrs))], nodes, nil
	}
	slots, err := up.Do(ctx, up.B().ClusterSlots().Build()).ToArray()
	if err != nil || len(slots) == 0 {
		// rueidis sends it to any node it knows, which may be down, or
		// one removed from the cluster (reset, it answers no slots):
		// ask the others in turn.
		for _, a := range sortedAddrs(nodes) {
			n := nodes[a]
			if s, e := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray(); e == nil && len(s) > 0 {
				slots, err = s, nil
				break
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if len(slots) == 0 {
		return nil, nil, errors.New("no node answers CLUSTER SLOTS with a slot")
	}
	first := map[string]uint16{} // a slot of each primary
	var addrs []string
	for i := range slots {
		r, err := slots[i].ToArray()
		if err != nil || len(r) < 3 {
			continue
		}
		n, err := r[2].ToArray()
		if err != nil || len(n) < 2 {
			continue
		}
		lo, _ := r[0].AsInt64()
		host, _ := n[0].ToString()
		port, _ := n[1].AsInt64()
		a := host + ":" + strconv.FormatInt(port, 10)
		if _, ok := first[a]; !ok {
			first[a] = uint16(lo)
			addrs = append(addrs, a)
		}
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		if nodes[a] != nil {
			continue
		}
		// A primary that joined the cluster after the proxy last read
		// its map: a keyed command to one of its slots reaches the old
		// owner, whose MOVED makes rueidis connect to it.
		up.Do(ctx, up.B().Exists().Key(keyInSlot(first[a])).Build())
		if nodes = up.Nodes(); nodes[a] == nil {
			return nil, nil, fmt.Errorf("no connection to primary %s yet", a)
		}
	}
	return addrs, nodes, nil
}

// sortedAddrs returns the addresses of nodes, sorted.
func sortedAddrs(nodes map[string]rueidis.Client) []string {
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	return addrs
}

// keyInSlot returns a key that hashes to slot.
func keyInSlot(slot uint16) string {
	for i := 0; ; i++ {
		if k := "hotcount:slot:" + strconv.Itoa(i); keyspace.Slot(k) == slot {
			return k
		}
	}
}

// onPrimaries sends strs to every primary and returns the results in
// address order, or writes an error reply and returns nil.
func (c *conn) onPrimaries(strs []string) []rueidis.RedisResult {
	ctx, cancel := c.timeout()
	defer cancel()
	addrs, nodes, err := c.primaries(ctx)
	if err != nil {
		c.out = appendErr(c.out, upstreamError(err))
		return nil
	}
	c.s.stats.split.Add(1)
	res := make([]rueidis.RedisResult, len(addrs))
	done := make(chan struct{}, len(addrs))
	for i, a := range addrs {
		go func() {
			n := nodes[a]
			res[i] = n.Do(ctx, n.B().Arbitrary(strs...).Build())
			done <- struct{}{}
		}()
	}
	for range addrs {
		<-done
	}
	for i := range res {
		if e := resultError(&res[i]); e != "" {
			c.out = appendErr(c.out, e)
			return nil
		}
	}
	return res
}

// dbsize: DBSIZE, summed over the primaries (counters' sub-keys included).
func (c *conn) dbsize(args [][]byte) {
	if len(args) != 1 {
		c.out = appendErr(c.out, wrongArity("dbsize"))
		return
	}
	res := c.onPrimaries([]string{"DBSIZE"})
	if res == nil {
		return
	}
	var n int64
	for i := range res {
		v, _ := res[i].AsInt64()
		n += v
	}
	c.out = appendInt(c.out, n)
}

// keysCmd: KEYS pattern, on every primary, concatenated.
func (c *conn) keysCmd(args [][]byte) {
	if len(args) != 2 {
		c.out = appendErr(c.out, wrongArity("keys"))
		return
	}
	res := c.onPrimaries([]string{"KEYS", string(args[1])})
	if res == nil {
		return
	}
	var all []rueidis.RedisMessage
	for i := range res {
		v, _ := res[i].ToArray()
		all = append(all, v...)
	}
	c.appendMessages(c.visible(all))
}

// appendMessages appends an array of upstream messages.
func (c *conn) appendMessages(ms []rueidis.RedisMessage) {
	c.out = appendArray(c.out, len(ms))
	for i := range ms {
		out, err := appendMessage(c.out, &ms[i], c.proto, nil, &c.scratch)
		if err != nil {
			out = appendNull(c.out, c.proto)
		}
		c.out = out
	}
}

// scanNodeBits is how many low bits of a proxy SCAN cursor hold the
// primary's index; the rest is that primary's own cursor.
const scanNodeBits = 10

// scan: SCAN cursor [MATCH p] [COUNT n] [TYPE t] walks the primaries one
// after the other (ordered by address). The cursor packs the primary's
// index into its low 10 bits and that primary's cursor above. A primary
// added or removed during a scan can make it miss or repeat keys.
func (c *conn) scan(args [][]byte) {
	if len(args) < 2 {
		c.out = appendErr(c.out, wrongArity("scan"))
		return
	}
	cur, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		c.out = appendErr(c.out, "ERR invalid cursor")
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	addrs, nodes, err := c.primaries(ctx)
	if err != nil {
		c.out = appendErr(c.out, upstreamError(err))
		return
	}
	idx := int(cur & (1<<scanNodeBits - 1))
	nodeCur := cur >> scanNodeBits
	if idx >= len(addrs) {
		c.out = appendErr(c.out, "ERR invalid cursor")
		return
	}
	strs := c.strings(args)
	strs[1] = strconv.FormatUint(nodeCur, 10)
	n := nodes[addrs[idx]]
	res := n.Do(ctx, n.B().Arbitrary(strs...).Build())
	if e := resultError(&res); e != "" {
		c.out = appendErr(c.out, e)
		return
	}
	r, err := res.ToArray()
	if err != nil || len(r) != 2 {
		c.out = appendErr(c.out, "ERR hotcount proxy: unexpected SCAN reply")
		return
	}
	next, _ := r[0].ToString()
	nc, err := strconv.ParseUint(next, 10, 64)
	if err != nil || nc >= 1<<(64-scanNodeBits) {
		c.out = appendErr(c.out, "ERR hotcount proxy: a node's SCAN cursor is too large to combine")
		return
	}
	var out uint64
	switch {
	case nc != 0:
		out = nc<<scanNodeBits | uint64(idx)
	case idx+1 < len(addrs):
		out = uint64(idx + 1)
	}
	keys, _ := r[1].ToArray()
	keys = c.visible(keys)
	c.out = appendArray(c.out, 2)
	c.out = appendBulk(c.out, strconv.FormatUint(out, 10))
	c.appendMessages(keys)
}

// script: SCRIPT LOAD, EXISTS and FLUSH on every primary, so that
// EVALSHA works whatever slot its keys are in. SCRIPT KILL is refused.
func (c *conn) script(args [][]byte) {
	if len(args) < 2 {
		c.out = appendErr(c.out, wrongArity("script"))
		return
	}
	var nb [32]byte
	switch sub := string(lower(nb[:0], args[1])); sub {
	case "load", "flush":
		res := c.onPrimaries(c.strings(args))
		if res == nil {
			return
		}
		if sub == "flush" {
			c.s.scripts.forget()
		}
		c.appendResult(&res[0], nil)
	case "exists":
		res := c.onPrimaries(c.strings(args))
		if res == nil {
			return
		}
		all := make([]int64, len(args)-2)
		for i := range all {
			all[i] = 1
		}
		for i := range res {
			v, _ := res[i].AsIntSlice()
			for j := range all {
				if j >= len(v) || v[j] == 0 {
					all[j] = 0
				}
			}
		}
		c.out = appendArray(c.out, len(all))
		for _, v := range all {
			c.out = appendInt(c.out, v)
		}
	default:
		c.s.stats.refused.Add(1)
		c.out = appendErr(c.out, "ERR SCRIPT "+strings.ToUpper(sub)+" is not supported by the hotcount proxy")
	}
}
