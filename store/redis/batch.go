package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// batch describes n commands of one kind, one key each (plus, for scripts,
// keys in the same slot).
type batch struct {
	n   int
	key func(i int) string
	// build makes command i; resend is true when it is sent again after a
	// redirect or NOSCRIPT.
	build func(b rueidis.Builder, i int, resend bool) rueidis.Completed
	// readonly commands may be resent after rueidis.ErrClosing.
	readonly bool
}

// run sends the batch, one round per node, resends what must be resent, and
// returns one raw result per command.
func (s *Store) run(ctx context.Context, b batch) ([]rueidis.RedisResult, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	res := make([]rueidis.RedisResult, b.n)
	if b.n == 0 {
		return res, nil
	}
	st := s.state.Load()
	s.send(ctx, st, s.group(st.topo, b, nil), b, res, false)

	var again []int
	moved, connErr := false, false
	var seen uint64
	for i := range res {
		switch s.classify(res[i].Error(), b.readonly) {
		case actMoved:
			if !moved {
				seen = s.refreshStarted.Load()
				moved = true
			}
			again = append(again, i)
		case actResend:
			again = append(again, i)
		case actResendConn:
			again = append(again, i)
			connErr = true
		case actConnErr:
			connErr = true
		}
	}
	if connErr {
		s.kickRefresh()
	}
	if len(again) > 0 && !s.closed.Load() {
		if moved {
			_ = s.refresh(ctx, seen, true) // on failure the cluster client still follows the redirect
		}
		st = s.state.Load()
		s.send(ctx, st, s.group(st.topo, b, again), b, res, true)
	}
	return res, nil
}

// group returns, for each node of t, the indexes of the commands it owns;
// only the indexes in subset when subset is not nil.
func (s *Store) group(t *store.Topology, b batch, subset []int) [][]int {
	groups := make([][]int, len(t.Nodes))
	add := func(i int) {
		n := t.Owner[keyspace.Slot(b.key(i))]
		groups[n] = append(groups[n], i)
	}
	if subset != nil {
		for _, i := range subset {
			add(i)
		}
	} else {
		for i := range b.n {
			add(i)
		}
	}
	return groups
}

// send runs one round per non-empty group, concurrently, at most
// MaxConcurrency at a time, and stores each result at its index.
func (s *Store) send(ctx context.Context, st *state, groups [][]int, b batch, res []rueidis.RedisResult, resend bool) {
	busy := 0
	last := -1
	for n, g := range groups {
		if len(g) > 0 {
			busy++
			last = n
		}
	}
	if busy == 1 {
		s.round(ctx, st, last, groups[last], b, res, resend)
		return
	}
	sem := make(chan struct{}, s.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	for n, g := range groups {
		if len(g) == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.round(ctx, st, n, g, b, res, resend)
		})
	}
	wg.Wait()
}

// round sends the commands idx to node n as one pipeline with its own
// timeout. Resends go through the cluster client, which follows MOVED and
// ASK itself.
func (s *Store) round(ctx context.Context, st *state, n int, idx []int, b batch, res []rueidis.RedisResult, resend bool) {
	c := st.clients[n]
	if c == nil || resend {
		c = s.client
	}
	rctx, cancel := s.roundCtx(ctx)
	if cancel != nil {
		defer cancel()
	}
	st.counters[n].count(len(idx), resend)
	bld := c.B()
	if len(idx) == 1 {
		res[idx[0]] = c.Do(rctx, b.build(bld, idx[0], resend))
		return
	}
	cmds := make(rueidis.Commands, len(idx))
	for j, i := range idx {
		cmds[j] = b.build(bld, i, resend)
	}
	for j, r := range c.DoMulti(rctx, cmds...) {
		res[idx[j]] = r
	}
}

type action int

const (
	actDone       action = iota // final: success or an error to report
	actMoved                    // the slot moved: refresh, then resend
	actResend                   // resend (TRYAGAIN, NOSCRIPT)
	actResendConn               // connection closed before a read was answered: resend
	actConnErr                  // outcome unknown: report, refresh in the background
)

func (s *Store) classify(err error, readonly bool) action {
	if err == nil || rueidis.IsRedisNil(err) {
		return actDone
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		if _, moved := re.IsMoved(); moved {
			return actMoved
		}
		if _, ask := re.IsAsk(); ask {
			return actMoved
		}
		if re.IsTryAgain() || re.IsNoScript() {
			return actResend
		}
		return actDone
	}
	if s.closed.Load() {
		return actDone
	}
	if readonly && errors.Is(err, rueidis.ErrClosing) {
		return actResendConn
	}
	return actConnErr
}

// mapErr turns a command error into the store's named errors.
func (s *Store) mapErr(err error) error {
	if err == nil {
		return nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		switch {
		case strings.Contains(msg, "overflow"):
			return fmt.Errorf("%w (%s)", store.ErrOverflow, msg)
		case strings.Contains(msg, "not an integer"), strings.HasPrefix(msg, "WRONGTYPE"):
			return fmt.Errorf("%w (%s)", store.ErrNotInteger, msg)
		}
		for _, p := range transient {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: %s", store.ErrUnavailable, msg)
			}
		}
		return fmt.Errorf("store/redis: %s", msg)
	}
	if s.closed.Load() && errors.Is(err, rueidis.ErrClosing) {
		return store.ErrClosed
	}
	if errors.As(err, new(notSentError)) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err) // never written
	}
	// A timeout or a lost connection: the command may have run.
	return fmt.Errorf("%w: %w: %w", store.ErrUnavailable, store.ErrNoReply, err)
}

// transient are prefixes of server errors that mean "try again later".
var transient = []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "BUSY", "OOM", "NOSCRIPT"}
