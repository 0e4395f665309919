// Package bench is the load tool behind `hotcount bench`: it drives one hot
// counter from many independent client instances and measures what the
// cache receives.
//
// # A run
//
// A run drives one mode for a while:
//
//  1. Procs instances are opened, each its own hotcount.Client with its own
//     connections and, in the buffered modes, its own buffer, as Procs
//     application processes would have. All use the same seeds. With no
//     Redis seeds they share one embedded store (store/mem), standing in
//     for the cache that separate processes would share.
//  2. The write-command counters of every primary are read (INFO
//     commandstats on Redis, Stats on the embedded store).
//  3. For Duration, each instance's Workers goroutines increment a fresh key
//     (the Config's key with the mode and a run id appended, cleared first,
//     so totals are checkable) at Rate/Procs increments per second each instance, or as
//     fast as they can when Rate is 0. Each worker wakes at most once a
//     pacing tick (10 ms) and issues every increment that has become due
//     since, so a paced run costs few timer wake-ups and a worker that fell
//     behind catches up. Meanwhile a sampler reads the counter every
//     ReadEvery three ways: the summed read with the read cache, the summed
//     read without it, and the N sub-keys fetched one GET at a time (the raw
//     cost an application would pay without grouping by node).
//  4. The write counters are read again (the window's writes), every
//     instance is closed (Close drains buffered deltas), the counters are
//     read a third time (the drain's writes), and the total is read back
//     with an uncached client. The run is exact when that total grew by
//     the number of acknowledged increments (each adds 1).
//  5. After the last round the keys and their metadata records are
//     deleted unless Keep is set.
//
// Modes map to client settings: single is N=1 unbuffered (the plain hot
// key on one node); sharded is N sub-counters, unbuffered; buffered is N=1
// with buffered deltas; combined is N sub-counters with buffered deltas.
//
// # Counting cache writes
//
// A cache write is one INCRBY, EVALSHA or EVAL command received by a
// primary. The call counts are read before and after, subtracted, and then
// turned into writes. Redis counts the commands a script runs in
// commandstats too, so the INCRBY each flush script runs is subtracted:
// writes = eval + evalsha + max(0, incrby - eval - evalsha). A script run
// that does no INCRBY (a retried flush whose token was already used, or an
// EVALSHA answered NOSCRIPT and resent as EVAL) can hide a plain INCRBY in
// that formula, but a run never mixes plain and scripted increments. The
// embedded store counts token increments as evalsha only, so there writes
// are the plain sum. Every client of the cluster is counted, not only this
// tool's, so other traffic on the same cluster during a run inflates the
// figures: benchmark on a cluster of its own.
//
// # Comparing
//
// With several modes the modes run alternately, in Rounds rounds of
// Duration/Rounds each (single, sharded, buffered, combined, single, ...),
// so slow drift of the machine affects them alike. A mode writes the same
// key in every round, so its writes land on the same nodes each time; its
// rounds are summed into one Result. Ratios compare each mode with single (or the first
// mode when single is not among them).
package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// Mode is a way of writing the hot counter.
type Mode string

// The modes.
const (
	// Single writes one key (N=1), unbuffered: the plain hot key.
	Single Mode = "single"
	// Sharded writes N sub-counters, unbuffered.
	Sharded Mode = "sharded"
	// Buffered buffers deltas per instance and flushes one key (N=1).
	Buffered Mode = "buffered"
	// Combined buffers deltas and flushes to N sub-counters.
	Combined Mode = "combined"
)

// Modes lists every mode in the order --compare runs them.
var Modes = []Mode{Single, Sharded, Buffered, Combined}

