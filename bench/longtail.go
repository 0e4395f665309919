package bench

// The long-tail benchmark (hotcount bench longtail): what a namespace of
// many mostly cold counters costs the cache, written through hotcount
// against the same load sent straight to the cluster, side by side in one
// run.
//
// Two workloads: the long tail (Keys counters, uniform, TailClients
// callers) and the mixed one (that tail with half the callers, plus one
// viral key with ViralClients callers). A third, reads, is run when asked:
// the tail is written first (not measured), then read with GETs of random
// tail keys, so that each counter is read cold (the proxy that reads is a
// new one, which has looked no counter up); there an "increment" of the
// report is one GET. Each runs on two paths pairs (reads on the proxy
// pair only):
//
//   - "direct" against "proxy": redis-benchmark INCRs, sent to the
//     cluster (--cluster; the viral key to its node) or to a hotcount
//     proxy run in this process, in front of the same cluster, with the
//     counters in one buffered namespace;
//   - "library direct" against "library": the bench's own callers, one
//     plain INCR per increment on a rueidis cluster client, or
//     Client.Incr of a buffered namespace, at the rate the direct callers
//     reached (the same load, not as fast as a buffer accepts).
//
// Each case starts from keys of its own prefix and measures, over all
// primaries: the CPU time the server processes used (INFO cpu), memory
// and keys added (used_memory, DBSIZE, read after the hotcount side has
// been closed, so every buffered delta is written), the keys by kind
// (counter keys, idempotency keys: {K#L}:seq and :tok:, metadata
// records), and the commands received (INFO commandstats). Its keys are
// deleted afterwards.
//
// The hotcount side of each case (the proxy's Client, the library's
// Client) gets, with Store "embedded", the durable store `hotcount serve`
// and `hotcount proxy --data DIR` open: the SQLite store
// of a data folder (sqlite.OpenFolder, the same call), here a temporary
// folder of its own, removed afterwards, with the durability settings at
// their defaults. Its fast-mode checkpoints then read every touched
// counter from the cache, as those commands' Clients do (and the Client's
// start reads the nodes' sentinels); the last round runs when
// the Client closes, before the state after the load is taken, so its
// reads are in the case's figures. With Store "none" (the default) the
// Client has no durable store and takes no checkpoints, as `hotcount
// proxy` runs with no flags (without --data or --postgres), the proxy the
// long-tail targets are stated for.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
	"github.com/hotcount/hotcount/store"
)

// Defaults of LongTailConfig.
const (
	DefaultTailKeys     = 200_000
	DefaultTailClients  = 40
	DefaultViralClients = 40
	DefaultTailRequests = 400_000
	DefaultLibDuration  = 10 * time.Second
	// DefaultTailStore is the durable store of the hotcount side.
	DefaultTailStore = StoreNone
	// DefaultTailPaths are the paths run when LongTailConfig.Paths is
	// nil, comma-separated.
	DefaultTailPaths = "proxy,library"
	// DefaultTailWorkloads are the workloads run when
	// LongTailConfig.Workloads is nil, comma-separated.
	DefaultTailWorkloads = "tail,mixed"
	// DefaultBenchmark is the redis-benchmark program, looked up in PATH.
	DefaultBenchmark = "redis-benchmark"
)

// Durable stores of the hotcount side (LongTailConfig.Store).
const (
	// StoreEmbedded is the SQLite store of a data folder, opened as
	// `hotcount serve` and `hotcount proxy --data DIR` open it, in a
	// temporary folder: fast-mode checkpoints run.
	StoreEmbedded = "embedded"
	// StoreNone is no durable store: no checkpoints, as `hotcount
	// proxy` without --data or --postgres.
	StoreNone = "none"
)

// LongTailConfig configures RunLongTail. Zero values mean the defaults.
type LongTailConfig struct {
	// Redis are the cluster's seed addresses (required).
	Redis []string
	// Login is how every connection to the cluster logs in and is
	// secured: its Username, Password and TLS serve the bench's own
	// client, the hotcount side, the proxy's connections to the cluster
	// and (user and password) redis-benchmark's direct cases (its Addrs
	// and FlushDelay are not used: Redis and UpstreamDelay say those).
	// redis-benchmark takes the password on its command line (-a): it
	// reads it from nowhere else, so the process list of the machine
	// shows it while a direct case runs.
	Login hotcount.RedisConfig
	// BenchmarkTLS are redis-benchmark's arguments for TLS in the direct
	// cases (--tls, and --cacert, --cert, --key, --sni as needed): with
	// Login.TLS on the proxy path they are required, and the program
	// must have been built with TLS.
	BenchmarkTLS []string
	// Keys is the number of tail counters.
	Keys int
	// TailClients and ViralClients are the callers of the tail and of
	// the viral key; in the mixed workload the tail gets half of
	// TailClients.
	TailClients, ViralClients int
	// Requests is how many INCRs each redis-benchmark sends (tail and
	// viral alike).
	Requests int
	// LibDuration is how long each library case runs.
	LibDuration time.Duration
	// Flush is the flush interval of the buffered namespace (0: the
	// Client's default).
	Flush time.Duration
	// UpstreamDelay is the flush delay of the connections of the proxy
	// case's counters to the cluster (hotcount.RedisConfig.FlushDelay);
	// 0 means proxy.CounterFlushDelay, as `hotcount proxy` sets it.
	UpstreamDelay time.Duration
	// BatchWindow is the proxy case's hotcount.RedisConfig.IncrBatchWindow;
	// zero means proxy.CounterBatchWindow, negative: none.
	BatchWindow time.Duration
	// DirectClients, when positive, adds to each proxy pair a direct
	// case with this many tail callers ("direct slow"), so that the
	// proxy can also be set against a direct load of about its own rate
	// (the ratio the 40-client comparison states stays the one
	// against "direct").
	DirectClients int
	// Benchmark is the redis-benchmark program (DefaultBenchmark).
	Benchmark string
	// Paths selects "proxy", "library" or both (nil: DefaultTailPaths,
	// both).
	Paths []string
	// Workloads selects "tail", "mixed" and "reads" (nil:
	// DefaultTailWorkloads, tail and mixed).
	Workloads []string
	// Store is the durable store of the hotcount side: StoreEmbedded or
	// StoreNone ("": DefaultTailStore).
	Store string
	// Log, when set, is told what runs.
	Log io.Writer
}

