// Package bench is the load tool behind `hotcount bench`: it drives one hot
// counter from many independent client instances and measures what the
// cache receives, and how much of an offered load each way of writing the
// counter can absorb.
//
// # A run
//
// A run drives one mode for a while:
//
//  1. Procs instances are opened, each its own hotcount.Client with its own
//     connections and, in the buffered modes, its own buffer, as Procs
//     application processes would have. All use the same seeds. With no
//     Redis seeds they share one embedded store (store/mem), standing in
//     for the cache that separate processes would share. An instance
//     whose connection timed out (a node capped at a small share of a
//     CPU may leave a new connection's handshake unanswered past the
//     client's 2 s dial timeout) is opened again, a second later, for up
//     to 30 s from its first attempt; the same holds for the clients
//     that read back and sample the counter.
//  2. The write-command counters of every primary are read (INFO
//     commandstats on Redis, Stats on the embedded store).
//  3. For Duration, the instances increment a fresh key (the Config's key
//     with the mode and a run id appended, cleared first, so totals are
//     checkable). Meanwhile a sampler reads the counter every ReadEvery
//     three ways: the summed read with the read cache, the summed read
//     without it, and the N sub-keys fetched one GET at a time (the raw
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
// With several values in Ns, sharded and combined run once per value.
//
// # Offered load
//
// With Rate 0 each instance's Workers goroutines increment as fast as they
// can (closed loop: a slower cache makes a slower generator). With Rate R
// the load is open-loop: a dispatcher schedules increment k at start + k/R
// and hands it, round robin, to an instance's queue; the instance issues
// each increment of its queue in a call of its own, with at most Workers
// calls in flight. The schedule does not wait for the cache, so when the
// cache cannot keep up the queues grow and the time from an increment's
// scheduled start to its acknowledgement (its latency, which includes the
// wait in the queue) grows with them; a queue that is full (maxBacklog)
// drops the increment, counted as dropped. Achieved is the increments
// acknowledged within the window, per second; what was still queued at
// the end is counted as unserved, what was in flight and acknowledged
// after it as late (sent, not achieved).
//
// Unbuffered open-loop runs bound the calls in flight (unless Workers
// says otherwise) by openInFlight over all instances on one node, and on
// a key spread over several nodes by enough to carry the offered rate
// with every call taking openCallBudget, up to openInFlight per node. A
// node capped by a CPU quota answers a call when its next CFS period
// begins, up to a period later (333 ms at 0.3% of a CPU), so by Little's
// law its callers bound what it serves: a fixed 2,048 callers left each
// of the 8 nodes of a sharded key 256 of them, about one batch of 256 per
// period, short of what the nodes could serve. Each run reports the
// wait for a caller (an increment waits in its queue only while every
// call of its instance is out) apart from the call itself, and the CPU
// that the bench process, the whole machine and each node used during the
// windows, so a shortfall shows where it arose: in the generator (a long
// wait for a caller while calls take about a node's period, or its own
// CPU), in the nodes (their CPU at their quota, calls growing well past a
// period, which then fills the callers too), or at the window's edge
// (late).
//
// # Calibration and utilisation
//
// With Calibrate set (and Redis seeds), Run first measures one node's
// single-key ceiling with the bench's own client and the same open-loop
// generator the paced runs use: Procs instances in single mode, with
// openInFlight calls in flight over all of them, drive a key on the node
// the single run's key is on. The ramp offers 1,000 increments per second
// for a step of Calibrate/3 (at least 100 ms), then twice the rate at each
// step, until three steps in a row neither keep up (serve 95% of the
// offered rate) nor raise the most achieved by 10%, or 12 steps have run.
// A step's achieved rate is its increments acknowledged over the time
// from its start to the last acknowledgement. A capped node serves more
// commands per slice of CPU under a deeper backlog, so the ramp goes on
// past the first rate it falls behind; its plateau is the mean of the
// rates of the step that achieved the most and of the steps after it
// (rueidis pipelines the concurrent calls, so this is the ceiling that
// matters, not that of one unpipelined connection).
//
// A hold step follows the ramp and sets the ceiling: it offers what the
// runs will offer, RateCeilings times the plateau (without RateCeilings,
// the offer of the step that achieved the most), but at least twice the
// plateau, for as long as a run's window (at least Calibrate), and the
// ceiling is what it achieved (at least the plateau, when it kept up). A
// ramp step is ten CFS periods of a node capped at 1%, and a capped node
// took more from the ramp's offers of 64,000/s and up than from a run's
// 3x, so a ceiling from the ramp alone sat above what single then took
// (0.87 of it on average over 32 runs, 0.57 to 1.25; see
// docs/benchmarks-log.md). The
// node's own CPU use (INFO cpu) during the hold is reported beside the
// ceiling, so one can see whether the node or the generator was the
// limit, and so is the rate of each sixth of the hold (SliceRates): how
// far the node's own rate moved within the window that set the ceiling,
// and so how far a run may fall from it by chance. Each run then reports
// every node's writes per second and its
// utilisation: those writes over the ceiling. Flush scripts (EVALSHA) cost
// a node more than a plain INCRBY, so a buffered mode's utilisation is a
// lower bound.
//
// The calibration leaves nothing of its load behind: each step returns
// once every call in flight has returned (answered, or given up after
// the call timeout and counted as an error), and increments still queued
// in the generator when the step's window ended are not sent. On nodes
// capped at 0.3% of a CPU, the calibrated node's INCRBY count did not
// move after the ramp had ended.
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
// With several modes (or Ns) the runs alternate, in Rounds rounds of
// Duration/Rounds each (single, sharded, buffered, combined, single, ...),
// so slow drift of the machine affects them alike. A run writes the same
// key in every round, so its writes land on the same nodes each time; its
// rounds are summed into one Result. Ratios compare each run with single
// (or the first run when single is not among them).
package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// DefaultRounds is the number of rounds when one mode runs.
	DefaultRounds = 1
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
	// MaxWorkers bounds Workers, and the calls one instance has in
	// flight in an open-loop run (they are goroutines started as the
	// increments fall due, not a standing pool).
	MaxWorkers = 1 << 14
	// DefaultCalibrate is the command line's Calibrate: each step of the
	// calibration's ramp drives one node for a third of it, and its hold
	// for at least all of it (the library's zero Calibrate skips it).
	DefaultCalibrate = 3 * time.Second
	// openInFlight is the number of unbuffered calls in flight, over all
	// instances, of a calibration or of an open-loop run on one node,
	// when Workers is 0. A capped node is throttled for most of each CFS
	// period; callers must be many enough to keep a backlog at the node
	// across that pause.
	openInFlight = 2048
	// openCallBudget sizes the callers of an open-loop run on a key
	// spread over several nodes: enough (Little's law) to carry the
	// offered rate with every call taking this long, at least
	// openInFlight and at most openInFlight per node. A call to a capped
	// node waits up to the rest of its CFS period (333 ms at 0.3% of a
	// CPU); with a fixed openInFlight, 2,048 callers carried at most
	// about 2,048 / 0.17 s, 12,000/s, however many nodes could serve more.
	openCallBudget = 500 * time.Millisecond
	// maxBacklog bounds the queue of scheduled increments of one instance.
	maxBacklog = 1 << 16
	// minSegment is the shortest load window of one round.
	minSegment = 100 * time.Millisecond
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
	// Login is how every connection to Redis logs in and is secured: its
	// Username, Password and TLS serve the bench's own client and every
	// instance (its Addrs and FlushDelay are not used: Redis gives the
	// seeds). It needs Redis.
	Login hotcount.RedisConfig
	// Key is the counter key; each mode writes Key + ":" + mode + ":" +
	// RunID, the same key in all its rounds. Required.
	Key string
	// Modes to run; empty means Combined. With several, they alternate.
	Modes []Mode
	// N is the sub-counter count of sharded and combined; 0 means
	// DefaultN. Single and buffered always use 1.
	N int
	// Ns, when it has several values, runs sharded and combined once per
	// value (N is then ignored), e.g. 1, 2, 4, 8 for a chart of the
	// achieved rate against N.
	Ns []int
	// Procs is the number of client instances; 0 means DefaultProcs.
	Procs int
	// Rate is the total increments per second over all instances, offered
	// open-loop (see the package documentation); 0 means as fast as they
	// can, closed-loop.
	Rate float64
	// RateCeilings, when positive, sets Rate to this multiple of the
	// calibrated ceiling (4 offers four times what one node took); it
	// needs Calibrate and excludes Rate.
	RateCeilings float64
	// Calibrate, when positive, first measures one node's single-key
	// ceiling (Redis only) in steps of a third of it, then holds the
	// runs' offer for at least this long (see the package
	// documentation); utilisation is reported against it. Zero skips the
	// calibration.
	Calibrate time.Duration
	// Duration is how long each mode is driven (split over the rounds); 0
	// means DefaultDuration.
	Duration time.Duration
	// Flush is the flush interval of the buffered modes; 0 means
	// DefaultFlush.
	Flush time.Duration
	// Rounds is how many rounds the modes alternate in; 0 means 1 for one
	// mode and DefaultCompareRounds for several.
	Rounds int
	// Workers is the number of goroutines per instance (in open-loop
	// runs, the most calls one instance has in flight); 0 means 1 for
	// buffered modes, and for unbuffered ones DefaultWorkers, or in
	// open-loop runs and the calibration enough for openInFlight callers
	// over all instances, more on a key spread over several nodes (see
	// the package documentation).
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
	segment  time.Duration // load window of one round
	variants []variant     // the runs, in the order each round drives them
	sweep    bool          // sharded and combined run at several N
}

