package hotcount_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
)

// TestRegionsMeasure measures regions on this machine (two regions on
// loopback, 50 ms each way between them, default ship interval 1 s):
// what a viral key costs the peer, what regions add to the local cost of
// a long tail of cold counters, and the visibility lag. It runs for about
// two minutes, so only with HOTCOUNT_REGIONS_MEASURE=1; its
// figures go to docs/benchmarks-log.md.
func TestRegionsMeasure(t *testing.T) {
	if os.Getenv("HOTCOUNT_REGIONS_MEASURE") == "" {
		t.Skip("set HOTCOUNT_REGIONS_MEASURE=1 to measure regions (about 2 min)")
	}
	w := newWorld(t, "eu", "us")
	def := func(cfg *hotcount.Config) {
		cfg.ShipInterval = 0 // the default
		cfg.Timeout = 0
		cfg.Defaults = hotcount.Namespace{}
		cfg.Namespaces = []hotcount.Namespace{{Prefix: "v:", Buffered: true}} // default flush interval
	}
	eu, us := w.client(t, "eu", def), w.client(t, "us", def)
	t.Run("viral key", func(t *testing.T) { measureViral(t, w, eu, us) })
	t.Run("long tail", func(t *testing.T) { measureLongTail(t, w, eu, 0) })
	t.Run("long tail at a fixed rate", func(t *testing.T) { measureLongTail(t, w, eu, tailRate) })
	t.Run("lag", func(t *testing.T) { measureLag(t, eu, us) })
}

// tailRate is the long tail's fixed rate (increments per second), below
// what this machine takes with regions.
const tailRate = 6000

// calls sums the commands a cluster's primaries ran.
func calls(t *testing.T, cl *testenv.Cluster) (total int64, byCmd map[string]int64) {
	byCmd = map[string]int64{}
	ps, err := cl.Primaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		st, err := testenv.CommandStats(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range st {
			byCmd[k] += v
			total += v
		}
	}
	return total, byCmd
}

// commandTime sums the time (µs) each command took to run on a cluster's
// primaries (INFO commandstats usec; a script's includes the commands it
// ran), socket I/O not included.
func commandTime(t *testing.T, cl *testenv.Cluster) map[string]int64 {
	ps, err := cl.Primaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, p := range ps {
		s, err := testenv.Do(context.Background(), p, "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					x, _ := strconv.ParseInt(v, 10, 64)
					out[strings.TrimPrefix(name, "cmdstat_")] += x
				}
			}
		}
	}
	return out
}

// socketReads sums total_reads_processed (INFO stats) over a cluster's
// primaries: the reads of client sockets, one per batch of pipelined
// commands that arrived together.
func socketReads(t *testing.T, cl *testenv.Cluster) int64 {
	ps, err := cl.Primaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range ps {
		s, err := testenv.Do(context.Background(), p, "INFO", "stats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				sum += x
			}
		}
	}
	return sum
}

// cacheCPU sums used_cpu_sys and used_cpu_user of a cluster's primaries.
func cacheCPU(t *testing.T, cl *testenv.Cluster) float64 {
	ps, err := cl.Primaries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, p := range ps {
		s, err := testenv.Do(context.Background(), p, "INFO", "cpu")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					sum += x
				}
			}
		}
	}
	return sum
}

