package rediscluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	id     string
	addr   string // "127.0.0.1:7000", without bus port or hostname
	flags  []string
	master string // ID of the primary of a replica, "-" otherwise
	slots  [][2]int
}

// has reports whether the entry carries flag.
func (e nodeEntry) has(flag string) bool {
	for _, f := range e.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// slotText renders the slot ranges, e.g. "0-5460".
func (e nodeEntry) slotText() string {
	parts := make([]string, len(e.slots))
	for i, r := range e.slots {
		if r[0] == r[1] {
			parts[i] = strconv.Itoa(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	return strings.Join(parts, ",")
}

// parseClusterNodes parses CLUSTER NODES text. Lines it cannot read are
// skipped; migrating/importing markers ("[...]") are ignored.
func parseClusterNodes(s string) []nodeEntry {
	var out []nodeEntry
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		e := nodeEntry{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				e.slots = append(e.slots, [2]int{a, b})
			}
		}
		out = append(out, e)
	}
	return out
}

// primariesOf returns the addresses of primaries that own slots and are
// not flagged as failed, ordered by lowest slot.
func primariesOf(es []nodeEntry) []string {
	var ps []nodeEntry
	for _, e := range es {
		if e.has("master") && len(e.slots) > 0 && !e.has("fail") {
			ps = append(ps, e)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].slots[0][0] < ps[j].slots[0][0] })
	out := make([]string, len(ps))
	for i, e := range ps {
		out[i] = e.addr
	}
	return out
}

// slotOwners renders the slot map of one view as "lo-hi=id" ranges in slot
// order, and returns the owners' IDs.
func slotOwners(es []nodeEntry) (string, []string) {
	type rng struct {
		lo, hi int
		id     string
	}
	var rs []rng
	var owners []string
	for _, e := range es {
		if !e.has("master") || len(e.slots) == 0 {
			continue
		}
		owners = append(owners, e.id)
		for _, s := range e.slots {
			rs = append(rs, rng{s[0], s[1], e.id})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%d-%d=%s ", r.lo, r.hi, r.id)
	}
	return b.String(), owners
}

// myself returns the entry flagged "myself".
func myself(es []nodeEntry) (nodeEntry, bool) {
	for _, e := range es {
		if e.has("myself") {
			return e, true
		}
	}
	return nodeEntry{}, false
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all slots assigned and every node known, all running nodes agree on the
// slot owners, every slot owner is running, and every running replica has
// its link up and is seen online by its primary. Nodes that were killed or
// stopped are not asked (but must not own slots). Without a ctx deadline the
// wait is bounded by 60 s. The error wraps ErrNotHealthy.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, createTimeout)
		defer cancel()
	}
	if err := poll(ctx, c.healthy); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHealthy, err)
	}
	return nil
}

// healthy checks the conditions of WaitHealthy once.
func (c *Cluster) healthy(ctx context.Context) error {
	var running []*Node
	for _, n := range c.nodes {
		if n.Running() {
			running = append(running, n)
		}
	}
	if len(running) == 0 {
		return fmt.Errorf("no node is running")
	}
	var agreed string
	replicasOf := map[string]int{} // primary ID -> running replicas
	for i, n := range running {
		info, err := Do(ctx, n.Addr, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		for _, want := range [][2]string{
			{"cluster_state", "ok"},
			{"cluster_slots_assigned", strconv.Itoa(numSlots)},
			{"cluster_known_nodes", strconv.Itoa(len(c.nodes))},
		} {
			if v, _ := infoField(info, want[0]); v != want[1] {
				return fmt.Errorf("%s: %s is %q, want %q", n.Addr, want[0], v, want[1])
			}
		}
		s, err := Do(ctx, n.Addr, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		es := parseClusterNodes(s)
		sig, owners := slotOwners(es)
		if i == 0 {
			agreed = sig
			for _, id := range owners {
				if o := c.ids[id]; o == nil || !o.Running() {
					return fmt.Errorf("%s: slots are owned by %s, which is not running", n.Addr, id)
				}
			}
		} else if sig != agreed {
			return fmt.Errorf("%s and %s disagree on the slot owners", running[0].Addr, n.Addr)
		}
		if me, ok := myself(es); ok && me.has("slave") {
			repl, err := Do(ctx, n.Addr, "INFO", "replication")
			if err != nil {
				return err
			}
			if v, _ := infoField(repl, "master_link_status"); v != "up" {
				return fmt.Errorf("%s: master_link_status is %q", n.Addr, v)
			}
			replicasOf[me.master]++
		}
	}
	for id, want := range replicasOf {
		p := c.ids[id]
		if p == nil || !p.Running() {
			return fmt.Errorf("a replica follows %s, which is not running", id)
		}
		repl, err := Do(ctx, p.Addr, "INFO", "replication")
		if err != nil {
			return err
		}
		if v, _ := infoField(repl, "connected_slaves"); v != strconv.Itoa(want) {
			return fmt.Errorf("%s: connected_slaves is %q, want %d", p.Addr, v, want)
		}
		for k := range want {
			if v, _ := infoField(repl, "slave"+strconv.Itoa(k)); !strings.Contains(v, "state=online") {
				return fmt.Errorf("%s: replica %d is %q", p.Addr, k, v)
			}
		}
		// The primary's own cluster view (gossip) must list them too.
		s, err := Do(ctx, p.Addr, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		seen := 0
		for _, e := range parseClusterNodes(s) {
			if e.has("slave") && e.master == id && !e.has("fail") && !e.has("fail?") {
				seen++
			}
		}
		if seen != want {
			return fmt.Errorf("%s: its cluster view lists %d replicas, want %d", p.Addr, seen, want)
		}
	}
	return nil
}
