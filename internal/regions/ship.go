package regions

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// outboxes returns the outbox keys of shard s, one per peer.
func (s *Service) outboxes(shard int) []string {
	out := make([]string, len(s.peers))
	for i, p := range s.peers {
		out[i] = boxKey("out", shard, p)
	}
	return out
}

// pushLoop pushes the counters marked here to the region's outboxes every
// half Interval, so that a mark waits at most half an interval for the
// shipper to see it.
func (s *Service) pushLoop() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.Interval / 2)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
			_ = s.push(context.Background(), false)
		}
	}
}

// push adds the marked counters to every peer's outbox. A counter stays
// marked until it has been pushed at least Settle after its first mark
// (all, when final). Pushes run one at a time (the push loop's, the
// ship loops' and Close's), so that two never add the same marks: a
// ship round that read the outbox between them would leave the second's
// for another round, which would read and ship those counters again. A
// push takes the marks it adds off the map before it adds them, so that
// a counter marked again meanwhile (an increment that landed after the
// round that takes this push's entry read its total) stays marked for
// the next push.
func (s *Service) push(ctx context.Context, final bool) error {
	if len(s.peers) == 0 {
		return nil
	}
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	taken := s.dirty
	if len(taken) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.dirty = make(map[string]dirtyMark, len(taken))
	s.pushing = taken
	s.mu.Unlock()
	keys := make([]string, 0, len(taken))
	for k := range taken {
		keys = append(keys, k)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := mark(ctx, s.cfg.Local, keys, s.outboxes)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushing = nil
	for k, m := range taken {
		if err == nil && (final || !m.settle || now.Sub(m.at) >= s.cfg.Settle) {
			continue
		}
		// Not pushed, or to push again once it settled: marked as it
		// was, or as marked again meanwhile (the later mark, to settle
		// if either must).
		if m2, ok := s.dirty[k]; ok {
			m2.settle = m2.settle || m.settle
			s.dirty[k] = m2
		} else {
			s.dirty[k] = m
		}
	}
	return err
}

// leaseLoop takes and renews the shipping lease.
func (s *Service) leaseLoop() {
	defer s.wg.Done()
	every := s.cfg.LeaseTTL / 4
	t := s.cfg.Clock.NewTicker(every)
	defer t.Stop()
	var lastOK time.Time
	s.forgetPeers()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		tok, err := leaseScript.Exec(ctx, s.cfg.Local, []string{leaseKey, tokenKey},
			[]string{s.me, strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10)}).AsUint64()
		cancel()
		now := s.cfg.Clock.Now()
		switch {
		case err == nil:
			lastOK = now
			s.token.Store(tok)
			if tok != 0 {
				s.checkAlive()
				s.checkPeers()
			}
		case now.Sub(lastOK) > s.cfg.LeaseTTL/2:
			s.token.Store(0) // the lease may have passed to another process
		}
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
	}
}

// shipLoop ships to one peer every Interval while this process holds the
// lease.
func (s *Service) shipLoop(l *link) {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		tok := s.token.Load()
		if tok == 0 {
			continue
		}
		l.mu.Lock()
		if l.first.IsZero() {
			l.first = s.cfg.Clock.Now()
		}
		l.mu.Unlock()
		// The holder's own marks go to the outbox now rather than at the
		// next push, up to half an interval later: this round ships them.
		_ = s.push(context.Background(), false)
		// A round that took a full batch from some shard is followed at
		// once by another (up to maxRounds per interval), so that an
		// outbox fuller than a batch does not wait an interval per batch.
		for r := 0; r < maxRounds; r++ {
			l.more = false
			n, bytes, err := s.ship(l, tok)
			now := s.cfg.Clock.Now()
			l.mu.Lock()
			l.stats.Shipped += uint64(n)
			l.stats.Bytes += uint64(bytes)
			if err != nil {
				l.stats.Errors++
				l.stats.LastError = err.Error()
			} else {
				l.stats.LastSuccess, l.stats.LastError = now, ""
			}
			l.mu.Unlock()
			if err != nil || !l.more || s.stopping() || s.token.Load() != tok {
				break
			}
		}
	}
}

// maxRounds bounds the ship rounds to one peer per interval.
const maxRounds = 16