// variant is one run: a mode at one sub-counter count.
type variant struct {
	mode Mode
	n    int
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
	s.Ns = append([]int(nil), c.Ns...)
	for i, n := range s.Ns {
		if n < 1 || n > keyspace.MaxN {
			return bad("N must be 1..%d, got %d", keyspace.MaxN, n)
		}
		if slices.Contains(s.Ns[:i], n) {
			return bad("N %d listed twice", n)
		}
	}
	switch len(s.Ns) {
	case 0:
		s.Ns = []int{s.N}
	case 1:
		s.N = s.Ns[0]
	default:
		s.sweep = true
	}
	for _, m := range s.Modes {
		if m == Sharded || m == Combined {
			for _, n := range s.Ns {
				s.variants = append(s.variants, variant{m, n})
			}
		} else {
			s.variants = append(s.variants, variant{m, 1})
		}
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
	switch {
	case s.RateCeilings < 0 || s.RateCeilings != s.RateCeilings:
		return bad("rate in ceilings must not be negative, got %v", c.RateCeilings)
	case s.RateCeilings > 0 && s.Rate > 0:
		return bad("give a rate or a rate in ceilings, not both")
	case s.RateCeilings > 0 && s.Calibrate <= 0:
		return bad("a rate in ceilings needs the calibration")
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
	if s.Calibrate < 0 {
		return bad("calibration time must not be negative, got %v", c.Calibrate)
	}
	if s.Rounds == 0 {
		s.Rounds = DefaultRounds
		if len(s.variants) > 1 {
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
	if len(s.Redis) == 0 && hasLogin(c.Login) {
		return bad("login and TLS settings need Redis seeds")
	}
	for _, v := range append(s.variants, variant{Single, 1}) {
		if err := hotcount.ValidateKey(s.runKey(v)); err != nil {
			return bad("key with its run suffix: %v", err)
		}
	}
	// The longest key the calibration may drive (see calibrationKeyOn).
	if err := hotcount.ValidateKey(s.calibrationKey() + ":" + strconv.Itoa(calKeySearch-1)); err != nil {
		return bad("key with its run suffix: %v", err)
	}
	return s, nil
}

// workers returns the goroutines per instance for mode m, or in an
// open-loop run the most calls one instance has in flight, on a key whose
// sub-counters lie on nodes primaries.
func (s *settings) workers(m Mode, nodes int) int {
	switch {
	case s.Workers > 0:
		return s.Workers
	case m.buffered():
		return 1
	case s.Rate > 0:
		return s.openWorkers(nodes)
	}
	return DefaultWorkers
}

// openWorkers returns the most unbuffered calls one instance has in
// flight in an open-loop run or a calibration on a key spread over nodes
// primaries (see openInFlight and openCallBudget).
func (s *settings) openWorkers(nodes int) int {
	if s.Workers > 0 {
		return s.Workers
	}
	total := openInFlight
	if nodes > 1 {
		total = max(total, min(int(math.Ceil(s.Rate*openCallBudget.Seconds())), openInFlight*nodes))
	}
	return min(MaxWorkers, max(DefaultWorkers, (total+s.Procs-1)/s.Procs))
}

// runKey returns the key written by run v.
func (s *settings) runKey(v variant) string {
	if s.sweep && (v.mode == Sharded || v.mode == Combined) {
		return s.Key + ":" + string(v.mode) + "-n" + strconv.Itoa(v.n) + ":" + s.RunID
	}
	return s.Key + ":" + string(v.mode) + ":" + s.RunID
}

// calibrationKey returns the key the calibration writes.
func (s *settings) calibrationKey() string {
	return s.Key + ":calibrate:" + s.RunID
}

// label names run v in reports: the mode, with its N in a sweep.
func (s *settings) label(v variant) string {
	if s.sweep && (v.mode == Sharded || v.mode == Combined) {
		return string(v.mode) + " n=" + strconv.Itoa(v.n)
	}
	return string(v.mode)
}

// hasLogin reports whether login sets a user, a password or TLS.
func hasLogin(login hotcount.RedisConfig) bool {
	return login.Username != "" || login.Password != "" || login.TLS != nil
}

// redisConfig returns the settings of the connections to the Redis of
// seeds: logged in and secured as login says.
func redisConfig(seeds []string, login hotcount.RedisConfig) hotcount.RedisConfig {
	return hotcount.RedisConfig{Addrs: append([]string(nil), seeds...), Username: login.Username, Password: login.Password, TLS: login.TLS}
}
