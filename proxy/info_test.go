package proxy_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/proxy"
)

// TestInfoSections: INFO answers the fields tools and Redis's own test
// suite read, combined from the primaries: used_memory (summed),
// mem_allocator, rdb_changes_since_last_save and db0's keys, which agree
// with DBSIZE.
func TestInfoSections(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	p := uniq(t)
	for i := 0; i < 10; i++ {
		r.do("SET", p+strconv.Itoa(i), "v")
	}
	info := r.do("INFO")
	fields := map[string]string{}
	for _, l := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = v
		}
	}
	if n, _ := strconv.ParseInt(fields["used_memory"], 10, 64); n < 1<<20 {
		t.Errorf("used_memory %q: want the primaries' sum", fields["used_memory"])
	}
	if !strings.HasPrefix(fields["mem_allocator"], "jemalloc") && !strings.HasPrefix(fields["mem_allocator"], "libc") {
		t.Errorf("mem_allocator %q", fields["mem_allocator"])
	}
	if n, err := strconv.Atoi(fields["rdb_changes_since_last_save"]); err != nil || n < 10 {
		t.Errorf("rdb_changes_since_last_save %q", fields["rdb_changes_since_last_save"])
	}
	if fields["migrate_cached_sockets"] != "0" {
		t.Errorf("migrate_cached_sockets %q: want 0 (MIGRATE is refused)", fields["migrate_cached_sockets"])
	}
	if fields["cluster_enabled"] != "1" {
		t.Errorf("cluster_enabled %q", fields["cluster_enabled"])
	}
	dbsize := strings.Trim(r.do("DBSIZE"), ":\r\n")
	if !strings.HasPrefix(fields["db0"], "keys="+dbsize+",") {
		t.Errorf("db0 %q, DBSIZE %s", fields["db0"], dbsize)
	}
	if got := r.do("INFO", "keyspace"); !strings.Contains(got, "# Keyspace\r\ndb0:keys=") || strings.Contains(got, "# Server") {
		t.Errorf("INFO keyspace: %q", got)
	}
}

// TestInfoCPUAndCommandStats: INFO has Redis's CPU section (the proxy's
// own process), and Commandstats and Errorstats summed over the
// primaries; with no argument or "default" it leaves Commandstats out, as
// Redis does, and "all", "everything" or the section's name (in any case)
// bring it in. Redis's own info-command unit reads these.
func TestInfoCPUAndCommandStats(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	p := uniq(t)
	for i := 0; i < 5; i++ {
		r.do("LPUSH", p+"l", "v")
	}
	r.do("SET", p+"s", "v")
	if got := r.do("LPUSH", p+"s", "v"); !strings.HasPrefix(got, "-WRONGTYPE") {
		t.Fatalf("LPUSH on a string: %q", got)
	}
	field := func(info, name string) string {
		for _, l := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == name {
				return v
			}
		}
		return ""
	}
	for _, args := range [][]string{{"INFO"}, {"INFO", "default"}, {"INFO", "all"}, {"INFO", "everything"}, {"INFO", "cpu"}} {
		info := r.do(args...)
		if _, err := strconv.ParseFloat(field(info, "used_cpu_user"), 64); err != nil {
			t.Errorf("%q: used_cpu_user %q", args, field(info, "used_cpu_user"))
		}
		if _, err := strconv.ParseFloat(field(info, "used_cpu_sys"), 64); err != nil {
			t.Errorf("%q: used_cpu_sys %q", args, field(info, "used_cpu_sys"))
		}
		withStats := args[len(args)-1] == "all" || args[len(args)-1] == "everything"
		if got := strings.Contains(info, "rejected_calls"); got != withStats {
			t.Errorf("%q: rejected_calls shown %v, want %v", args, got, withStats)
		}
	}
	info := r.do("INFO", "commandSTATS")
	if strings.Contains(info, "used_cpu_user") || strings.Contains(info, "used_memory") {
		t.Errorf("INFO commandstats has other sections: %q", info)
	}
	lpush := field(info, "cmdstat_lpush")
	calls := strings.TrimPrefix(strings.Split(lpush, ",")[0], "calls=")
	if n, err := strconv.Atoi(calls); err != nil || n < 6 {
		t.Errorf("cmdstat_lpush %q: want at least 6 calls", lpush)
	}
	if !strings.Contains(lpush, ",failed_calls=") || !strings.Contains(lpush, ",rejected_calls=") || !strings.Contains(lpush, ",usec_per_call=") {
		t.Errorf("cmdstat_lpush %q: want Redis's fields", lpush)
	}
	errs := r.do("INFO", "errorstats")
	if n, _ := strconv.Atoi(strings.TrimPrefix(field(errs, "errorstat_WRONGTYPE"), "count=")); n < 1 {
		t.Errorf("INFO errorstats: %q", errs)
	}
	if n, _ := strconv.Atoi(field(r.do("INFO", "stats"), "total_error_replies")); n < 1 {
		t.Errorf("INFO stats: total_error_replies %q, want the primaries' sum", field(r.do("INFO", "stats"), "total_error_replies"))
	}
	if got := field(r.do("INFO", "replication"), "master_repl_offset"); got != "0" {
		t.Errorf("INFO replication: master_repl_offset %q, want 0", got)
	}
	both := r.do("INFO", "cpu", "default")
	if !strings.Contains(both, "used_memory") || strings.Count(both, "used_cpu_user_children") != 1 {
		t.Errorf("INFO cpu default: %q", both)
	}
}