// LongTailCase is what one workload cost the cache on one path.
type LongTailCase struct {
	Workload string `json:"workload"`
	Path     string `json:"path"`
	// Store is the durable store the hotcount side ran with
	// (StoreEmbedded or StoreNone); empty in a direct case, which has no
	// hotcount side.
	Store string `json:"store"`
	// CheckpointRows is, with StoreEmbedded, the checkpoint rows the
	// store held once the hotcount side had closed (one per sub-counter
	// checkpointed).
	CheckpointRows int64 `json:"checkpoint_rows"`
	// Increments is the increments sent; Seconds how long the load ran.
	Increments int64   `json:"increments"`
	Seconds    float64 `json:"seconds"`
	// CPUSeconds is the CPU time of every primary's server process.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUPerIncrUS is CPUSeconds per increment, in µs.
	CPUPerIncrUS float64 `json:"cpu_per_incr_us"`
	// WindowSeconds is the wall time between the two readings of the
	// primaries that CPUSeconds is the difference of (the load, and the
	// hotcount side's start and close).
	WindowSeconds float64 `json:"window_seconds"`
	// CPUPerIncrLessIdleUS is CPUPerIncrUS less what the idle cluster
	// spends in the same window (LongTailReport.IdleCPUPerSecond ×
	// WindowSeconds), per increment: the cost of the load alone. A
	// slower path spreads the same upkeep (each node's timers, the
	// cluster bus) over fewer increments, so this is the fairer figure
	// between paths of different speeds.
	CPUPerIncrLessIdleUS float64 `json:"cpu_per_incr_less_idle_us"`
	// BytesAdded and KeysAdded are used_memory and DBSIZE grown, summed
	// over the primaries.
	BytesAdded int64 `json:"bytes_added"`
	KeysAdded  int64 `json:"keys_added"`
	// CounterKeys, IdempotencyKeys and MetaKeys are the case's keys by
	// kind.
	CounterKeys     int64 `json:"counter_keys"`
	IdempotencyKeys int64 `json:"idempotency_keys"`
	MetaKeys        int64 `json:"meta_keys"`
	// Counters is the number of counters written (distinct keys).
	Counters int64 `json:"counters"`
	// BytesPerCounter is BytesAdded / Counters.
	BytesPerCounter float64 `json:"bytes_per_counter"`
	// Commands are the calls received, by command.
	Commands map[string]int64 `json:"commands"`
	// WritesPerIncr is (INCR + INCRBY + EVALSHA + EVAL calls) per
	// increment.
	WritesPerIncr float64 `json:"writes_per_incr"`
	// SocketReads is the primaries' reads from client connections (INFO
	// stats total_reads_processed), and ReadsPerIncr that per increment:
	// a node pays a wake-up, a read and a write for each batch of
	// commands, so fewer reads per increment is less fixed work.
	SocketReads  int64   `json:"socket_reads"`
	ReadsPerIncr float64 `json:"reads_per_incr"`
	// CommandUSPerIncr is the time the primaries spent executing
	// commands (INFO commandstats usec, all commands) per increment, in
	// µs: the rest of CPUPerIncrUS is the event loop, the sockets and
	// the server's own upkeep.
	CommandUSPerIncr float64 `json:"command_us_per_incr"`
	// Refused is, in a library case, the increments the buffer refused
	// at its bound (ErrBackpressure) and that were tried again.
	Refused int64 `json:"refused,omitempty"`
	// ViralWritesPerIncr is, in the mixed workload through hotcount, the
	// viral key's cache writes per increment (0 elsewhere).
	ViralWritesPerIncr float64 `json:"viral_writes_per_incr,omitempty"`
}