// processCPU returns the CPU time (user and system, s) this process has
// used.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// measureViral: one key at about 40,000 increments/s in eu for 10 s;
// what reaches us.
func measureViral(t *testing.T, w *world, eu, us *hotcount.Client) {
	ctx := context.Background()
	key := "v:viral"
	before := eu.Stats().Regions[0]
	usBefore, _ := calls(t, w.clusters["us"])
	const rate, dur, workers = 40000, 10 * time.Second, 4
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			sent := 0
			for now := range tick.C {
				el := now.Sub(start)
				if el > dur {
					return
				}
				want := int(el.Seconds() * rate / workers)
				for ; sent < want; sent++ {
					if err := eu.Incr(ctx, key, 1); err != nil {
						t.Error(err)
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := eu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	converge(t, key, done.Load(), map[string]*hotcount.Client{"eu": eu, "us": us})
	after := eu.Stats().Regions[0]
	usAfter, _ := calls(t, w.clusters["us"])
	recs := after.Shipped - before.Shipped
	t.Logf("viral key: %d increments in %.1f s (%.0f/s) in eu; %d records shipped to us (%.2f/s, %d B), us ran %d commands in all (%.1f/s, the shipper's rounds and probes included); both read %d",
		done.Load(), el.Seconds(), float64(done.Load())/el.Seconds(), recs, float64(recs)/el.Seconds(), after.Bytes-before.Bytes,
		usAfter-usBefore, float64(usAfter-usBefore)/el.Seconds(), done.Load())
	if float64(recs)/el.Seconds() > 5 {
		t.Errorf("the viral key cost us %.1f records/s, want a few", float64(recs)/el.Seconds())
	}
}

// measureLongTail: unbuffered increments of random keys among 100,000
// (cold counters), by 8 workers for 5 s, from a Client without regions
// and from one in region eu, alternated three times on the same cluster:
// cache commands and cache CPU per increment (the region's until its
// outbox to us is empty, the shipping included), and increments per
// second.
//
// With rate > 0 the 8 workers offer rate increments per second in all
// (open loop) instead of as many as they can: both Clients then run at
// the same rate, so that the cache batches their commands alike, and
// what differs is what regions add (on this one machine the peer's cache
// and the shipping compete with the load for the CPUs, which lowers a
// closed loop's rate with regions and raises every command's cost).
func measureLongTail(t *testing.T, w *world, eu *hotcount.Client, rate int) {
	ctx := context.Background()
	plain, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: w.clusters["eu"].Seeds()}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	// The outbox to us is watched through one client that keeps its
	// connections and knows the slots: a command of the cluster tools
	// (cl.Do) dials a node and runs CLUSTER NODES each time, which the
	// region's runs alone would pay.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: w.clusters["eu"].Seeds(), DisableCache: true,
		ClientSetInfo: rueidis.DisableClientSetInfo})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var xlens rueidis.Commands
	for s := range 16 {
		// The outbox of each shard, and that of the earlier layout.
		for _, kind := range []string{"outbox", "outlog"} {
			xlens = append(xlens, rc.B().Xlen().Key(fmt.Sprintf("hotcount:rg:%s:{hotcount-rg-%d}:us", kind, s)).Build().Pin())
		}
	}
	run := func(name string, c *hotcount.Client) {
		if rate > 0 {
			name += fmt.Sprintf(", offered %d/s", rate)
		}
		time.Sleep(2 * time.Second) // let the previous run's shipping end
		cl := w.clusters["eu"]
		// The cluster's own CPU while idle (its cron), per second: a run
		// at a lower rate spreads it over fewer increments.
		idle0, idleAt := cacheCPU(t, cl), time.Now()
		time.Sleep(2 * time.Second)
		idle := (cacheCPU(t, cl) - idle0) / time.Since(idleAt).Seconds()
		c0, by0 := calls(t, cl)
		reads0, us0 := socketReads(t, cl), commandTime(t, cl)
		cpu0, cpuAt := cacheCPU(t, cl), time.Now()
		peer0, proc0 := cacheCPU(t, w.clusters["us"]), processCPU()
		peerUs0, peerReads0 := commandTime(t, w.clusters["us"]), socketReads(t, w.clusters["us"])
		shipped0 := shippedRecords(c)
		var n atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sent := 0
				for el := time.Since(start); el < 5*time.Second; el = time.Since(start) {
					if rate > 0 {
						if want := int(el.Seconds() * float64(rate) / 8); sent >= want {
							time.Sleep(time.Millisecond)
							continue
						}
					}
					if err := c.Incr(ctx, "tail:"+strconv.Itoa(rand.IntN(100000)), 1); err != nil {
						t.Error(err)
						return
					}
					sent++
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		// The shipping of the run's counters is part of its cost: wait
		// until the outbox to us is empty.
		deadline := time.Now().Add(2 * time.Minute)
		for c.Region() != "" {
			var left int64
			for _, r := range rc.DoMulti(ctx, xlens...) {
				m, err := r.AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				left += m
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		shipped := time.Since(start) - el
		time.Sleep(2 * time.Second)
		c1, by := calls(t, cl)
		reads1, us1 := socketReads(t, cl), commandTime(t, cl)
		cpu1 := cacheCPU(t, cl)
		peer1, proc1 := cacheCPU(t, w.clusters["us"]), processCPU()
		peerUs1, peerReads1 := commandTime(t, w.clusters["us"]), socketReads(t, w.clusters["us"])
		var peerSpent []string
		for k, v := range peerUs1 {
			if d := float64(v-peerUs0[k]) / float64(n.Load()); d >= 0.05 {
				peerSpent = append(peerSpent, fmt.Sprintf("%s %.2f", k, d))
			}
		}
		slices.Sort(peerSpent)
		net := cpu1 - cpu0 - idle*time.Since(cpuAt).Seconds()
		var per []string
		for k, v := range by {
			if d := float64(v-by0[k]) / float64(n.Load()); d >= 0.01 {
				per = append(per, fmt.Sprintf("%s %.2f", strings.TrimPrefix(k, "cmdstat_"), d))
			}
		}
		slices.Sort(per)
		var spent []string
		var run float64
		for k, v := range us1 {
			d := float64(v-us0[k]) / float64(n.Load())
			run += d
			if d >= 0.05 {
				spent = append(spent, fmt.Sprintf("%s %.2f", k, d))
			}
		}
		slices.Sort(spent)
		t.Logf("long tail, %s: %.2f µs per increment running commands (%s)", name, run, strings.Join(spent, ", "))
		t.Logf("long tail, %s: %.0f increments/s; %.2f cache commands, %.2f socket reads and %.1f µs of cache CPU per increment, %.1f µs less the idle cluster's (until 2 s after the outbox emptied, %.1f s after the run; per increment: %s)",
			name, float64(n.Load())/el.Seconds(), float64(c1-c0)/float64(n.Load()), float64(reads1-reads0)/float64(n.Load()), (cpu1-cpu0)*1e6/float64(n.Load()),
			net*1e6/float64(n.Load()), shipped.Seconds(), strings.Join(per, ", "))
		if c.Region() != "" {
			t.Logf("long tail, %s: %.2f records shipped per increment", name, float64(shippedRecords(c)-shipped0)/float64(n.Load()))
		}
		t.Logf("long tail, %s: per increment, %.1f µs of the peer's cache CPU (us, idle included; %.2f socket reads, µs running commands: %s), %.1f µs of this process's CPU (the writers, the shipping, the links' fault proxies)",
			name, (peer1-peer0)*1e6/float64(n.Load()), float64(peerReads1-peerReads0)/float64(n.Load()), strings.Join(peerSpent, ", "), (proc1-proc0)*1e6/float64(n.Load()))
	}
	for range 3 {
		run("without regions", plain)
		run("region eu", eu)
	}
	// What eu's counters cost us: keys in all (us writes none of its
	// own here).
	ps, err := w.clusters["us"].Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys int64
	for _, p := range ps {
		v, err := testenv.Do(ctx, p, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		keys += n
	}
	t.Logf("long tail: us holds %d keys for eu's counters (up to 100,000 written there)", keys)
}

// shippedRecords returns the records c's region shipped to its peers
// (0 without regions).
func shippedRecords(c *hotcount.Client) uint64 {
	var n uint64
	for _, l := range c.Stats().Regions {
		n += l.Shipped
	}
	return n
}

// measureLag: while eu runs the mixed load of the long-tail benchmark (a
// long tail of cold counters, 4 writers, and one viral buffered key at
// about 40,000/s),
// an increment is made in eu every 100 ms, and us reads the counter
// uncached until it sees it; the lag is from the increment's
// acknowledgement to that read.
func measureLag(t *testing.T, eu, us *hotcount.Client) {
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var viral atomic.Int64
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = eu.Incr(ctx, "tail:"+strconv.Itoa(rand.IntN(100000)), 1)
			}
		}()
		// The viral key at about 40,000/s in all: 10 increments per
		// millisecond per writer.
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				for range 10 {
					if eu.Incr(ctx, "v:viral:mixed", 1) == nil {
						viral.Add(1)
					}
				}
			}
		}()
	}
	began := time.Now()
	defer func() {
		close(stop)
		wg.Wait()
		t.Logf("the viral key took %.0f increments/s in eu meanwhile", float64(viral.Load())/time.Since(began).Seconds())
	}()
	for _, prefix := range []string{"lag:", "v:lag:"} {
		var lags []time.Duration
		var mu sync.Mutex
		var pw sync.WaitGroup
		for i := range 150 {
			key := fmt.Sprintf("%s%d", prefix, i)
			if err := eu.Incr(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
			acked := time.Now()
			pw.Add(1)
			go func() {
				defer pw.Done()
				for time.Since(acked) < 30*time.Second {
					if r, err := us.GetFresh(ctx, key); err == nil && r.Value == 1 {
						mu.Lock()
						lags = append(lags, time.Since(acked))
						mu.Unlock()
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				t.Errorf("%s not seen in us after 30 s", key)
			}()
			time.Sleep(100 * time.Millisecond)
		}
		pw.Wait()
		slices.Sort(lags)
		if len(lags) == 0 {
			continue
		}
		p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
		t.Logf("lag, %s counters (%d samples): p50 %v, p99 %v, max %v", strings.TrimSuffix(prefix, ":"), len(lags),
			p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	}
}
