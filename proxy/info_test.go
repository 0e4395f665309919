package proxy_test

import (
	"strconv"
	"strings"
	"testing"

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