// LongTailRatio sets a hotcount path against its direct twin.
type LongTailRatio struct {
	Workload string `json:"workload"`
	Path     string `json:"path"`
	// CPU and Memory are the ratios of CPU per increment and of bytes
	// per counter; IdempotencyShare is idempotency keys per counter key.
	CPU              float64 `json:"cpu"`
	Memory           float64 `json:"memory"`
	IdempotencyShare float64 `json:"idempotency_share"`
	// CPULessIdle is the ratio of CPU per increment less the idle
	// cluster's (LongTailCase.CPUPerIncrLessIdleUS).
	CPULessIdle float64 `json:"cpu_less_idle"`
}

// LongTailReport is the outcome of RunLongTail.
type LongTailReport struct {
	Primaries []string `json:"primaries"`
	// Store is the durable store of the hotcount cases (LongTailConfig.Store).
	Store string `json:"store"`
	// IdleCPUPerSecond is the CPU time the primaries spent per second of
	// wall time with no load, measured over IdleWindow before the first
	// case.
	IdleCPUPerSecond float64         `json:"idle_cpu_per_second"`
	Cases            []LongTailCase  `json:"cases"`
	Ratios           []LongTailRatio `json:"ratios"`
}

func (c LongTailConfig) withDefaults() (LongTailConfig, error) {
	if len(c.Redis) == 0 {
		return c, fmt.Errorf("%w: longtail needs --redis (a cluster)", ErrConfig)
	}
	if len(c.BenchmarkTLS) > 0 && c.Login.TLS == nil {
		return c, fmt.Errorf("%w: longtail: redis-benchmark's TLS arguments without TLS settings", ErrConfig)
	}
	if c.Keys < 0 || c.TailClients < 0 || c.ViralClients < 0 || c.Requests < 0 || c.LibDuration < 0 || c.Flush < 0 || c.UpstreamDelay < 0 || c.DirectClients < 0 {
		return c, fmt.Errorf("%w: longtail settings must not be negative", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Keys, DefaultTailKeys)
	def(&c.TailClients, DefaultTailClients)
	def(&c.ViralClients, DefaultViralClients)
	def(&c.Requests, DefaultTailRequests)
	if c.LibDuration == 0 {
		c.LibDuration = DefaultLibDuration
	}
	if c.Benchmark == "" {
		c.Benchmark = DefaultBenchmark
	}
	switch {
	case c.BatchWindow == 0:
		c.BatchWindow = proxy.CounterBatchWindow
	case c.BatchWindow < 0:
		c.BatchWindow = 0
	}
	if c.UpstreamDelay == 0 {
		c.UpstreamDelay = proxy.CounterFlushDelay
	}
	if c.Paths == nil {
		c.Paths = strings.Split(DefaultTailPaths, ",")
	}
	if c.Workloads == nil {
		c.Workloads = strings.Split(DefaultTailWorkloads, ",")
	}
	if c.Store == "" {
		c.Store = DefaultTailStore
	}
	if c.Store != StoreEmbedded && c.Store != StoreNone {
		return c, fmt.Errorf("%w: longtail store %q (want %s or %s)", ErrConfig, c.Store, StoreEmbedded, StoreNone)
	}
	for _, p := range c.Paths {
		if p != "proxy" && p != "library" {
			return c, fmt.Errorf("%w: longtail path %q (want proxy or library)", ErrConfig, p)
		}
	}
	for _, w := range c.Workloads {
		if w != "tail" && w != "mixed" && w != "reads" {
			return c, fmt.Errorf("%w: longtail workload %q (want tail, mixed or reads)", ErrConfig, w)
		}
	}
	if c.Login.TLS != nil && slices.Contains(c.Paths, "proxy") && len(c.BenchmarkTLS) == 0 {
		return c, fmt.Errorf("%w: longtail over TLS needs redis-benchmark's TLS arguments (BenchmarkTLS) for the proxy path", ErrConfig)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c, nil
}

// benchmarkLogin returns redis-benchmark's arguments that log in and
// secure its connections to the cluster as c says: --user and -a, then
// BenchmarkTLS.
func (c LongTailConfig) benchmarkLogin() []string {
	var args []string
	if c.Login.Password != "" {
		if c.Login.Username != "" {
			args = append(args, "--user", c.Login.Username)
		}
		args = append(args, "-a", c.Login.Password)
	}
	return append(args, c.BenchmarkTLS...)
}

// checkBenchmarkTLS reports whether the program bench speaks TLS: its
// --help lists --tls only when it was built with TLS.
func checkBenchmarkTLS(ctx context.Context, bench string) error {
	out, _ := exec.CommandContext(ctx, bench, "--help").CombinedOutput()
	if !strings.Contains(string(out), "--tls") {
		return fmt.Errorf("%w: %s was built without TLS (its --help lists no --tls): the direct cases cannot reach the cluster over TLS; run longtail with --paths library, or use a redis-benchmark built with TLS", ErrConfig, bench)
	}
	return nil
}

// ltRun is one RunLongTail.
type ltRun struct {
	cfg   LongTailConfig
	redis hotcount.RedisConfig // the cluster's seeds, with Login
	b     *redisBackend
	nodes []string
	topo  *store.Topology
	run   string  // this run's id, in every key prefix
	idle  float64 // the idle cluster's CPU seconds per second
	// refused counts increments the library case's buffer refused with
	// ErrBackpressure (each waited 1 ms and was tried again).
	refused atomic.Int64
	// ckRows is the checkpoint rows the last hotcount side's store held
	// when it closed.
	ckRows atomic.Int64
}

// RunLongTail runs the long-tail benchmark.
func RunLongTail(ctx context.Context, cfg LongTailConfig) (*LongTailReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Paths, "proxy") {
		if _, err := exec.LookPath(cfg.Benchmark); err != nil {
			return nil, fmt.Errorf("%w: %s not found (the proxy path drives it): %w", ErrConfig, cfg.Benchmark, err)
		}
		if len(cfg.BenchmarkTLS) > 0 {
			if err := checkBenchmarkTLS(ctx, cfg.Benchmark); err != nil {
				return nil, err
			}
		}
	}
	redis := redisConfig(cfg.Redis, cfg.Login)
	be, err := openBackend(ctx, redis)
	if err != nil {
		return nil, err
	}
	defer be.close()
	rb := be.(*redisBackend)
	probe, err := hotcount.New(ctx, hotcount.Config{Redis: redis})
	if err != nil {
		return nil, err
	}
	topo, err := probe.Store().Topology(ctx)
	_ = probe.Close(ctx)
	if err != nil {
		return nil, err
	}
	r := &ltRun{cfg: cfg, redis: redis, b: rb, nodes: append([]string(nil), topo.Nodes...), topo: topo, run: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	rep := &LongTailReport{Primaries: r.nodes, Store: cfg.Store}
	if r.idle, err = r.idleRate(ctx); err != nil {
		return rep, err
	}
	rep.IdleCPUPerSecond = r.idle
	for _, w := range cfg.Workloads {
		for _, p := range cfg.Paths {
			var pair [2]LongTailCase
			if w == "reads" && p != "proxy" {
				continue // reads are measured on the proxy pair
			}
			if w == "reads" {
				d, err := r.measureAfter(ctx, w, "direct", r.benchDirect, r.benchDirect)
				if err != nil {
					return rep, err
				}
				h, err := r.measureAfter(ctx, w, "proxy", r.benchProxy, r.benchProxy)
				if err != nil {
					return rep, err
				}
				pair = [2]LongTailCase{d, h}
			} else if p == "proxy" {
				d, err := r.measure(ctx, w, "direct", r.benchDirect)
				if err != nil {
					return rep, err
				}
				h, err := r.measure(ctx, w, "proxy", r.benchProxy)
				if err != nil {
					return rep, err
				}
				pair = [2]LongTailCase{d, h}
				if r.cfg.DirectClients > 0 {
					slow, err := r.measure(ctx, w, "direct slow", r.benchDirect)
					if err != nil {
						return rep, err
					}
					rep.Cases = append(rep.Cases, slow)
					rep.Ratios = append(rep.Ratios, LongTailRatio{
						Workload:    w,
						Path:        "proxy vs direct slow",
						CPU:         div(h.CPUPerIncrUS, slow.CPUPerIncrUS),
						Memory:      div(h.BytesPerCounter, slow.BytesPerCounter),
						CPULessIdle: div(h.CPUPerIncrLessIdleUS, slow.CPUPerIncrLessIdleUS),
					})
				}
			} else {
				var rate [2]float64
				d, err := r.measure(ctx, w, "library direct", func(ctx context.Context, w, pfx string) (int64, int64, time.Duration, error) {
					return r.libDirect(ctx, w, pfx, &rate)
				})
				if err != nil {
					return rep, err
				}
				h, err := r.measure(ctx, w, "library", func(ctx context.Context, w, pfx string) (int64, int64, time.Duration, error) {
					return r.library(ctx, w, pfx, rate)
				})
				if err != nil {
					return rep, err
				}
				pair = [2]LongTailCase{d, h}
			}
			rep.Cases = append(rep.Cases, pair[0], pair[1])
			rep.Ratios = append(rep.Ratios, LongTailRatio{
				Workload:         w,
				Path:             pair[1].Path,
				CPU:              div(pair[1].CPUPerIncrUS, pair[0].CPUPerIncrUS),
				Memory:           div(pair[1].BytesPerCounter, pair[0].BytesPerCounter),
				IdempotencyShare: div(float64(pair[1].IdempotencyKeys), float64(pair[1].CounterKeys)),
				CPULessIdle:      div(pair[1].CPUPerIncrLessIdleUS, pair[0].CPUPerIncrLessIdleUS),
			})
		}
	}
	return rep, nil
}

// IdleWindow is how long RunLongTail watches the idle cluster's CPU
// before the first case.
const IdleWindow = 3 * time.Second

// idleRate returns the CPU time the primaries spend per second while
// nothing is sent to them, over IdleWindow.
func (r *ltRun) idleRate(ctx context.Context) (float64, error) {
	before, err := r.state(ctx, "")
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(IdleWindow):
	}
	after, err := r.state(ctx, "")
	if err != nil {
		return 0, err
	}
	return div(after.cpu-before.cpu, time.Since(t0).Seconds()), nil
}

// nodeState is what the primaries hold and did, summed or by command.
type nodeState struct {
	cpu       float64
	mem, keys int64
	reads     int64
	cmds      map[string]int64
	usec      int64
}

func (r *ltRun) state(ctx context.Context, viralNode string) (nodeState, error) {
	s := nodeState{cmds: map[string]int64{}}
	for _, n := range r.nodes {
		cpu, err := r.b.cpuSeconds(ctx, n)
		if err != nil {
			return s, err
		}
		s.cpu += cpu
		mem, err := r.b.info(ctx, n, "memory")
		if err != nil {
			return s, err
		}
		s.mem += infoInt(mem, "used_memory")
		ks, err := r.b.info(ctx, n, "keyspace")
		if err != nil {
			return s, err
		}
		s.keys += keyspaceKeys(ks)
		st, err := r.b.info(ctx, n, "stats")
		if err != nil {
			return s, err
		}
		s.reads += infoInt(st, "total_reads_processed")
		cs, err := r.b.info(ctx, n, "commandstats")
		if err != nil {
			return s, err
		}
		all, err := parseCommandStats(cs)
		if err != nil {
			return s, err
		}
		for k, v := range all {
			s.cmds[k] += v
		}
		for k, v := range parseCommandUsec(cs) {
			if k != "info" && k != "scan" && k != "unlink" {
				s.usec += v
			}
		}
	}
	return s, nil
}

// loadFunc drives workload w on keys under prefix pfx and returns the
// increments sent (all, and those of the viral key) and how long it ran.
type loadFunc func(ctx context.Context, w, pfx string) (incrs, viral int64, d time.Duration, err error)

// measure runs one case: state before, the load, state after, the keys
// by kind, then the keys' removal.
func (r *ltRun) measure(ctx context.Context, w, path string, load loadFunc) (LongTailCase, error) {
	return r.measureAfter(ctx, w, path, nil, load)
}

// measureAfter is measure with setup, when set, run as the tail workload
// on the case's keys before the state is taken (the reads workload's
// writes).
func (r *ltRun) measureAfter(ctx context.Context, w, path string, setup, load loadFunc) (LongTailCase, error) {
	pfx := "lt" + r.run + ":" + strings.ReplaceAll(path, " ", "") + ":" + w + ":"
	c := LongTailCase{Workload: w, Path: path}
	if path != "direct" && path != "direct slow" && path != "library direct" {
		c.Store = r.cfg.Store
	}
	fmt.Fprintf(r.cfg.Log, "longtail: %s, %s (store %s) ...\n", w, path, cmp.Or(c.Store, "-"))
	viralNode := r.nodeOf(pfx + "viral")
	if setup != nil {
		if _, _, _, err := setup(ctx, "tail", pfx); err != nil {
			return c, err
		}
	}
	r.refused.Store(0)
	r.ckRows.Store(0)
	before, err := r.state(ctx, viralNode)
	if err != nil {
		return c, err
	}
	t0 := time.Now()
	incrs, viral, d, err := load(ctx, w, pfx)
	if err != nil {
		return c, err
	}
	after, err := r.state(ctx, viralNode)
	if err != nil {
		return c, err
	}
	c.WindowSeconds = time.Since(t0).Seconds()
	c.Increments, c.Seconds, c.Refused = incrs, d.Seconds(), r.refused.Load()
	c.CheckpointRows = r.ckRows.Load()
	c.CPUSeconds = after.cpu - before.cpu
	c.CPUPerIncrUS = div(c.CPUSeconds*1e6, float64(incrs))
	c.CPUPerIncrLessIdleUS = div((c.CPUSeconds-r.idle*c.WindowSeconds)*1e6, float64(incrs))
	c.BytesAdded, c.KeysAdded = after.mem-before.mem, after.keys-before.keys
	c.SocketReads = after.reads - before.reads
	c.ReadsPerIncr = div(float64(c.SocketReads), float64(incrs))
	c.CommandUSPerIncr = div(float64(after.usec-before.usec), float64(incrs))
	c.Commands = map[string]int64{}
	for k, v := range after.cmds {
		if dv := v - before.cmds[k]; dv > 0 && k != "info" && k != "scan" {
			c.Commands[k] = dv
		}
	}
	writes := c.Commands["incr"] + c.Commands["incrby"] + c.Commands["evalsha"] + c.Commands["eval"]
	if w == "reads" {
		// What each GET cost: the commands the cache received for it.
		writes = 0
		for _, v := range c.Commands {
			writes += v
		}
	}
	c.WritesPerIncr = div(float64(writes), float64(incrs))
	counters, err := r.classify(ctx, pfx, &c)
	if err != nil {
		return c, err
	}
	c.Counters = counters
	c.BytesPerCounter = div(float64(c.BytesAdded), float64(counters))
	if viral > 0 && path != "direct" && path != "library direct" {
		// The tail's keys are cold (plain INCRBY): the scripts are the
		// viral key's flushes, and the tail's few hot moments, so this
		// bounds the viral key's writes from above.
		c.ViralWritesPerIncr = div(float64(c.Commands["evalsha"]+c.Commands["eval"]), float64(viral))
	}
	if err := r.drop(ctx, pfx); err != nil {
		return c, err
	}
	return c, nil
}

// nodeOf returns the primary that owns key's slot.
func (r *ltRun) nodeOf(key string) string { return r.topo.NodeOf(key) }

// classify counts the keys under pfx by kind and returns the counters
// written (distinct counter names).
func (r *ltRun) classify(ctx context.Context, pfx string, c *LongTailCase) (int64, error) {
	names := map[string]struct{}{}
	err := r.scan(ctx, pfx, func(node rueidis.Client, keys []string) error {
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, "}:seq") || strings.Contains(k, "}:tok:"):
				c.IdempotencyKeys++
			case strings.HasSuffix(k, "#meta}"):
				c.MetaKeys++
			default:
				c.CounterKeys++
				name := k
				if key, _, ok := keyspace.ParseSubKey(k); ok {
					name = key
				}
				names[name] = struct{}{}
			}
		}
		return nil
	})
	return int64(len(names)), err
}

