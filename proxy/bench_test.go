package proxy_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/cgroup"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// The absorption benchmark runs redis-benchmark, side by side in one run,
// against:
//
//   - the proxy, INCR on a counter key of a buffered namespace;
//   - the primary that owns a plain key, INCR on that key (direct);
//   - a bare redcon server that answers INCR from memory (the ceiling of
//     a Go RESP server on this machine);
//
// then GET and SET of a plain key through the proxy and directly. It
// reports throughputs, their ratios, p50/p99, and the cluster's writes
// for the proxy run (INFO commandstats on every primary) against the
// increments, after a flush; the total must be exact.
//
//	go test ./proxy -run '^$' -bench Absorption -benchtime 1x
//
// The flags of redis-benchmark: HOTCOUNT_BENCH_CLIENTS (default 50),
// HOTCOUNT_BENCH_REQUESTS (default 200000), HOTCOUNT_BENCH_PIPELINE
// (default 1).

// benchResult is one redis-benchmark run (its --csv line).
type benchResult struct {
	rps, p50, p99 float64
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// redisBenchmark runs redis-benchmark against addr with the given command.
func redisBenchmark(b testing.TB, addr string, clients, requests, pipeline int, cmd ...string) benchResult {
	b.Helper()
	bin := need(b, "redis-benchmark", "", "redis-tools")
	host, port := hostPort(b, addr)
	args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests),
		"-P", strconv.Itoa(pipeline), "--csv"}, cmd...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark %v: %v\n%s", args, err, out)
	}
	var lines []string // the CSV, without warnings
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "\"") {
			lines = append(lines, l)
		}
	}
	recs, err := csv.NewReader(strings.NewReader(strings.Join(lines, "\n"))).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 7 {
		b.Fatalf("redis-benchmark %v: output %q (%v)", args, out, err)
	}
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	return benchResult{rps: f(recs[1][1]), p50: f(recs[1][4]), p99: f(recs[1][6])}
}

// bareServer is a redcon server that answers INCR, GET and SET from
// memory and PING/CONFIG for redis-benchmark: the ceiling of a Go RESP
// server, with nothing behind it.
func bareServer(b testing.TB) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	vals := map[string]int64{}
	strs := map[string]string{}
	srv := redcon.NewServerNetwork("tcp", "", func(conn redcon.Conn, cmd redcon.Command) {
		switch strings.ToLower(string(cmd.Args[0])) {
		case "incr":
			mu.Lock()
			vals[string(cmd.Args[1])]++
			v := vals[string(cmd.Args[1])]
			mu.Unlock()
			conn.WriteInt64(v)
		case "set":
			mu.Lock()
			strs[string(cmd.Args[1])] = string(cmd.Args[2])
			mu.Unlock()
			conn.WriteString("OK")
		case "get":
			mu.Lock()
			v, ok := strs[string(cmd.Args[1])]
			mu.Unlock()
			if !ok {
				conn.WriteNull()
			} else {
				conn.WriteBulkString(v)
			}
		case "config":
			conn.WriteArray(0)
		default:
			conn.WriteString("PONG")
		}
	}, nil, nil)
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// clusterWrites returns the write calls (INCRBY, EVALSHA, EVAL, SET, MSET)
// recorded by INFO commandstats on every primary.
func clusterWrites(b testing.TB, cl *testenv.Cluster) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, p := range ps {
		st, err := testenv.CommandStats(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		n += st["incrby"] + st["incr"] + st["evalsha"] + st["eval"] + st["set"] + st["mset"]
	}
	return n
}