// Defaults used for zero Config fields.
const (
	// DefaultN is the sub-counter count of sharded and combined: two per
	// primary of a 3-primary cluster.
	DefaultN = 6
	// DefaultProcs is the number of client instances.
	DefaultProcs = 100
	// DefaultDuration is how long each mode is driven.
	DefaultDuration = 10 * time.Second
	// DefaultFlush is the flush interval of the buffered modes.
	DefaultFlush = 500 * time.Millisecond
	// DefaultCompareRounds is the number of rounds when several modes run.
	DefaultCompareRounds = 3
	// DefaultWorkers is the number of goroutines per instance in the
	// unbuffered modes (the buffered ones use one: an Incr there does not
	// wait on the network).
	DefaultWorkers = 4
	// DefaultReadEvery is the period of the read-latency sampler.
	DefaultReadEvery = 20 * time.Millisecond
	// MaxProcs bounds Procs.
	MaxProcs = 10_000
	// MaxWorkers bounds Workers.
	MaxWorkers = 256
	// minSegment is the shortest load window of one round.
	minSegment = 100 * time.Millisecond
	// pacingTick is the longest a paced worker sleeps between checks.
	pacingTick = 10 * time.Millisecond
)

// ErrConfig is wrapped by Run for an invalid Config.
var ErrConfig = errors.New("bench: invalid config")

// ErrNotExact is not returned by Run (a run that is not exact is reported,
// not failed); callers use it to signal that outcome.
var ErrNotExact = errors.New("bench: total read back differs from acknowledged increments")

// Config configures Run. The zero value of every field but Key is a
// documented default.
type Config struct {
	// Redis lists seed addresses; empty means one embedded store shared by
	// all instances (its simulated nodes are counted instead of primaries).
	Redis []string
	// Key is the counter key; each mode writes Key + ":" + mode + ":" +
	// RunID, the same key in all its rounds. Required.
	Key string
	// Modes to run; empty means Combined. With several, they alternate.
	Modes []Mode
	// N is the sub-counter count of sharded and combined; 0 means
	// DefaultN. Single and buffered always use 1.
	N int
	// Procs is the number of client instances; 0 means DefaultProcs.
	Procs int
	// Rate is the total increments per second over all instances; 0 means
	// as fast as they can.
	Rate float64
	// Duration is how long each mode is driven (split over the rounds); 0
	// means DefaultDuration.
	Duration time.Duration
	// Flush is the flush interval of the buffered modes; 0 means
	// DefaultFlush.
	Flush time.Duration
	// Rounds is how many rounds the modes alternate in; 0 means 1 for one
	// mode and DefaultCompareRounds for several.
	Rounds int
	// Workers is the number of goroutines per instance; 0 means
	// DefaultWorkers for unbuffered modes and 1 for buffered ones.
	Workers int
	// ReadEvery is the read sampler's period; 0 means DefaultReadEvery.
	ReadEvery time.Duration
	// RunID distinguishes this invocation's keys; "" means one derived
	// from the clock.
	RunID string
	// NaiveLabels gives the counters the labels "0".."N-1" instead of
	// labels placed on distinct primaries (see hotcount.Config).
	NaiveLabels bool
	// Keep leaves the benchmark keys in the cache instead of clearing them.
	Keep bool
	// Progress, when set, is called about four times a second during each
	// load window, from one goroutine.
	Progress func(Progress)
}

// Progress describes a load window in progress.
type Progress struct {
	// Mode is the mode being driven.
	Mode Mode
	// Step counts load windows from 1 to Steps (modes × rounds).
	Step, Steps int
	// Elapsed and Window are the time spent and the length of this window.
	Elapsed, Window time.Duration
	// Sent is the acknowledged increments of this window so far.
	Sent int64
}

// settings is a validated copy of Config with defaults applied.
type settings struct {
	Config
	segment time.Duration // load window of one round
}

// ParseModes parses a comma-separated list of modes.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	seen := map[Mode]bool{}
	for _, f := range strings.Split(s, ",") {
		m := Mode(strings.TrimSpace(f))
		if m == "" {
			continue
		}
		if !m.valid() {
			return nil, fmt.Errorf("%w: unknown mode %q (want single, sharded, buffered or combined)", ErrConfig, m)
		}
		if seen[m] {
			return nil, fmt.Errorf("%w: mode %q listed twice", ErrConfig, m)
		}
		seen[m] = true
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no mode given", ErrConfig)
	}
	return out, nil
}

