package durability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
)

// ErrModeChanged: the durable store holds counters written in the other
// durability mode than the one their settings now give them. Neither mode
// can take over the other's counters: the healer would take a fast-mode
// value for a view error and subtract it (the log does not have it), and a
// durable-mode counter in fast mode has no checkpoint until it is written
// again, so a node lost before that loses it.
var ErrModeChanged = errors.New("counters were written in another durability mode")

// modeListed is how many counters of one namespace a mode error names.
const modeListed = 3

// modesKey names the metadata record of the durability modes the settings
// gave the counters at the last start whose check passed. The braces keep
// it apart from every counter key.
const modesKey = "hotcount:{modes}"

// modesRecord writes the settings' durability modes as one canonical text:
// the defaults' mode, then every namespace's prefix and mode, sorted by
// prefix. Two settings with the same text give every key the same mode
// (the longest prefix wins); settings that differ in anything else (N,
// buffering, intervals) have the same text.
func modesRecord(t *ns.Table) []byte {
	mode := func(m ns.Mode) ns.Mode {
		if m != ns.ModeDurable {
			return ns.ModeFast
		}
		return m
	}
	var b strings.Builder
	fmt.Fprintf(&b, "modes 1\n*\t%s\n", mode(t.Defaults().Mode))
	list := slices.Clone(t.Namespaces())
	slices.SortFunc(list, func(x, y ns.Namespace) int { return strings.Compare(x.Prefix, y.Prefix) })
	for _, n := range list {
		fmt.Fprintf(&b, "%s\t%s\n", n.Prefix, mode(n.Mode))
	}
	return []byte(b.String())
}

// checkModes runs scanModes when the settings' modes differ from those of
// the last start whose check passed (the record under modesKey), and then
// records them. A start with the same modes reads one record and lists
// nothing: every counter written since was written in these modes by
// processes that started with them, or by one that skipped the check and
// removed the record (see ForgetModes).
func (d *Service) checkModes(ctx context.Context) error {
	rec := modesRecord(d.ns)
	lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	old, err := d.be.LoadMeta(lctx, modesKey)
	cancel()
	switch {
	case err == nil && bytes.Equal(old, rec):
		return nil
	case err != nil && !errors.Is(err, durable.ErrNotFound):
		return fmt.Errorf("mode check: %w", err)
	}
	if err := d.scanModes(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	if err := d.be.SaveMeta(sctx, modesKey, rec); err != nil {
		return fmt.Errorf("mode check: record the modes: %w", err)
	}
	return nil
}

// ForgetModes is for a start that skips the checks (NoStartupRepair): when
// its settings' modes differ from the recorded ones it removes the record,
// so that the next start that checks lists the store again, since this
// process may write counters in its own modes.
func (d *Service) ForgetModes(ctx context.Context) error {
	rec := modesRecord(d.ns)
	lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	old, err := d.be.LoadMeta(lctx, modesKey)
	switch {
	case errors.Is(err, durable.ErrNotFound) || (err == nil && bytes.Equal(old, rec)):
		return nil
	case err != nil:
		return fmt.Errorf("mode record: %w", err)
	}
	if err := d.be.DeleteMeta(lctx, modesKey); err != nil {
		return fmt.Errorf("mode record: %w", err)
	}
	return nil
}

// scanModes refuses a configuration under which counters the durable
// store holds change mode: fast-mode checkpoints (with a non-zero sum) of
// a counter now in durable mode, or log events or a rolled-up total of a
// counter now in fast mode. A counter cleared has neither, and one whose
// recorded deadline has passed is gone: either may change mode. A fast-mode
// counter never checkpointed (written only without a durable store, or
// only since the last checkpoint) cannot be seen here. The store is read a
// page at a time (listPage); only the counters found are held.
func (d *Service) scanModes(ctx context.Context) error {
	defs := d.ns.Defaults()
	// The prefixes to list: every key when the defaults are in the mode
	// looked for, else the namespaces in it (an overlap is listed twice
	// and counted once).
	prefixes := func(m ns.Mode) []string {
		if defs.Mode == m {
			return []string{""}
		}
		var out []string
		for _, n := range d.ns.Namespaces() {
			if n.Mode == m {
				out = append(out, n.Prefix)
			}
		}
		return out
	}
	wasFast := map[string]int64{} // sub-key → checkpoint of a counter now durable
	for _, p := range prefixes(ns.ModeDurable) {
		err := d.checkpointPages(ctx, "{"+p, func(cps []durable.Checkpoint) error {
			for _, cp := range cps {
				if key, _, ok := keyspace.ParseSubKey(cp.Key); ok && d.ns.Lookup(key).Mode == ns.ModeDurable {
					wasFast[cp.Key] = cp.Total
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("mode check: %w", err)
		}
	}
	sums := map[string]int64{}
	for sub, v := range wasFast {
		key, _, _ := keyspace.ParseSubKey(sub)
		sums[key] += v
	}
	wasDurable := map[string]bool{}
	for _, p := range prefixes(ns.ModeFast) {
		err := d.keyPages(ctx, p, func(keys []string) error {
			for _, k := range keys {
				if keyspace.Validate(k) == nil && d.ns.Lookup(k).Mode != ns.ModeDurable {
					wasDurable[k] = true
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("mode check: %w", err)
		}
	}
	var found []string
	for k, v := range sums {
		if v != 0 {
			found = append(found, k)
		}
	}
	for k := range wasDurable {
		found = append(found, k)
	}
	if len(found) == 0 {
		return nil
	}
	// A counter whose recorded deadline has passed is gone: what it left
	// waits for the clean-up pass, and the key may start again in any mode.
	dls, err := d.loadDeadlines(ctx, found)
	if err != nil {
		return fmt.Errorf("mode check: %w", err)
	}
	now := d.cfg.Clock.Now()
	found = slices.DeleteFunc(found, func(k string) bool {
		at, ok := dls[k]
		return ok && !at.After(now)
	})
	// Group the counters by the setting that gives them their mode.
	type group struct {
		n    *ns.Namespace
		keys []string
	}
	var groups []*group
	byNS := map[*ns.Namespace]*group{}
	add := func(key string) {
		n := d.ns.Lookup(key)
		g := byNS[n]
		if g == nil {
			g = &group{n: n}
			byNS[n] = g
			groups = append(groups, g)
		}
		g.keys = append(g.keys, key)
	}
	for _, k := range found {
		add(k)
	}
	if len(groups) == 0 {
		return nil
	}
	slices.SortFunc(groups, func(a, b *group) int { return strings.Compare(a.n.Prefix, b.n.Prefix) })
	var msgs []string
	for _, g := range groups {
		slices.Sort(g.keys)
		setting := "mode (keys no namespace names)"
		if g.n != defs {
			setting = fmt.Sprintf("mode of namespace %q", g.n.Prefix)
		}
		held := "fast-mode checkpoints of"
		if g.n.Mode != ns.ModeDurable {
			held = "the event log of"
		}
		names := strings.Join(g.keys[:min(len(g.keys), modeListed)], ", ")
		if len(g.keys) > modeListed {
			names += fmt.Sprintf(" and %d more", len(g.keys)-modeListed)
		}
		msgs = append(msgs, fmt.Sprintf("%s is %s, but the durable store holds %s %d of its counters (%s)",
			setting, g.n.Mode, held, len(g.keys), names))
	}
	return fmt.Errorf("%w: %s; a counter keeps the mode it was written in: set its mode back, or clear it first (see docs/concepts.md, changing a mode)",
		ErrModeChanged, strings.Join(msgs, "; "))
}
