package bench

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Run calibrates (when Config.Calibrate is set), drives the configured
// runs and reports what each achieved. A run whose total is not exact is
// reported (Run.Exact false), not failed. When ctx ends, the round in
// progress is cut short, drained and checked, and Run returns the report
// so far with ctx's error. Errors from the cache wrap
// store.ErrUnavailable; a bad Config wraps ErrConfig.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	s, err := cfg.validate(time.Now())
	if err != nil {
		return nil, err
	}
	b, err := openBackend(ctx, redisConfig(s.Redis, s.Login))
	if err != nil {
		return nil, err
	}
	defer b.close()
	rep := &Report{Backend: b.kind(), Rounds: s.Rounds}
	if s.Calibrate > 0 {
		cal, err := calibrate(ctx, &s, b)
		rep.Calibration = cal
		if err != nil {
			return rep, fmt.Errorf("bench: %w", err)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if s.RateCeilings > 0 {
			s.Rate = math.Round(s.RateCeilings * cal.IncrPerSec)
		}
	}
	rep.OfferedPerSec = s.Rate
	byRun := make(map[variant][]*round, len(s.variants))
	steps := s.Rounds * len(s.variants)
	step := 0
	var runErr error
rounds:
	for r := range s.Rounds {
		for _, v := range s.variants {
			step++
			var base int64
			if rs := byRun[v]; len(rs) > 0 {
				base = rs[len(rs)-1].total
			}
			res, err := runRound(ctx, &s, b, v, base, step, steps)
			if err != nil {
				runErr = fmt.Errorf("bench: %s round %d: %w", s.label(v), r+1, err)
				break rounds
			}
			byRun[v] = append(byRun[v], res)
			rep.Primaries = res.primaries
			if ctx.Err() != nil {
				runErr = ctx.Err()
				break rounds
			}
		}
	}
	var ran []variant
	for _, v := range s.variants {
		if rs := byRun[v]; len(rs) > 0 {
			rep.Runs = append(rep.Runs, aggregate(&s, v, rs, rep.Calibration))
			ran = append(ran, v)
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