func (m Mode) valid() bool {
	switch m {
	case Single, Sharded, Buffered, Combined:
		return true
	}
	return false
}

// buffered reports whether the mode buffers deltas.
func (m Mode) buffered() bool { return m == Buffered || m == Combined }

// n returns the sub-counter count of the mode.
func (m Mode) n(n int) int {
	if m == Sharded || m == Combined {
		return n
	}
	return 1
}

// Validate reports whether Run would accept c; the error wraps ErrConfig.
func (c Config) Validate() error {
	_, err := c.validate(time.Now())
	return err
}

func (c Config) validate(now time.Time) (settings, error) {
	s := settings{Config: c}
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if c.Key == "" {
		return bad("a key is required")
	}
	if err := hotcount.ValidateKey(c.Key); err != nil {
		return bad("key: %v", err)
	}
	s.Modes = append([]Mode(nil), c.Modes...)
	if len(s.Modes) == 0 {
		s.Modes = []Mode{Combined}
	}
	seen := map[Mode]bool{}
	for _, m := range s.Modes {
		if !m.valid() {
			return bad("unknown mode %q", m)
		}
		if seen[m] {
			return bad("mode %q listed twice", m)
		}
		seen[m] = true
	}
	if s.N == 0 {
		s.N = DefaultN
	}
	if s.N < 1 || s.N > keyspace.MaxN {
		return bad("N must be 1..%d, got %d", keyspace.MaxN, c.N)
	}
	if s.Procs == 0 {
		s.Procs = DefaultProcs
	}
	if s.Procs < 1 || s.Procs > MaxProcs {
		return bad("procs must be 1..%d, got %d", MaxProcs, c.Procs)
	}
	if s.Rate < 0 || s.Rate != s.Rate {
		return bad("rate must not be negative, got %v", c.Rate)
	}
	if s.Duration == 0 {
		s.Duration = DefaultDuration
	}
	if s.Flush == 0 {
		s.Flush = DefaultFlush
	}
	if s.Flush < 0 {
		return bad("flush interval must be positive, got %v", c.Flush)
	}
	if s.Rounds == 0 {
		s.Rounds = 1
		if len(s.Modes) > 1 {
			s.Rounds = DefaultCompareRounds
		}
	}
	if s.Rounds < 1 || s.Rounds > 1000 {
		return bad("rounds must be 1..1000, got %d", c.Rounds)
	}
	if s.Duration < 0 {
		return bad("duration must be positive, got %v", c.Duration)
	}
	s.segment = s.Duration / time.Duration(s.Rounds)
	if s.segment < minSegment {
		return bad("duration %v over %d rounds leaves less than %v per round", s.Duration, s.Rounds, minSegment)
	}
	if s.Workers < 0 || s.Workers > MaxWorkers {
		return bad("workers must be 0..%d, got %d", MaxWorkers, c.Workers)
	}
	if s.ReadEvery == 0 {
		s.ReadEvery = DefaultReadEvery
	}
	if s.ReadEvery < 0 {
		return bad("read period must be positive, got %v", c.ReadEvery)
	}
	if s.RunID == "" {
		s.RunID = strconv.FormatInt(now.UnixMilli(), 36)
	}
	s.Redis = append([]string(nil), c.Redis...)
	if err := hotcount.ValidateKey(s.runKey(Combined)); err != nil {
		return bad("key with its run suffix: %v", err)
	}
	return s, nil
}

// workers returns the goroutines per instance for mode m.
func (s *settings) workers(m Mode) int {
	switch {
	case s.Workers > 0:
		return s.Workers
	case m.buffered():
		return 1
	}
	return DefaultWorkers
}

// runKey returns the key written by mode m.
func (s *settings) runKey(m Mode) string {
	return s.Key + ":" + string(m) + ":" + s.RunID
}