// drop deletes every key under pfx.
func (r *ltRun) drop(ctx context.Context, pfx string) error {
	return r.scan(ctx, pfx, func(node rueidis.Client, keys []string) error {
		cmds := make(rueidis.Commands, 0, len(keys))
		for _, k := range keys {
			cmds = append(cmds, node.B().Unlink().Key(k).Build())
		}
		for _, res := range node.DoMulti(ctx, cmds...) {
			if err := res.Error(); err != nil {
				return err
			}
		}
		return nil
	})
}

// scan calls f with batches of the keys under pfx on each primary. The
// keys are "pfx…" (direct) or "{pfx…" (hotcount's sub-keys and records).
func (r *ltRun) scan(ctx context.Context, pfx string, f func(node rueidis.Client, keys []string) error) error {
	nodes := r.b.rc.Nodes()
	for _, n := range r.nodes {
		node, ok := nodes[n]
		if !ok {
			return fmt.Errorf("bench: no connection to primary %s", n)
		}
		for _, match := range []string{pfx + "*", "{" + pfx + "*"} {
			cursor := uint64(0)
			for {
				e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(5000).Build()).AsScanEntry()
				if err != nil {
					return fmt.Errorf("bench: SCAN %s: %w", n, err)
				}
				if len(e.Elements) > 0 {
					if err := f(node, e.Elements); err != nil {
						return err
					}
				}
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
	}
	return nil
}

// benchDirect sends the workload straight to the cluster with
// redis-benchmark.
func (r *ltRun) benchDirect(ctx context.Context, w, pfx string) (int64, int64, time.Duration, error) {
	host, port, err := net.SplitHostPort(r.cfg.Redis[0])
	if err != nil {
		return 0, 0, 0, err
	}
	login := r.cfg.benchmarkLogin()
	tail := append([]string{"--cluster", "-h", host, "-p", port}, login...)
	viral := r.nodeOf(pfx + "viral")
	vh, vp, err := net.SplitHostPort(viral)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("bench: the viral key's node %q: %w", viral, err)
	}
	// In cluster mode redis-benchmark puts a node's hash tag where
	// {tag} stands, so the tail spreads over every primary.
	clients := r.cfg.TailClients
	if strings.Contains(pfx, ":directslow:") {
		clients = r.cfg.DirectClients
	}
	return r.driveN(ctx, w, clients, tail, pfx+"{tag}:", append([]string{"-h", vh, "-p", vp}, login...), pfx+"viral")
}