// stopping reports whether Close has begun.
func (s *Service) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// ship runs one round to peer l with fencing token tok: the counters of
// its outbox are read here and written there, and taken off the outbox
// once written. It returns the records written and their size.
func (s *Service) ship(l *link, tok uint64) (int, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	if l.client == nil {
		c, err := l.connect(ctx)
		if err != nil {
			return 0, 0, err
		}
		l.client = c
	}
	taken, err := take(ctx, s.cfg.Local, takeBoxes("out", l.name), s.cfg.Batch)
	if err != nil {
		return 0, 0, err
	}
	var keys []string
	for _, b := range taken {
		keys = append(keys, b.keys...)
		l.more = l.more || b.full
	}
	if len(keys) == 0 {
		err := l.client.Do(ctx, l.client.B().Get().Key(seenKey(s.cfg.Region)).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return 0, 0, s.resync(ctx, l)
		}
		return 0, 0, err
	}
	recs, regs, ready, err := s.records(ctx, keys, tok)
	if err != nil {
		return 0, 0, err
	}
	if s.token.Load() != tok {
		return 0, 0, nil // the lease was lost meanwhile
	}
	var shippedKeys []string
	var pairs [][]string       // per counter of shippedKeys: its records' names and values
	var hints rueidis.Commands // sent once the records are there
	now := s.cfg.Clock.Now()
	n, size := 0, 0
	for _, k := range keys {
		rs := recs[k]
		if len(rs) == 0 {
			continue
		}
		args := make([]string, 0, 2*len(rs)+2)
		for _, p := range rs {
			f, v := field(p), Encode(p)
			args = append(args, f, v)
			size += len(k) + len(f) + len(v)
		}
		if d, ok := regs[k]; ok {
			v := encodeDeadline(d)
			args = append(args, fieldDeadline, v)
			size += len(fieldDeadline) + len(v)
			// The peer looks at the register now: it gives its own part
			// the deadline and schedules the expiry.
			hints = append(hints, l.client.B().Zadd().Key(dlKey(shardOf(k))).Lt().ScoreMember().
				ScoreMember(float64(now.UnixMilli()), k).Build())
		}
		n += len(rs)
		pairs = append(pairs, args)
		shippedKeys = append(shippedKeys, k)
	}
	// The records go in one script call per bucket (applyManyScript),
	// which acts on each counter as applyScript does.
	groups, calls := applyCalls(shippedKeys, pairs)
	// A first round to the peer: whether it knows this region, its set
	// of counters with a hash, and the records.
	cmds := rueidis.Commands{l.client.B().Get().Key(seenKey(s.cfg.Region)).Build()}
	byShard := make(map[int][]string)
	for _, k := range shippedKeys {
		byShard[shardOf(k)] = append(byShard[shardOf(k)], k)
	}
	for sh, ks := range byShard {
		cmds = append(cmds, l.client.B().Sadd().Key(hasKey(sh)).Member(ks...).Build())
	}
	res := round(ctx, l.client, cmds, calls)
	for _, r := range res[1:] {
		if err := r.Error(); err != nil {
			return 0, 0, err
		}
	}
	answers := make([]int64, len(shippedKeys))
	for i, r := range res[len(cmds):] {
		arr, err := r.ToArray()
		if err == nil && len(arr) != len(groups[i].at) {
			err = fmt.Errorf("regions: ship: %d answers for %d counters", len(arr), len(groups[i].at))
		}
		if err != nil {
			return 0, 0, err
		}
		for j, at := range groups[i].at {
			answers[at], _ = arr[j].AsInt64()
		}
	}
	for i, k := range shippedKeys {
		switch v := answers[i]; {
		case v == 0:
			// A newer holder's record is there: this process's lease is
			// gone, and the counter stays in the outbox for the holder.
			ready[k] = false
		case v > 1 && uint64(v) > recs[k][0].Epoch:
			// The peer holds a record of a newer own epoch than this
			// region's hash: the hash was collected after the counter
			// ended, or lost with the cache. The counter that started
			// since ships above it, next round.
			ready[k] = false
			if s.hasHash(ctx, k) == nil {
				_ = round(ctx, s.cfg.Local, nil, []call{hcall(adoptScript, k, strconv.FormatInt(v+2, 10))})
			}
		}
	}
	// A second round, once the records are there: the peer's inbox (its
	// lease holder keeps what its cache holds in its durable store) and
	// its deadline schedule. Sent with the records, a mark could reach
	// its node before they reach theirs (other nodes, or a script the
	// node did not know yet): the holder would find nothing to keep, or
	// no register to look at, and take the mark off for good.
	if len(shippedKeys) > 0 {
		hints = append(hints, markCmds(l.client, shippedKeys, func(shard int) []string { return []string{boxKey("in", shard, "")} })...)
		for _, r := range l.client.DoMulti(ctx, hints...) {
			if err := r.Error(); err != nil {
				return 0, 0, err
			}
		}
	}
	if s.cfg.Durable != nil {
		var own []durable.RegionPart
		for _, k := range shippedKeys {
			if !ready[k] {
				continue
			}
			// The own contribution, and the fences this region holds
			// (an exact read here subtracts them too).
			own = append(own, recs[k]...)
		}
		// Kept before the acknowledgement, so that a failed save leaves
		// the counters in the outbox for the next round, and before a
		// resync, which ships again what the durable store holds: the
		// peer's cache may have lost these records since they arrived.
		if err := s.cfg.Durable.SaveRegionParts(ctx, own); err != nil {
			return n, size, err
		}
	}
	// The peer does not know this region (it is new, or its cache came
	// back empty): it gets everything again.
	if err := res[0].Error(); rueidis.IsRedisNil(err) {
		if err := s.resync(ctx, l); err != nil {
			return n, size, err
		}
	} else if err != nil {
		return 0, 0, err
	}
	// Acknowledged: the counters shipped; the others go to the end of
	// the outbox.
	if err := ack(ctx, s.cfg.Local, taken, func(k string) bool { return ready[k] }); err != nil {
		return n, size, err
	}
	return n, size, nil
}

