package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
	"github.com/hotcount/hotcount/store"
)

// Resize changes key's number of sub-counters to n: the automatic resize
// (hot counters growing, cool ones folding back). Growing adds placed
// labels (two steps, one TTL apart); shrinking folds the removed labels
// into the remaining ones and returns when the folds are complete, which
// takes at least TTL+Margin. A fold journaled earlier is finished first.
// A counter pinned by Pin is refused with ErrPinned.
func (m *Manager) Resize(ctx context.Context, key string, n int) error {
	return m.resize(ctx, key, n, false)
}

// Pin changes key's number of sub-counters to n as Resize does and pins
// it there (Meta.Pinned): Resize refuses the counter until Unpin. A
// counter without a record gets one, whatever n is.
func (m *Manager) Pin(ctx context.Context, key string, n int) error {
	return m.resize(ctx, key, n, true)
}

// Unpin lets automatic resizes change key again. A cold counter back at
// its one sub-counter loses its record, as an automatic fold leaves it.
func (m *Manager) Unpin(ctx context.Context, key string) error {
	if err := keyspace.Validate(key); err != nil {
		return err
	}
	if _, err := m.update(ctx, key, func(mt *Meta) error {
		if mt.Epoch == 0 || !mt.Pinned {
			return errNoChange
		}
		mt.Pinned = false
		return nil
	}); err != nil {
		return err
	}
	return m.dropCold(ctx, key)
}

// Pinned reports whether key's N is pinned, from the cached record when it
// is fresh.
func (m *Manager) Pinned(ctx context.Context, key string) (bool, error) {
	if v, ok := m.cache.Load(key); ok {
		e := v.(*entry)
		if age := m.cfg.Clock.Now().Sub(e.at); age >= 0 && age < m.cfg.TTL && !e.gone {
			return e.m.Pinned, nil
		}
	}
	mt, err := m.load(ctx, key, false)
	return mt.Pinned, err
}

func (m *Manager) resize(ctx context.Context, key string, n int, pin bool) error {
	if err := keyspace.Validate(key); err != nil {
		return err
	}
	if n < 1 || n > keyspace.MaxN {
		return fmt.Errorf("%w: %d (want 1..%d)", ErrInvalidN, n, keyspace.MaxN)
	}
	if pin {
		// Pinned first, so that no automatic resize starts meanwhile.
		if _, err := m.update(ctx, key, func(mt *Meta) error {
			if mt.Epoch > 0 && mt.Pinned {
				return errNoChange
			}
			mt.Pinned = true
			return nil
		}); err != nil {
			return err
		}
	}
	if err := m.Resume(ctx, key); err != nil {
		return err
	}
	cur, err := m.load(ctx, key, false)
	if err != nil {
		return err
	}
	if cur.Pinned && !pin {
		return fmt.Errorf("%w: %q", ErrPinned, key)
	}
	t, err := m.topology(ctx)
	if err != nil {
		return err
	}
	switch {
	case n > len(cur.Write):
		add := placement.Extend(t, key, cur.Write, n, nil)[len(cur.Write):]
		return m.grow(ctx, key, add)
	case n == 1 && !slices.Equal(cur.Write, coldSet):
		// Back to one sub-counter: always keyspace.ColdLabel, so that a
		// cold counter needs no record.
		if !slices.Contains(cur.Write, keyspace.ColdLabel) {
			if err := m.grow(ctx, key, coldSet); err != nil {
				return err
			}
			if cur, err = m.load(ctx, key, false); err != nil {
				return err
			}
		}
		removed := minus(cur.Write, coldSet)
		into := make([]string, len(removed))
		for i := range into {
			into[i] = keyspace.ColdLabel
		}
		if err := m.fold(ctx, key, removed, into); err != nil {
			return err
		}
		return m.dropCold(ctx, key)
	case n < len(cur.Write):
		keep := placement.Keep(t, key, cur.Write, n)
		removed := minus(cur.Write, keep)
		into := make([]string, len(removed))
		for i := range removed {
			into[i] = keep[i%len(keep)]
		}
		return m.fold(ctx, key, removed, into)
	case n == 1:
		return m.dropCold(ctx, key)
	}
	return nil
}