// BenchmarkAbsorption runs redis-benchmark INCR on a buffered counter key
// through the proxy, beside the same load on a plain key sent directly to
// the primary that owns it and to a bare redcon server that answers INCR
// from memory (the ceiling of a Go RESP server here). The three alternate,
// HOTCOUNT_BENCH_ROUNDS times (default 3) in one run, so that the
// machine's other load hits them alike; each round checks the counter's
// total after the flush and the cluster's writes (INFO commandstats), and
// the medians of the ratios are reported.
//
//	go test ./proxy -run '^$' -bench Absorption -benchtime 1x
func BenchmarkAbsorption(b *testing.B) {
	clients := envInt("HOTCOUNT_BENCH_CLIENTS", 50)
	requests := envInt("HOTCOUNT_BENCH_REQUESTS", 200000)
	pipeline := envInt("HOTCOUNT_BENCH_PIPELINE", 1)
	rounds := envInt("HOTCOUNT_BENCH_ROUNDS", 3)
	requests -= requests % pipeline // redis-benchmark sends whole pipelines
	defer proxyProcs(b)()
	for i := 0; i < b.N; i++ {
		p := uniq(b)
		e := startProxy(b, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true}}, proxy.Config{})
		plain := "{" + p + "}plain"
		direct := ownerOfTB(b, cluster, plain)
		bare := bareServer(b)
		ctx := context.Background()
		rd, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Reads: hotcount.ReadConfig{NoCache: true}})
		if err != nil {
			b.Fatal(err)
		}
		defer rd.Close(ctx)

		b.Logf("redis-benchmark -c %d -n %d -P %d, %d rounds alternating proxy, direct and bare:", clients, requests, pipeline, rounds)
		var pdR, pbR, bdR, p50, p99, wR []float64
		for r := 1; r <= rounds; r++ {
			// A new counter each round, so that each total is checked.
			counterKey := fmt.Sprintf("%slikes:post:%d", p, 42+r)
			if err := cluster.ResetStats(ctx); err != nil {
				b.Fatal(err)
			}
			viaProxy := redisBenchmark(b, e.addr, clients, requests, pipeline, "INCR", counterKey)
			if err := e.client.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			writes := clusterWrites(b, cluster)
			onDirect := redisBenchmark(b, direct, clients, requests, pipeline, "INCR", plain)
			onBare := redisBenchmark(b, bare, clients, requests, pipeline, "INCR", plain)
			// The total, read afresh from the cluster.
			total, err := rd.Get(ctx, counterKey)
			if err != nil {
				b.Fatal(err)
			}
			if total.Value != int64(requests) {
				b.Fatalf("after the flush the counter holds %d, %d increments were sent", total.Value, requests)
			}
			if float64(writes) > float64(requests)/100 {
				b.Errorf("the cluster took %d writes for %d increments: more than 1/100", writes, requests)
			}
			pdR = append(pdR, viaProxy.rps/onDirect.rps)
			pbR = append(pbR, viaProxy.rps/onBare.rps)
			bdR = append(bdR, onBare.rps/onDirect.rps)
			p50 = append(p50, viaProxy.p50)
			p99 = append(p99, viaProxy.p99)
			wR = append(wR, float64(writes)/float64(requests))
			b.Logf("  round %d: INCR proxy %6.0f/s (p50 %.3f p99 %.3f ms) | direct %6.0f/s (p50 %.3f p99 %.3f ms) | bare %6.0f/s (p50 %.3f p99 %.3f ms) | proxy/direct %.2f proxy/bare %.2f bare/direct %.2f | cluster writes %d (1/%.0f), total %d exact",
				r, viaProxy.rps, viaProxy.p50, viaProxy.p99, onDirect.rps, onDirect.p50, onDirect.p99, onBare.rps, onBare.p50, onBare.p99,
				pdR[r-1], pbR[r-1], bdR[r-1], writes, float64(requests)/float64(max(writes, 1)), total.Value)
		}
		b.Logf("  median: proxy/direct %.2f, proxy/bare %.2f, bare/direct %.2f; proxy p50 %.3f ms, p99 %.3f ms",
			median(pdR), median(pbR), median(bdR), median(p50), median(p99))
		b.ReportMetric(median(pdR), "proxy/direct")
		b.ReportMetric(median(pbR), "proxy/bare")
		b.ReportMetric(median(bdR), "bare/direct")
		b.ReportMetric(median(p50), "proxy-p50-ms")
		b.ReportMetric(median(p99), "proxy-p99-ms")
		b.ReportMetric(median(wR), "writes/incr")
	}
}

// ownerOfTB returns the primary of cl that owns key's slot.
func ownerOfTB(b testing.TB, cl *testenv.Cluster, key string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range ps {
		if _, err := testenv.Do(ctx, p, "EXISTS", key); err == nil {
			return p
		}
	}
	b.Fatalf("no primary owns %q", key)
	return ""
}

// CPUCap, when set, puts the process pid under its own equal CPU share.
// BenchmarkScaleOut sets it from the machine's cgroup cpu controller
// (internal/cgroup, as `hotcount cluster up --node-cpu` caps Redis nodes)
// when it can write there.
var CPUCap func(pid int) (*procCap, error)

// procCap is the CPU share of one process.
type procCap struct {
	h     cgroup.Hierarchy
	group string
}

// throttled returns the part of the accounting periods in which the
// process hit its quota: near 1 when the cap bounded it, low when it
// waited for something else (the machine's other load, the load
// generator).
func (p *procCap) throttled() float64 {
	st, err := p.h.Stat(p.group)
	if err != nil || st.Periods == 0 {
		return 0
	}
	return float64(st.Throttled) / float64(st.Periods)
}

// release removes the share once the process has exited.
func (p *procCap) release() error { return p.h.Remove(p.group) }