// records reads the own totals of keys and builds, per counter, its
// contribution record and the fences this region holds, and the deadline
// register it carries (regs). A counter of a shard where a clear or an
// expiry began or ended during the read, or whose clear is under way, or
// whose deadline passed (its expiry runs first) gets no record this round
// (ready false: it stays in the outbox). The region hash is read once,
// after the totals; the shards' clear counts, before and after.
func (s *Service) records(ctx context.Context, keys []string, tok uint64) (recs map[string][]durable.RegionPart, regs map[string]Deadline, ready map[string]bool, err error) {
	before, err := s.clearCounts(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	t0 := s.cfg.Clock.Now()
	totals, err := s.cfg.Totals(ctx, keys)
	if err != nil {
		return nil, nil, nil, err
	}
	after, err := s.readOwnHashes(ctx, keys)
	if err != nil {
		return nil, nil, nil, err
	}
	moved, err := s.clearCounts(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var stored map[string][]durable.RegionPart
	if s.cfg.Durable != nil {
		if stored, err = s.cfg.Durable.LoadRegionParts(ctx, keys); err != nil {
			return nil, nil, nil, err
		}
	}
	now := s.cfg.Clock.Now()
	states := make([]State, len(keys))
	for i, k := range keys {
		states[i], _ = Parse(k, after[i])
	}
	own, err := s.ownDeadlines(ctx, keys, states, now)
	if err != nil {
		return nil, nil, nil, err
	}
	recs = make(map[string][]durable.RegionPart, len(keys))
	regs = make(map[string]Deadline)
	ready = make(map[string]bool, len(keys))
	for i, k := range keys {
		s1 := states[i]
		if sh := shardOf(k); before[sh] != moved[sh] {
			continue
		}
		if s1.Epoch%2 == 1 {
			// A clear under way, or one whose process died mid-clear.
			if now.UnixMilli()-int64(s1.Epoch/2) > stuckClear.Milliseconds() {
				_ = hexec(ctx, s.cfg.Local, epochScript, k, strconv.FormatUint(s1.Epoch+1, 10)).Error()
			}
			continue
		}
		if s1.Deadline.Passed(now) {
			// The counter ended at its deadline: its expiry runs first
			// (when the total was read after it), and the counter that
			// starts after it is shipped next round.
			if s1.Deadline.Passed(t0) {
				s.expire(ctx, k)
			}
			continue
		}
		if restored := ownEpoch(stored[k], s.cfg.Region); restored > s1.Epoch {
			// The cache lost the own epoch: take it back, ship next round.
			_ = s.hasHash(ctx, k)
			_ = hexec(ctx, s.cfg.Local, epochScript, k, strconv.FormatUint(restored, 10)).Error()
			continue
		}
		d := s1.Deadline
		if o, ok := own[k]; ok && o.Exists {
			switch {
			case !o.At.IsZero() && (!d.Set() || d.Stamp == StampTTL && o.At.Before(d.At)):
				// A namespace ttl's deadline: the register's, if it is
				// the earliest.
				nd := Deadline{Stamp: StampTTL, At: o.At}
				if err := s.setRegister(ctx, k, nd); err == nil {
					d = nd
				}
			case d.Set() && o.At.UnixMilli() != d.At.UnixMilli() && (!o.At.IsZero() || !d.At.IsZero()):
				// A deadline set elsewhere (or here, before this counter
				// started again) is this part's too.
				_ = s.cfg.Expire(ctx, k, d.At)
			}
		}
		rs := []durable.RegionPart{{Key: k, Origin: s.cfg.Region, Kind: durable.PartContribution, Epoch: s1.Epoch,
			Lease: tok, Seq: s.seq.Add(1), Value: totals[k], At: now}}
		for _, f := range s1.Fences {
			rs = append(rs, f)
		}
		recs[k] = rs
		if d.Set() {
			regs[k] = d
		}
		ready[k] = true
	}
	return recs, regs, ready, nil
}

// readOwnHashes returns the region hashes of keys, reading those alone
// that hasKey names (empty maps for the others), in two rounds.
func (s *Service) readOwnHashes(ctx context.Context, keys []string) ([]map[string]string, error) {
	byShard := make(map[int][]int)
	for i, k := range keys {
		sh := shardOf(k)
		byShard[sh] = append(byShard[sh], i)
	}
	shards := make([]int, 0, len(byShard))
	cmds := make(rueidis.Commands, 0, len(byShard))
	for sh, idx := range byShard {
		members := make([]string, len(idx))
		for j, i := range idx {
			members[j] = keys[i]
		}
		shards = append(shards, sh)
		cmds = append(cmds, s.cfg.Local.B().Smismember().Key(hasKey(sh)).Member(members...).Build())
	}
	var with []string
	var at []int
	for j, r := range s.cfg.Local.DoMulti(ctx, cmds...) {
		in, err := r.AsIntSlice()
		if err != nil {
			return nil, fmt.Errorf("regions: read %s: %w", hasKey(shards[j]), err)
		}
		for m, i := range byShard[shards[j]] {
			if m < len(in) && in[m] == 1 {
				with = append(with, keys[i])
				at = append(at, i)
			}
		}
	}
	out := make([]map[string]string, len(keys))
	if len(with) > 0 {
		hs, err := readHashes(ctx, s.cfg.Local, with)
		if err != nil {
			return nil, err
		}
		for j, i := range at {
			out[i] = hs[j]
		}
	}
	return out, nil
}

// clearCounts reads the clear count of every shard (cseqKey), in one
// round.
func (s *Service) clearCounts(ctx context.Context) ([Shards]string, error) {
	var out [Shards]string
	cmds := make(rueidis.Commands, Shards)
	for i := range cmds {
		cmds[i] = s.cfg.Local.B().Get().Key(cseqKey(i)).Build()
	}
	for i, r := range s.cfg.Local.DoMulti(ctx, cmds...) {
		v, err := r.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return out, fmt.Errorf("regions: clear counts: %w", err)
		}
		out[i] = v
	}
	return out, nil
}

// moving counts a clear or an expiry of key that begins or ends (see
// cseqKey).
func (s *Service) moving(ctx context.Context, key string) error {
	if err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Incr().Key(cseqKey(shardOf(key))).Build()).Error(); err != nil {
		return fmt.Errorf("regions: clear %q: %w", key, err)
	}
	return nil
}