// benchProxy sends the workload through a hotcount proxy in front of
// the cluster, with the counters in one buffered namespace.
func (r *ltRun) benchProxy(ctx context.Context, w, pfx string) (incrs, viral int64, d time.Duration, err error) {
	db, closeDB, err := r.openStore(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, closeDB()) }()
	upstream := r.redis
	upstream.FlushDelay = r.cfg.UpstreamDelay
	upstream.IncrBatchWindow = r.cfg.BatchWindow
	hc, err := hotcount.New(ctx, hotcount.Config{
		// As `hotcount proxy` sets it (with --data DIR, or without a
		// durable store: r.cfg.Store).
		Redis:      upstream,
		Namespaces: []hotcount.Namespace{{Prefix: pfx, Buffered: true, FlushInterval: r.cfg.Flush}},
		Durability: hotcount.DurabilityConfig{Store: db},
	})
	if err != nil {
		return 0, 0, 0, err
	}
	// redis-benchmark reaches this proxy on a plain loopback port with
	// no password; the proxy logs in to the cluster as r.redis says.
	srv, err := proxy.New(ctx, proxy.Config{Counters: hc, Redis: r.redis})
	if err != nil {
		_ = hc.Close(ctx)
		return 0, 0, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = hc.Close(ctx)
		return 0, 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	at := []string{"-h", host, "-p", port}
	incrs, viral, d, err = r.drive(ctx, w, at, pfx, at, pfx+"viral")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(err, srv.Shutdown(sctx))
	<-done
	// Every buffered delta written, then the last checkpoint round.
	err = errors.Join(err, hc.Close(sctx))
	return incrs, viral, d, err
}

