package hotcount_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
)

// TestCreateThenExpire is the create-then-expire run, on the test cluster
// and PostgreSQL; it runs only with HOTCOUNT_SOAK_EXPIRE=1 (it takes a few
// minutes). 10,000 long-lived counters are the baseline; 200,000 counters
// of a namespace with a TTL (HOTCOUNT_SOAK_EXPIRE_TTL, default 2m) are
// created, and after the longest TTL plus the tombstone retention, one
// clean-up pass runs. Then Redis's key count (DBSIZE summed over the
// primaries) and the store's rows are back within 5% of the baseline. The
// figures before, at the peak and after are logged. HOTCOUNT_SOAK_EXPIRE_N
// changes the number of expiring counters.
func TestCreateThenExpire(t *testing.T) {
	if os.Getenv("HOTCOUNT_SOAK_EXPIRE") == "" {
		t.Skip("set HOTCOUNT_SOAK_EXPIRE=1 to run the create-then-expire run")
	}
	ttl := 2 * time.Minute
	if v := os.Getenv("HOTCOUNT_SOAK_EXPIRE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		ttl = d
	}
	temp := 200_000
	if v := os.Getenv("HOTCOUNT_SOAK_EXPIRE_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		temp = n
	}
	const (
		baseline  = 10_000
		workers   = 16
		tombstone = 10 * time.Second // the store's tombstone retention
	)
	ctx := context.Background()
	be, err := postgres.Open(ctx, postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(t),
		MaxConns: 16, TombstoneRetention: tombstone})
	if err != nil {
		t.Fatalf("open postgres (is it running at %s?): %v", testenv.PostgresURL(), err)
	}
	t.Cleanup(func() { _ = be.Close() })
	run := uniqueKey(t)
	keepNS := hotcount.Namespace{Prefix: run + ":keep:"}
	tmpNS := hotcount.Namespace{Prefix: run + ":tmp:", TTL: ttl}
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Namespaces: []hotcount.Namespace{keepNS, tmpNS},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: 2 * time.Second, CleanupInterval: time.Hour},
	})
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		keys int64
		rows map[string]int64
		all  int64
	}
	measure := func(stage string) sample {
		t.Helper()
		var s sample
		for _, p := range primaries {
			v, err := testenv.Do(ctx, p, "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("DBSIZE %s = %q", p, v)
			}
			s.keys += n
		}
		st, err := be.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.rows = st.Rows
		var tables []string
		for k, n := range st.Rows {
			s.all += n
			tables = append(tables, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(tables)
		t.Logf("%-8s Redis DBSIZE %d; store rows %d (%s), %d bytes", stage+":", s.keys, s.all, strings.Join(tables, ", "), st.Bytes)
		return s
	}
	// write increments keys prefix0..prefix(n-1) from workers goroutines.
	write := func(prefix string, n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					// A timeout on a busy machine is retried: the
					// run is about what is left, not the count.
					var err error
					for range 5 {
						if err = c.Incr(ctx, fmt.Sprintf("%s%d", prefix, i), 1+int64(i%5)); err == nil {
							break
						}
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	write(keepNS.Prefix, baseline)
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	before := measure("before")

	start := time.Now()
	write(tmpNS.Prefix, temp)
	created := time.Since(start)
	lastWrite := time.Now()
	t.Logf("created %d counters with a TTL of %v in %v", temp, ttl, created.Round(time.Millisecond))
	peak := measure("peak")
	if peak.keys < before.keys+int64(temp) {
		t.Fatalf("at the peak Redis holds %d keys, fewer than the baseline and the new counters (%d)", peak.keys, before.keys+int64(temp))
	}
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	measure("saved")
	rep, err := c.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v after the last write, the pass noted %d deadlines and expired %d counters", time.Since(lastWrite).Round(time.Millisecond), rep.Noted, rep.Expired)
	measure("noted")

	// Every deadline estimate is at most the TTL after the last write;
	// the tombstones of the expiries are kept the retention after it.
	wait := time.Until(lastWrite.Add(ttl + tombstone + time.Second))
	t.Logf("waiting %v: the longest TTL and the tombstone retention", wait.Round(time.Second))
	time.Sleep(wait)
	passStart := time.Now()
	expiredBefore := rep.Expired
	rep, err = c.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one clean-up pass in %v: %d expired, %d moved, %d unsettled, pruned %d tombstones",
		time.Since(passStart).Round(time.Millisecond), rep.Expired, rep.Moved, rep.Errors, rep.Pruned.Tombstones)
	after := measure("after")
	within := func(what string, a, b int64) {
		t.Helper()
		if d := a - b; d > b/20 || -d > b/20 {
			t.Errorf("%s after: %d, baseline %d: not within 5%%", what, a, b)
		}
	}
	within("Redis keys", after.keys, before.keys)
	within("store rows", after.all, before.all)
	for table, n := range before.rows {
		if d := after.rows[table] - n; d > max(n/20, 0) {
			t.Errorf("table %s after: %d rows, baseline %d", table, after.rows[table], n)
		}
	}
	if expiredBefore+rep.Expired != temp {
		t.Errorf("the passes expired %d counters, want %d", expiredBefore+rep.Expired, temp)
	}
	for i := 0; i < 10; i++ {
		if r, err := c.Get(ctx, fmt.Sprintf("%s%d", keepNS.Prefix, i)); err != nil || r.Value != 1+int64(i%5) {
			t.Fatalf("a long-lived counter after the run: %+v %v", r, err)
		}
	}
}