// TestInfoBlockedClients: INFO's blocked_clients counts the proxy's
// clients waiting in a blocking command (BLPOP, XREAD BLOCK, ...), as
// Redis counts its own; Redis's test suite waits on it before it pushes
// the data that wakes the client.
func TestInfoBlockedClients(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	p := uniq(t)
	blocked := func(r *rawConn) string {
		for _, l := range strings.Split(r.do("INFO", "clients"), "\r\n") {
			if v, ok := strings.CutPrefix(l, "blocked_clients:"); ok {
				return v
			}
		}
		return ""
	}
	waitFor := func(r *rawConn, want string) {
		t.Helper()
		got := ""
		for i := 0; i < 1000; i++ {
			if got = blocked(r); got == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("blocked_clients %q, want %s", got, want)
	}
	r := dialRaw(t, e.addr)
	waitFor(r, "0")
	b1, b2 := dialRaw(t, e.addr), dialRaw(t, e.addr)
	b1.nc.SetDeadline(time.Now().Add(30 * time.Second))
	b2.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := b1.nc.Write(encode("BLPOP", p+"l", "0")); err != nil {
		t.Fatal(err)
	}
	// From the stream's start, not "$": the XADD below, sent on another
	// connection, may reach the node before this XREAD does (the proxy
	// counts a client blocked once it sent the command), and "$" would
	// then wait for good.
	if _, err := b2.nc.Write(encode("XREAD", "BLOCK", "0", "STREAMS", p+"s", "0-0")); err != nil {
		t.Fatal(err)
	}
	waitFor(r, "2")
	r.do("RPUSH", p+"l", "v")
	if got, err := readRaw(b1.br); err != nil || !strings.Contains(got, "v") {
		t.Fatalf("BLPOP: %q, %v", got, err)
	}
	waitFor(r, "1")
	r.do("XADD", p+"s", "*", "f", "v")
	if got, err := readRaw(b2.br); err != nil || !strings.Contains(got, "f") {
		t.Fatalf("XREAD: %q, %v", got, err)
	}
	waitFor(r, "0")
	// A client that hangs up while blocked is no longer counted.
	b3 := dialRaw(t, e.addr)
	if _, err := b3.nc.Write(encode("BLPOP", p+"l3", "0")); err != nil {
		t.Fatal(err)
	}
	waitFor(r, "1")
	b3.nc.Close()
	waitFor(r, "0")
}