// dropCold deletes the record of a cold counter whose labels are back to
// keyspace.ColdLabel alone (the record then says what having none says),
// in the cache and in the durable store.
func (m *Manager) dropCold(ctx context.Context, key string) error {
	if !m.cold(key) {
		return nil
	}
	tried := false // dropRecord deleted the durable copy
	for range casAttempts {
		cur, found, err := m.fetch(ctx, key)
		if err != nil {
			return err
		}
		if !found || cur.Pinned || !slices.Equal(cur.Write, coldSet) || !slices.Equal(cur.Read, coldSet) || len(cur.Folds) > 0 {
			if found && tried {
				// Changed meanwhile and kept: its durable copy again.
				return m.mirror(ctx, key, cur)
			}
			return nil
		}
		tried = true
		ok, err := m.dropRecord(ctx, key, cur.Epoch, cur.Gen)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		m.cfg.OnStep(key, StepDropped)
		return nil
	}
	return fmt.Errorf("%w: dropping the record of %q", ErrConflict, key)
}

// grow adds labels to the read set, waits one TTL, and adds them to the
// write set.
func (m *Manager) grow(ctx context.Context, key string, add []string) error {
	if len(add) == 0 {
		return nil
	}
	if _, err := m.update(ctx, key, func(mt *Meta) error {
		if len(minus(add, mt.Read)) == 0 {
			return errNoChange
		}
		mt.Read = union(mt.Read, add)
		return nil
	}); err != nil {
		return err
	}
	m.cfg.OnStep(key, StepGrowRead)
	if err := clock.Sleep(ctx, m.cfg.Clock, m.cfg.TTL); err != nil {
		return err
	}
	if _, err := m.update(ctx, key, func(mt *Meta) error {
		if missing := minus(add, mt.Read); len(missing) > 0 {
			return fmt.Errorf("%w: labels %v left the read set while growing", ErrConflict, missing)
		}
		if len(minus(add, mt.Write)) == 0 {
			return errNoChange
		}
		mt.Write = union(mt.Write, add)
		return nil
	}); err != nil {
		return err
	}
	m.cfg.OnStep(key, StepGrowWrite)
	return nil
}

// fold stops writing each from[i], journals a fold of it into into[i], and
// runs the journal to completion.
func (m *Manager) fold(ctx context.Context, key string, from, into []string) error {
	if len(from) == 0 {
		return nil
	}
	if _, err := m.update(ctx, key, func(mt *Meta) error {
		if len(mt.Folds) > 0 {
			return fmt.Errorf("%w: another fold of %q started", ErrConflict, key)
		}
		for i, a := range from {
			if !slices.Contains(mt.Write, a) || !slices.Contains(mt.Write, into[i]) || slices.Contains(from, into[i]) {
				return fmt.Errorf("%w: write set of %q changed to %v", ErrConflict, key, mt.Write)
			}
		}
		mt.Write = minus(mt.Write, from)
		for i, a := range from {
			mt.Folds = append(mt.Folds, FoldState{
				ID:   fmt.Sprintf("%d-%016x", mt.Epoch+1, m.cfg.Rand()),
				From: a, To: into[i], Step: FoldStopped,
			})
		}
		return nil
	}); err != nil {
		return err
	}
	m.cfg.OnStep(key, StepStopped)
	return m.Resume(ctx, key)
}

// Resume finishes every fold journaled for key: it waits out the TTL for
// folds still in the "stopped" step, runs the fold-out/fold-in rounds
// (replaying a round whose markers exist changes nothing) and retires the
// folded labels. With nothing journaled it returns nil at once.
func (m *Manager) Resume(ctx context.Context, key string) error {
	if err := keyspace.Validate(key); err != nil {
		return err
	}
	for range casAttempts {
		cur, err := m.load(ctx, key, false)
		if err != nil {
			return err
		}
		if len(cur.Folds) == 0 {
			return nil
		}
		var stopped []string
		for _, f := range cur.Folds {
			if f.Step == FoldStopped {
				stopped = append(stopped, f.ID)
			}
		}
		if len(stopped) > 0 {
			if err := clock.Sleep(ctx, m.cfg.Clock, m.cfg.TTL+m.cfg.Margin); err != nil {
				return err
			}
			if _, err := m.update(ctx, key, func(mt *Meta) error {
				changed := false
				for i := range mt.Folds {
					if mt.Folds[i].Step == FoldStopped && slices.Contains(stopped, mt.Folds[i].ID) {
						mt.Folds[i].Step = FoldMoving
						changed = true
					}
				}
				if !changed {
					return errNoChange
				}
				return nil
			}); err != nil {
				return err
			}
			m.cfg.OnStep(key, StepWaited)
			continue // reload: the journal may have changed meanwhile
		}
		var done []string
		for _, f := range cur.Folds {
			if err := m.drain(ctx, key, f, cur.Gen, cur.Deadline); errors.Is(err, errFoldOver) {
				return nil
			} else if err != nil {
				return err
			}
			done = append(done, f.ID)
		}
		if _, err := m.update(ctx, key, func(mt *Meta) error {
			var keep []FoldState
			var retired []string
			for _, f := range mt.Folds {
				if slices.Contains(done, f.ID) {
					retired = append(retired, f.From)
				} else {
					keep = append(keep, f)
				}
			}
			if len(retired) == 0 {
				return errNoChange
			}
			mt.Folds = keep
			mt.Read = minus(mt.Read, minus(retired, mt.Write))
			return nil
		}); err != nil {
			return err
		}
		m.cfg.OnStep(key, StepRetired)
	}
	return fmt.Errorf("%w: journal of %q", ErrConflict, key)
}