// openStore opens the durable store of a hotcount side (nil with
// StoreNone): with StoreEmbedded, the SQLite store of a new temporary data
// folder, opened as `hotcount serve` opens it in front of a Redis Cluster
// (sqlite.OpenFolder, shared lock, default settings). done, called once
// the Client has closed, records the checkpoint rows the store holds in
// r.ckRows, closes it and removes the folder.
func (r *ltRun) openStore(ctx context.Context) (db durable.Backend, done func() error, err error) {
	if r.cfg.Store == StoreNone {
		return nil, func() error { return nil }, nil
	}
	dir, err := os.MkdirTemp("", "hotcount-longtail-")
	if err != nil {
		return nil, nil, err
	}
	sdb, err := sqlite.OpenFolder(ctx, dir, false)
	if err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	return sdb, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := sdb.Stats(sctx)
		r.ckRows.Store(st.Rows["checkpoints"])
		return errors.Join(err, sdb.Close(), os.RemoveAll(dir))
	}, nil
}

// drive runs redis-benchmark for workload w: the tail (-r Keys) with
// tailArgs and keys tailPfx + a random number, and in the mixed workload
// the viral key beside it, at once. The reads workload sends GETs of the
// tail's keys instead of INCRs.
func (r *ltRun) drive(ctx context.Context, w string, tailArgs []string, tailPfx string, viralArgs []string, viralKey string) (int64, int64, time.Duration, error) {
	return r.driveN(ctx, w, r.cfg.TailClients, tailArgs, tailPfx, viralArgs, viralKey)
}