// ownDeadlines reads the own deadlines of the counters of keys that have
// a deadline register, or get a deadline at their first write.
func (s *Service) ownDeadlines(ctx context.Context, keys []string, states []State, now time.Time) (map[string]store.Deadline, error) {
	if s.cfg.Deadlines == nil {
		return nil, nil
	}
	var ask []string
	for i, k := range keys {
		if states[i].Deadline.Set() && !states[i].Deadline.Passed(now) || s.cfg.Expiring != nil && s.cfg.Expiring(k) {
			ask = append(ask, k)
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	ds, err := s.cfg.Deadlines(ctx, ask)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.Deadline, len(ask))
	for i, k := range ask {
		if i < len(ds) {
			out[k] = ds[i]
		}
	}
	return out, nil
}

// setRegister merges d into key's register here and schedules its
// deadline.
func (s *Service) setRegister(ctx context.Context, key string, d Deadline) error {
	ms := int64(0)
	if !d.At.IsZero() {
		ms = d.At.UnixMilli()
	}
	res := round(ctx, s.cfg.Local, nil, []call{hcall(setDeadlineScript, key, strconv.FormatInt(ms, 10), strconv.FormatUint(d.Stamp, 10), "1", s.cfg.Region)})
	if err := res[0].Error(); err != nil {
		return err
	}
	s.drop(key)
	if ms == 0 {
		return nil
	}
	return s.schedule(ctx, key, ms, true)
}

// expire runs key's expiry here if its deadline passed (by the cache's
// clock), and reports whether it ran.
func (s *Service) expire(ctx context.Context, key string) bool {
	if s.moving(ctx, key) != nil {
		return false
	}
	res := round(ctx, s.cfg.Local, nil, []call{hcall(expireScript, key)})
	at, err := res[0].AsInt64()
	if err != nil || at == 0 {
		return false
	}
	s.ended(ctx, key, at)
	return true
}

// ownEpoch returns the epoch of origin's contribution among parts (0:
// none).
func ownEpoch(parts []durable.RegionPart, origin string) uint64 {
	for _, p := range parts {
		if p.Origin == origin && p.Kind == durable.PartContribution {
			return p.Epoch
		}
	}
	return 0
}

// resync gives peer l everything again, when its cache does not know this
// region (it is new, or lost its data): every counter whose own
// contribution the durable store holds goes into l's outbox.
func (s *Service) resync(ctx context.Context, l *link) error {
	if s.cfg.Durable != nil {
		after := ""
		for {
			page, err := s.cfg.Durable.ListRegionParts(ctx, s.cfg.Region, durable.PartContribution, after, s.cfg.Batch)
			if err != nil {
				return err
			}
			if len(page) == 0 {
				break
			}
			keys := make([]string, len(page))
			for i, p := range page {
				keys[i] = p.Key
			}
			if err := mark(ctx, s.cfg.Local, keys, func(shard int) []string { return []string{boxKey("out", shard, l.name)} }); err != nil {
				return err
			}
			after = page[len(page)-1].Key
		}
	}
	return l.client.Do(ctx, l.client.B().Set().Key(seenKey(s.cfg.Region)).Value(s.me).Build()).Error()
}

// inboxLoop keeps the parts peers shipped here in the durable store,
// schedules the collection of those of counters ended elsewhere, runs the
// deadline schedule and the collection, while this process holds the
// lease.
func (s *Service) inboxLoop() {
	defer s.wg.Done()
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	boxes := takeBoxes("in", "")
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		if s.token.Load() == 0 {
			continue
		}
		// A round that took a full batch from some shard is followed at
		// once by another, as shipping does.
		for r := 0; r < maxRounds; r++ {
			more, err := s.drainInbox(boxes)
			if err != nil || !more || s.stopping() {
				break
			}
		}
		_ = s.runDeadlines()
		_ = s.collect()
	}
}