// drain moves f.From's value into f.To in rounds until f.From reads zero.
// It starts at the journaled round (replaying it changes nothing if it had
// finished) and journals each further round before running it. deadline
// is the counter's (Unix ms, 0 none): f.To takes it, plus
// store.DeadlineGrace, if the fold creates it.
func (m *Manager) drain(ctx context.Context, key string, f FoldState, gen string, deadline int64) error {
	var expireAt time.Time
	if deadline != 0 {
		expireAt = time.UnixMilli(deadline).Add(store.DeadlineGrace)
	}
	sub := []string{keyspace.SubKey(key, f.From)}
	round := max(f.Round, 1)
	for tries := 1; ; tries++ {
		id := RoundID(f.ID, round)
		v, err := m.b.FoldOut(ctx, key, f.From, id)
		if err != nil {
			return fmt.Errorf("meta: fold %s of %q out of %q: %w", id, key, f.From, err)
		}
		m.cfg.OnStep(key, StepOut)
		if err := m.stillFolding(ctx, key, f.ID, gen); err != nil {
			return err
		}
		if _, err := m.b.FoldIn(ctx, key, f.To, id, v, expireAt); err != nil {
			return fmt.Errorf("meta: fold %s of %q into %q: %w", id, key, f.To, err)
		}
		m.cfg.OnStep(key, StepIn)
		left, err := m.b.Get(ctx, sub)
		if err != nil {
			return fmt.Errorf("meta: fold %s of %q: %w", id, key, err)
		}
		if left[0] == 0 {
			return nil
		}
		if tries == m.cfg.MaxRounds {
			return fmt.Errorf("%w: %q of %q after %d rounds", ErrStragglers, f.From, key, tries)
		}
		round++
		if _, err := m.update(ctx, key, func(mt *Meta) error {
			for i := range mt.Folds {
				if mt.Folds[i].ID == f.ID {
					mt.Folds[i].Round = max(mt.Folds[i].Round, round)
					return nil
				}
			}
			return fmt.Errorf("%w: fold %s of %q left the journal", ErrConflict, f.ID, key)
		}); err != nil {
			return err
		}
	}
}

// errFoldOver: the record a fold ran in is gone, so there is nothing left
// to move the value into; Resume takes the fold as over.
var errFoldOver = errors.New("meta: the folded counter's record is gone")

// RoundID is the marker id of a fold's round: id for round 1, id+".2" for
// round 2, and so on.
func RoundID(id string, round int) string {
	if round <= 1 {
		return id
	}
	return id + "." + strconv.Itoa(round)
}

// stillFolding checks, before a fold moves a value in, that key's record
// is the one the fold started in and has not passed its deadline: a
// counter cleared or expired while it was being folded must not have the
// moved value land in the counter that starts after it. A fold that left
// the journal of the same record was finished by a concurrent Resume; the
// move goes on then, since a round it journaled after that Resume's last
// one may hold a straggler's value, and a replayed round changes nothing.
func (m *Manager) stillFolding(ctx context.Context, key, foldID, gen string) error {
	cur, found, err := m.fetch(ctx, key)
	if err != nil {
		return err
	}
	if !found {
		// Gone: cleared, expired and removed, or folded to one label and
		// made cold by the Resume that finished this fold.
		return errFoldOver
	}
	if cur.Deadline == 0 || m.cfg.Clock.Now().Before(time.UnixMilli(cur.Deadline)) {
		if cur.Gen == gen && gen != "" {
			return nil
		}
		for _, f := range cur.Folds {
			if f.ID == foldID {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %q was cleared or expired while being folded", ErrConflict, key)
}