// driveN is drive with clients callers of the tail (half of them in the
// mixed workload).
func (r *ltRun) driveN(ctx context.Context, w string, clients int, tailArgs []string, tailPfx string, viralArgs []string, viralKey string) (int64, int64, time.Duration, error) {
	if w == "mixed" {
		clients = max(1, clients/2)
	}
	cmd := "INCR"
	if w == "reads" {
		cmd = "GET"
	}
	n := strconv.Itoa(r.cfg.Requests)
	start := time.Now()
	var wg sync.WaitGroup
	var tailErr, viralErr error
	wg.Go(func() {
		args := append(slices.Clone(tailArgs), "-q", "-n", n, "-c", strconv.Itoa(clients), "-r", strconv.Itoa(r.cfg.Keys), cmd, tailPfx+"__rand_int__")
		tailErr = r.benchmark(ctx, args)
	})
	var viral int64
	if w == "mixed" {
		viral = int64(r.cfg.Requests)
		wg.Go(func() {
			args := append(slices.Clone(viralArgs), "-q", "-n", n, "-c", strconv.Itoa(r.cfg.ViralClients), "INCR", viralKey)
			viralErr = r.benchmark(ctx, args)
		})
	}
	wg.Wait()
	return int64(r.cfg.Requests) + viral, viral, time.Since(start), errors.Join(tailErr, viralErr)
}

// benchmark runs redis-benchmark with args; messages show them without
// the password.
func (r *ltRun) benchmark(ctx context.Context, args []string) error {
	cmd := exec.CommandContext(ctx, r.cfg.Benchmark, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w: %s", r.cfg.Benchmark, strings.Join(redactPassword(args), " "), err, out)
	}
	if s := string(out); strings.Contains(s, "ERR") || strings.Contains(s, "Error") {
		return fmt.Errorf("bench: %s reported errors: %s", r.cfg.Benchmark, lastLines(s, 5))
	}
	return nil
}

// redactPassword returns args with the password after -a replaced, for
// messages.
func redactPassword(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-a" {
			out[i+1] = "***"
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// libDirect drives the workload with the bench's own callers, one plain
// INCR per increment on a rueidis cluster client, as fast as they go, and
// records the rates reached (tail, viral) for the library case.
func (r *ltRun) libDirect(ctx context.Context, w, pfx string, rate *[2]float64) (int64, int64, time.Duration, error) {
	incr := func(ctx context.Context, key string) error {
		return r.b.rc.Do(ctx, r.b.rc.B().Incr().Key(key).Build()).Error()
	}
	tail, viral, d, err := r.callers(ctx, w, pfx, incr, [2]float64{})
	rate[0], rate[1] = float64(tail)/d.Seconds(), float64(viral)/d.Seconds()
	return tail + viral, viral, d, err
}

// library drives the workload through Client.Incr of a buffered
// namespace, paced at the rates libDirect reached.
func (r *ltRun) library(ctx context.Context, w, pfx string, rate [2]float64) (incrs, viral int64, d time.Duration, err error) {
	db, closeDB, err := r.openStore(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, closeDB()) }()
	hc, err := hotcount.New(ctx, hotcount.Config{
		Redis:      r.redis,
		Namespaces: []hotcount.Namespace{{Prefix: pfx, Buffered: true, FlushInterval: r.cfg.Flush}},
		Durability: hotcount.DurabilityConfig{Store: db},
	})
	if err != nil {
		return 0, 0, 0, err
	}
	incr := func(ctx context.Context, key string) error { return hc.Incr(ctx, key, 1) }
	tail, viral, d, err := r.callers(ctx, w, pfx, incr, rate)
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tail + viral, viral, d, errors.Join(err, hc.Close(cctx))
}