// cgroupCaps returns a CPUCap that gives each process a group of its own
// under parent with quota q, on the machine's cpu hierarchy, or the reason
// why groups cannot be made here.
func cgroupCaps(parent string, q cgroup.Quota) (func(pid int) (*procCap, error), error) {
	h, err := cgroup.Find()
	if err != nil {
		return nil, err
	}
	if err := h.Check(parent); err != nil {
		return nil, fmt.Errorf("cannot create CPU groups on %v (run as root, or with a cgroup delegated to this user): %w", h, err)
	}
	return func(pid int) (*procCap, error) {
		group := parent + "/proxy-" + strconv.Itoa(pid)
		if err := h.Create(group, q); err != nil {
			return nil, err
		}
		if err := h.Add(group, pid); err != nil {
			h.Remove(group)
			return nil, err
		}
		return &procCap{h: h, group: group}, nil
	}, nil
}

// BenchmarkScaleOut runs 1, 2 and 4 `hotcount proxy` processes in front
// of the shared cluster, each under its own equal CPU cap
// (HOTCOUNT_BENCH_PROXY_CPU, default 10% of one CPU, a cgroup each), each
// driven by its own redis-benchmark -c 50 on one counter key (buffered,
// 500 ms flushes), and reports the increments absorbed per second and the
// cluster's writes per second (INFO commandstats) for each count. Where
// cgroups cannot be written (not root, no cpu controller) it is skipped
// and says why; HOTCOUNT_BENCH_UNCAPPED=1 runs it uncapped instead, where
// the proxies share the machine's cores and the absorbed rate cannot grow
// with their count.
//
//	go test ./proxy -run '^$' -bench ScaleOut -benchtime 1x
func BenchmarkScaleOut(b *testing.B) {
	share := os.Getenv("HOTCOUNT_BENCH_PROXY_CPU")
	if share == "" {
		share = "10%"
	}
	q, err := cgroup.ParseCPU(share)
	if err != nil {
		b.Fatal(err)
	}
	capped := CPUCap != nil
	if !capped {
		caps, err := cgroupCaps(fmt.Sprintf("hotcount/bench-scaleout-%d", os.Getpid()), q)
		switch {
		case err == nil:
			CPUCap, capped = caps, true
			defer func() { CPUCap = nil }()
		case os.Getenv("HOTCOUNT_BENCH_UNCAPPED") == "1":
			b.Logf("no CPU caps (%v): proxies run uncapped on shared cores", err)
		default:
			b.Skipf("the scale-out table needs a CPU cap per proxy: %v; HOTCOUNT_BENCH_UNCAPPED=1 runs it uncapped", err)
		}
	}
	bin := filepath.Join(b.TempDir(), "hotcount")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/hotcount").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(b.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("namespaces:\n  - {prefix: \"scale:\", buffered: true}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	requests := envInt("HOTCOUNT_BENCH_REQUESTS", 50000)
	for i := 0; i < b.N; i++ {
		if capped {
			b.Logf("each proxy capped at %v; redis-benchmark -c 50 -n %d INCR per proxy", q, requests)
		}
		b.Logf("| proxies | increments/s | per proxy | cluster writes/s | writes/s per proxy | writes/increment | periods throttled |")
		b.Logf("|---|---|---|---|---|---|---|")
		for _, n := range []int{1, 2, 4} {
			key := fmt.Sprintf("scale:%s:%d", uniq(b), n)
			var addrs []string
			var caps []*procCap
			for j := 0; j < n; j++ {
				a, c := startProxyProcess(b, bin, cfg)
				addrs = append(addrs, a)
				if c != nil {
					caps = append(caps, c)
				}
			}
			ctx := context.Background()
			if err := cluster.ResetStats(ctx); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			var wg sync.WaitGroup
			for _, a := range addrs {
				wg.Add(1)
				go func() { defer wg.Done(); redisBenchmark(b, a, 50, requests, 1, "INCR", key) }()
			}
			wg.Wait()
			elapsed := time.Since(start)
			writes := clusterWrites(b, cluster)
			total := float64(n * requests)
			rate, wps := total/elapsed.Seconds(), float64(writes)/elapsed.Seconds()
			var thr []string
			for _, c := range caps {
				thr = append(thr, fmt.Sprintf("%.0f%%", 100*c.throttled()))
			}
			b.Logf("| %d | %.0f | %.0f | %.1f | %.1f | %.5f | %s |", n, rate, rate/float64(n), wps, wps/float64(n), float64(writes)/total, strings.Join(thr, " "))
			b.ReportMetric(rate, fmt.Sprintf("incr/s-%dproxies", n))
			b.ReportMetric(wps, fmt.Sprintf("writes/s-%dproxies", n))
		}
	}
}

// startProxyProcess runs `hotcount proxy` as a process (under CPUCap when
// set) and returns its Redis address and its cap (nil without CPUCap).
func startProxyProcess(b testing.TB, bin, cfg string) (string, *procCap) {
	b.Helper()
	cmd := exec.Command(bin, "proxy", "--resp-listen", "127.0.0.1:0", "--admin-listen", "off",
		"--redis", strings.Join(cluster.Seeds(), ","), "--config", cfg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var pc *procCap
	b.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if pc != nil {
			if err := pc.release(); err != nil {
				b.Errorf("removing the proxy's CPU group: %v", err)
			}
		}
	})
	if CPUCap != nil {
		var err error
		if pc, err = CPUCap(cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 256)
	var line string
	for !strings.Contains(line, "\n") {
		n, err := out.Read(buf)
		if err != nil {
			b.Fatalf("proxy process: %v (%q)", err, line)
		}
		line += string(buf[:n])
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on redis://")
	if !ok {
		b.Fatalf("proxy process said %q", line)
	}
	return addr, pc
}

// BenchmarkPassThrough runs redis-benchmark SET and GET of a plain key
// through the proxy and directly on the primary that owns the key,
// alternating, HOTCOUNT_BENCH_ROUNDS times (default 5) in one run, and
// reports each round's ratio proxy/direct and their medians. The machine
// is shared, so the rounds show the spread.
//
//	go test ./proxy -run '^$' -bench PassThrough -benchtime 1x
func BenchmarkPassThrough(b *testing.B) {
	clients := envInt("HOTCOUNT_BENCH_CLIENTS", 50)
	requests := envInt("HOTCOUNT_BENCH_REQUESTS", 100000)
	pipeline := envInt("HOTCOUNT_BENCH_PIPELINE", 1)
	rounds := envInt("HOTCOUNT_BENCH_ROUNDS", 5)
	requests -= requests % pipeline
	defer proxyProcs(b)()
	for i := 0; i < b.N; i++ {
		p := uniq(b)
		e := startProxy(b, nil, proxy.Config{})
		key := "{" + p + "}pt"
		direct := ownerOfTB(b, cluster, key)
		dialRaw(b, e.addr).do("SET", key, "0123456789abcdef")
		var setR, getR []float64
		b.Logf("redis-benchmark -c %d -n %d -P %d, requests/s:", clients, requests, pipeline)
		var cpuR []float64
		// viaProxy runs redis-benchmark through the proxy and also
		// returns the proxy's CPU time per request (this process's, in
		// which the proxy runs), a figure the machine's noise moves less.
		viaProxy := func(cmd ...string) (benchResult, float64) {
			t0 := processCPU(b)
			res := redisBenchmark(b, e.addr, clients, requests, pipeline, cmd...)
			return res, float64((processCPU(b) - t0).Microseconds()) / float64(requests)
		}
		for r := 1; r <= rounds; r++ {
			// SET first in odd rounds, GET first in even ones, so that
			// neither always follows the other.
			var setP, setD, getP, getD benchResult
			var setCPU, getCPU float64
			sets := func() {
				setP, setCPU = viaProxy("SET", key, "0123456789abcdef")
				setD = redisBenchmark(b, direct, clients, requests, pipeline, "SET", key, "0123456789abcdef")
			}
			gets := func() {
				getP, getCPU = viaProxy("GET", key)
				getD = redisBenchmark(b, direct, clients, requests, pipeline, "GET", key)
			}
			if r%2 == 1 {
				sets()
				gets()
			} else {
				gets()
				sets()
			}
			setR = append(setR, setP.rps/setD.rps)
			getR = append(getR, getP.rps/getD.rps)
			cpuR = append(cpuR, (setCPU+getCPU)/2)
			b.Logf("  round %d: SET proxy %7.0f direct %7.0f ratio %.2f | GET proxy %7.0f direct %7.0f ratio %.2f | proxy CPU %.1f / %.1f µs per SET / GET",
				r, setP.rps, setD.rps, setR[r-1], getP.rps, getD.rps, getR[r-1], setCPU, getCPU)
		}
		b.Logf("  median ratio: SET %.2f, GET %.2f; median proxy CPU %.1f µs per command", median(setR), median(getR), median(cpuR))
		b.ReportMetric(median(setR), "set-proxy/direct")
		b.ReportMetric(median(getR), "get-proxy/direct")
		b.ReportMetric(median(cpuR), "proxy-cpu-µs/cmd")
	}
}

// proxyProcs runs the benchmark's Go side (the proxy, and the bare server
// that is its ceiling) on HOTCOUNT_BENCH_PROXY_PROCS CPUs, default 1 as
// `hotcount proxy` does (its resp_procs); 0 keeps Go's default. It returns
// the function that restores GOMAXPROCS.
func proxyProcs(b *testing.B) func() {
	n := envInt("HOTCOUNT_BENCH_PROXY_PROCS", 1)
	if n <= 0 {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(n)
	b.Logf("the proxy and the bare server run with GOMAXPROCS %d (HOTCOUNT_BENCH_PROXY_PROCS)", n)
	return func() { runtime.GOMAXPROCS(prev) }
}

// median returns the median of v (v is sorted in place).
func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
