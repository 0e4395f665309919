package bench

import (
	"context"
	"fmt"
	"time"
)

// Run drives the configured modes and reports what each achieved. A run
// whose total is not exact is reported (Run.Exact false), not failed. When
// ctx ends, the round in progress is cut short, drained and checked, and
// Run returns the report so far with ctx's error. Errors from the cache
// wrap store.ErrUnavailable; a bad Config wraps ErrConfig.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	s, err := cfg.validate(time.Now())
	if err != nil {
		return nil, err
	}
	b, err := openBackend(ctx, s.Redis)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rep := &Report{Backend: b.kind(), Rounds: s.Rounds}
	byMode := make(map[Mode][]*round, len(s.Modes))
	steps := s.Rounds * len(s.Modes)
	step := 0
	var runErr error
rounds:
	for r := range s.Rounds {
		for _, m := range s.Modes {
			step++
			var base int64
			if rs := byMode[m]; len(rs) > 0 {
				base = rs[len(rs)-1].total
			}
			res, err := runRound(ctx, &s, b, m, base, step, steps)
			if err != nil {
				runErr = fmt.Errorf("bench: %s round %d: %w", m, r+1, err)
				break rounds
			}
			byMode[m] = append(byMode[m], res)
			rep.Primaries = res.primaries
			if ctx.Err() != nil {
				runErr = ctx.Err()
				break rounds
			}
		}
	}
	var ran []Mode
	for _, m := range s.Modes {
		if rs := byMode[m]; len(rs) > 0 {
			rep.Runs = append(rep.Runs, aggregate(&s, m, rs))
			ran = append(ran, m)
		}
	}
	if !s.Keep {
		if err := clearKeys(&s, b, ran); err != nil && runErr == nil {
			runErr = fmt.Errorf("bench: clearing the keys: %w", err)
		}
	}
	rep.RatioBase, rep.Ratios = ratios(rep.Runs)
	return rep, runErr
}