// callers runs the workload's callers for LibDuration: tail callers on
// uniform random keys pfx+0..Keys-1 and, in the mixed workload, viral
// callers on pfx+"viral". With a rate (per second, tail and viral), the
// callers of each group share it, in steps of a millisecond.
func (r *ltRun) callers(ctx context.Context, w, pfx string, incr func(context.Context, string) error, rate [2]float64) (tail, viral int64, d time.Duration, err error) {
	tailN, viralN := r.cfg.TailClients, 0
	if w == "mixed" {
		tailN, viralN = max(1, tailN/2), r.cfg.ViralClients
	}
	var counts [2]atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	end := start.Add(r.cfg.LibDuration)
	var wg sync.WaitGroup
	group := func(g, n int, key func(*rand.Rand) string) {
		for i := range n {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				per := rate[g] / float64(n) // per caller per second; 0: unpaced
				done := 0
				for {
					now := time.Now()
					if !now.Before(end) {
						return
					}
					if per > 0 && float64(done) >= per*now.Sub(start).Seconds() {
						time.Sleep(time.Millisecond)
						continue
					}
					if err := incr(ctx, key(rng)); errors.Is(err, hotcount.ErrBackpressure) {
						// The buffer holds its bound of keys: wait for
						// a flush, as a caller honouring it would.
						r.refused.Add(1)
						time.Sleep(time.Millisecond)
						continue
					} else if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					done++
					counts[g].Add(1)
				}
			})
		}
	}
	group(0, tailN, func(rng *rand.Rand) string { return pfx + strconv.Itoa(rng.IntN(r.cfg.Keys)) })
	group(1, viralN, func(*rand.Rand) string { return pfx + "viral" })
	wg.Wait()
	d = time.Since(start)
	if e, ok := firstErr.Load().(error); ok {
		err = e
	}
	return counts[0].Load(), counts[1].Load(), d, err
}

// infoInt returns the integer field name of an INFO reply (0 if absent).
func infoInt(s, name string) int64 {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == name {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// keyspaceKeys sums keys= of every db line of INFO keyspace.
func keyspaceKeys(s string) int64 {
	var total int64
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "db") {
			continue
		}
		_, rest, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(rest, ",") {
			if k, v, ok := strings.Cut(f, "="); ok && k == "keys" {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// WriteText prints the report as a table and its ratios.
func (rep *LongTailReport) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d primaries: %s\n", len(rep.Primaries), strings.Join(rep.Primaries, " "))
	fmt.Fprintf(bw, "durable store of the hotcount cases: %s\n", cmp.Or(rep.Store, "-"))
	fmt.Fprintf(bw, "the idle cluster: %.1f ms of CPU per second (subtracted in less-idle)\n\n", rep.IdleCPUPerSecond*1e3)
	fmt.Fprintf(bw, "%-9s %-15s %-8s %11s %8s %9s %9s %11s %10s %9s %9s %7s %8s %9s %8s %9s\n", "workload", "path", "store", "increments", "incr/s", "cpu/incr", "less-idle", "mem added", "keys added", "counters", "idem", "meta", "B/ctr", "writes/in", "reads/in", "cmd/incr")
	for _, c := range rep.Cases {
		fmt.Fprintf(bw, "%-9s %-15s %-8s %11d %8.0f %7.2fµs %7.2fµs %10.1fM %10d %9d %9d %7d %8.1f %9.3f %8.3f %7.2fµs\n",
			c.Workload, c.Path, cmp.Or(c.Store, "-"), c.Increments, div(float64(c.Increments), c.Seconds), c.CPUPerIncrUS, c.CPUPerIncrLessIdleUS, float64(c.BytesAdded)/1e6, c.KeysAdded, c.Counters, c.IdempotencyKeys, c.MetaKeys, c.BytesPerCounter, c.WritesPerIncr, c.ReadsPerIncr, c.CommandUSPerIncr)
	}
	fmt.Fprintln(bw)
	for _, c := range rep.Cases {
		if c.ViralWritesPerIncr > 0 {
			fmt.Fprintf(bw, "%s, %s: the viral key reached the cache as at most %.4f writes per increment (1/%.0f)\n", c.Workload, c.Path, c.ViralWritesPerIncr, 1/c.ViralWritesPerIncr)
		}
	}
	for _, c := range rep.Cases {
		if c.Store == StoreEmbedded {
			fmt.Fprintf(bw, "%s, %s: the embedded store held %d checkpoint rows after the run\n", c.Workload, c.Path, c.CheckpointRows)
		}
	}
	for _, r := range rep.Ratios {
		fmt.Fprintf(bw, "%s, %s against direct: CPU per increment %.2fx (less the idle cluster's %.2fx), memory per counter %.2fx, idempotency keys %.4f per counter key\n", r.Workload, r.Path, r.CPU, r.CPULessIdle, r.Memory, r.IdempotencyShare)
	}
	return bw.Flush()
}