// runDeadlines looks at the counters whose time on the deadline schedule
// came: a register set elsewhere becomes their own part's deadline here
// (and they are looked at again at the deadline), and a deadline that
// passed runs their expiry.
func (s *Service) runDeadlines() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	cmds := make(rueidis.Commands, Shards)
	for i := range cmds {
		cmds[i] = s.cfg.Local.B().Zrange().Key(dlKey(i)).Min("0").Max(strconv.FormatInt(now.UnixMilli(), 10)).
			Byscore().Limit(0, int64(s.cfg.Batch)).Withscores().Build()
	}
	type due struct {
		key   string
		score float64
	}
	var dues []due
	for i, r := range s.cfg.Local.DoMulti(ctx, cmds...) {
		zs, err := r.AsZScores()
		if err != nil {
			return fmt.Errorf("regions: deadlines %s: %w", dlKey(i), err)
		}
		for _, z := range zs {
			dues = append(dues, due{z.Member, z.Score})
		}
	}
	if len(dues) == 0 {
		return nil
	}
	keys := make([]string, len(dues))
	for i, d := range dues {
		keys[i] = d.key
	}
	hashes, err := readHashes(ctx, s.cfg.Local, keys)
	if err != nil {
		return err
	}
	states := make([]State, len(keys))
	for i, k := range keys {
		states[i], _ = Parse(k, hashes[i])
	}
	var own map[string]store.Deadline
	if s.cfg.Deadlines != nil {
		var ask []string
		for i, k := range keys {
			if states[i].Deadline.Set() && !states[i].Deadline.Passed(now) {
				ask = append(ask, k)
			}
		}
		if len(ask) > 0 {
			ds, err := s.cfg.Deadlines(ctx, ask)
			if err != nil {
				return err
			}
			own = make(map[string]store.Deadline, len(ask))
			for i, k := range ask {
				if i < len(ds) {
					own[k] = ds[i]
				}
			}
		}
	}
	done := make(map[int][]string)
	for i, k := range keys {
		d := states[i].Deadline
		switch {
		case !d.Set():
		case d.Passed(now):
			if !s.expire(ctx, k) {
				continue // not yet by the cache's clock: next round
			}
		default:
			if o, ok := own[k]; ok && o.Exists && o.At.UnixMilli() != d.At.UnixMilli() && (!o.At.IsZero() || !d.At.IsZero()) {
				if err := s.cfg.Expire(ctx, k, d.At); err != nil {
					continue // looked at again next round
				}
			}
			if !d.At.IsZero() {
				if err := s.schedule(ctx, k, d.At.UnixMilli(), false); err == nil {
					continue // looked at again at the deadline
				}
			}
		}
		sh := shardOf(k)
		done[sh] = append(done[sh], k, strconv.FormatFloat(dues[i].score, 'f', -1, 64))
	}
	return s.markDone(ctx, done, dlKey, "deadlines")
}

// markDone takes the (key, score) pairs of done, grouped by shard, off the
// schedules key(shard) (dlDoneScript: only an entry that still has that
// score goes); what names the step in an error.
func (s *Service) markDone(ctx context.Context, done map[int][]string, key func(int) string, what string) error {
	calls := make([]call, 0, len(done))
	for sh, args := range done {
		calls = append(calls, call{s: dlDoneScript, keys: []string{key(sh)}, args: args})
	}
	for _, r := range round(ctx, s.cfg.Local, nil, calls) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("regions: %s: %w", what, err)
		}
	}
	return nil
}

// drainInbox keeps one batch of what peers shipped here (the counters of
// the inbox boxes) in the durable store, and reports whether a box may
// hold more.
func (s *Service) drainInbox(boxes []string) (more bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	taken, err := take(ctx, s.cfg.Local, boxes, s.cfg.Batch)
	if err != nil {
		return false, err
	}
	var keys []string
	for _, b := range taken {
		keys = append(keys, b.keys...)
		more = more || b.full
	}
	if len(keys) == 0 {
		return false, nil
	}
	hashes, err := readHashes(ctx, s.cfg.Local, keys)
	if err != nil {
		return false, err
	}
	// A peer marks the inbox only once its records are here (see ship):
	// a counter without a hash was collected since.
	var parts []durable.RegionPart
	now := s.cfg.Clock.Now()
	for i, k := range keys {
		st, _ := Parse(k, hashes[i])
		if len(hashes[i]) > 0 && dead(st, s.cfg.Region, now) {
			// Cleared or expired where it was written: its records here
			// are collected after the retention unless it lives on here.
			_ = s.collectLater(ctx, k)
		}
		for _, p := range st.Parts {
			parts = append(parts, p)
		}
		for _, p := range st.Fences {
			parts = append(parts, p)
		}
	}
	if s.cfg.Durable != nil {
		if err := s.cfg.Durable.SaveRegionParts(ctx, parts); err != nil {
			return false, err
		}
	}
	return more, ack(ctx, s.cfg.Local, taken, func(string) bool { return true })
}

// checkAlive ships every counter of the region again when the region's
// cache does not hold aliveKey: it came back empty (its own epochs and the
// counters' totals are restored from the durable store meanwhile) or is
// new.
func (s *Service) checkAlive() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Get().Key(aliveKey).Build()).Error()
	if !rueidis.IsRedisNil(err) {
		return
	}
	if s.Resync(ctx) == nil {
		_ = s.cfg.Local.Do(ctx, s.cfg.Local.B().Set().Key(aliveKey).Value(s.me).Build()).Error()
	}
}

// forgetPeers takes the peers that this process's configuration does
// not name off the set of peers the region ships to (peersKey), once at
// its start: a peer left out of the configuration misses the marks of
// this process, and gets everything again (checkPeers) once a lease
// holder names it again.
func (s *Service) forgetPeers() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	had, err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Smembers().Key(peersKey).Build()).AsStrSlice()
	if err != nil {
		return
	}
	var gone []string
	for _, p := range had {
		if !slices.Contains(s.peers, p) {
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 {
		_ = s.cfg.Local.Do(ctx, s.cfg.Local.B().Srem().Key(peersKey).Member(gone...).Build()).Error()
	}
}

// checkPeers compares the peers of this lease holder's configuration
// with the set of peers the region ships to (peersKey). A peer missing
// there is new, or was left out of some process's configuration for a
// while (that process marked no outbox of it): every counter the durable
// store holds goes into its outbox, and it joins the set.
func (s *Service) checkPeers() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	had, err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Smembers().Key(peersKey).Build()).AsStrSlice()
	if err != nil {
		return
	}
	for _, p := range s.peers {
		if slices.Contains(had, p) {
			continue
		}
		out := func(shard int) []string { return []string{boxKey("out", shard, p)} }
		if s.markAll(ctx, out) == nil {
			_ = s.cfg.Local.Do(ctx, s.cfg.Local.B().Sadd().Key(peersKey).Member(p).Build()).Error()
		}
	}
}

// Resync puts every counter whose own contribution the durable store holds
// into every peer's outbox, so that each is shipped again with its
// current total: after the region's cache lost data and restored it. It
// also takes the peers' marks (seenKey) off this region's cache, so that
// every peer ships all its counters here again: a node that came back
// empty held some of their parts (the records in its bucket hashes) even
// when the marks, on another node, survived.
func (s *Service) Resync(ctx context.Context) error {
	if len(s.peers) == 0 {
		return nil
	}
	seen := make([]string, len(s.peers))
	for i, p := range s.peers {
		seen[i] = seenKey(p)
	}
	if err := s.cfg.Local.Do(ctx, s.cfg.Local.B().Del().Key(seen...).Build()).Error(); err != nil {
		return fmt.Errorf("regions: resync: %w", err)
	}
	return s.markAll(ctx, s.outboxes)
}

// markAll puts every counter of the region that the durable store holds
// anything of (Counters: a checkpoint, log events, a total; Durable: an
// own contribution) into the boxes that boxes names per shard.
func (s *Service) markAll(ctx context.Context, boxes func(shard int) []string) error {
	if s.cfg.Counters != nil {
		// The counters restored from the durable store, shipped or not.
		var markErr error
		err := s.cfg.Counters(ctx, func(keys []string) error {
			for len(keys) > 0 {
				n := min(len(keys), s.cfg.Batch)
				if markErr = mark(ctx, s.cfg.Local, keys[:n], boxes); markErr != nil {
					return markErr
				}
				keys = keys[n:]
			}
			return nil
		})
		if markErr != nil {
			return markErr
		}
		if err != nil {
			return fmt.Errorf("regions: resync: %w", err)
		}
	}
	if s.cfg.Durable == nil {
		return nil
	}
	after := ""
	for {
		page, err := s.cfg.Durable.ListRegionParts(ctx, s.cfg.Region, durable.PartContribution, after, s.cfg.Batch)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		keys := make([]string, len(page))
		for i, p := range page {
			keys[i] = p.Key
		}
		if err := mark(ctx, s.cfg.Local, keys, boxes); err != nil {
			return err
		}
		after = page[len(page)-1].Key
	}
}

// collect removes the region records of the counters whose time on the
// collection schedule came (Retention after they were cleared or expired
// here) and that are dead here: no own part, no deadline to come, and no
// peer's contribution that still counts. Their region hash goes (unless
// it changed since it was read) and so do their rows in the durable
// store. A counter that lives on is left alone; it is scheduled again at
// its next clear or expiry.
func (s *Service) collect() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.Timeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	cmds := make(rueidis.Commands, Shards)
	for i := range cmds {
		cmds[i] = s.cfg.Local.B().Zrange().Key(gcKey(i)).Min("0").Max(strconv.FormatInt(now.UnixMilli(), 10)).
			Byscore().Limit(0, int64(s.cfg.Batch)).Withscores().Build()
	}
	var keys []string
	var scores []float64
	for i, r := range s.cfg.Local.DoMulti(ctx, cmds...) {
		zs, err := r.AsZScores()
		if err != nil {
			return fmt.Errorf("regions: collect %s: %w", gcKey(i), err)
		}
		for _, z := range zs {
			keys, scores = append(keys, z.Member), append(scores, z.Score)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	hashes, err := readHashes(ctx, s.cfg.Local, keys)
	if err != nil {
		return err
	}
	alive := make([]bool, len(keys))
	if s.cfg.Deadlines != nil {
		ds, err := s.cfg.Deadlines(ctx, keys)
		if err != nil {
			return err
		}
		for i := range keys {
			alive[i] = i >= len(ds) || ds[i].Exists
		}
	} else {
		totals, err := s.cfg.Totals(ctx, keys)
		if err != nil {
			return err
		}
		for i, k := range keys {
			alive[i] = totals[k] != 0
		}
	}
	var calls []call
	var tried []string
	for i, k := range keys {
		st, bad := Parse(k, hashes[i])
		s.mu.Lock()
		_, marked := s.dirty[k]
		if !marked {
			_, marked = s.pushing[k]
		}
		s.mu.Unlock()
		if alive[i] || marked || bad != 0 || len(hashes[i]) == 0 || !dead(st, s.cfg.Region, now) {
			continue
		}
		args := make([]string, 0, 2*len(hashes[i]))
		for f, v := range hashes[i] {
			args = append(args, f, v)
		}
		calls = append(calls, hcall(collectScript, k, args...))
		tried = append(tried, k)
	}
	var gone []string
	for i, r := range round(ctx, s.cfg.Local, nil, calls) {
		if n, err := r.AsInt64(); err == nil && n == 1 {
			gone = append(gone, tried[i])
			s.drop(tried[i])
		}
	}
	if len(gone) > 0 {
		byShard := make(map[int][]string)
		for _, k := range gone {
			byShard[shardOf(k)] = append(byShard[shardOf(k)], k)
		}
		cmds := make(rueidis.Commands, 0, len(byShard))
		for sh, ks := range byShard {
			cmds = append(cmds, s.cfg.Local.B().Srem().Key(hasKey(sh)).Member(ks...).Build())
		}
		for _, r := range s.cfg.Local.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("regions: collect: %w", err)
			}
		}
	}
	if len(gone) > 0 && s.cfg.Durable != nil {
		if err := s.cfg.Durable.DeleteRegionParts(ctx, gone); err != nil {
			return err
		}
	}
	s.collected.Add(uint64(len(gone)))
	done := make(map[int][]string)
	for i, k := range keys {
		sh := shardOf(k)
		done[sh] = append(done[sh], k, strconv.FormatFloat(scores[i], 'f', -1, 64))
	}
	return s.markDone(ctx, done, gcKey, "collect")
}

// dead reports whether nothing in st counts toward the counter in region
// self at now, nor will: no deadline register still to pass, and every
// peer's contribution removed by its fence or ended by an expiry.
func dead(st State, self string, now time.Time) bool {
	if st.Deadline.Set() && !st.Deadline.At.IsZero() && !st.Deadline.Passed(now) {
		return false
	}
	if st.Deadline.Passed(now) {
		return false // its expiry has not run yet
	}
	for origin, p := range st.Parts {
		if origin == self {
			continue
		}
		f, ok := st.Fences[origin]
		if fenced(p.Value, p.Epoch, f, ok) != 0 {
			return false
		}
	}
	return true
}
