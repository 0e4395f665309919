package proxy

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// INFO: the proxy describes itself as one Redis server of the cluster's
// version that is cluster-enabled (cluster clients such as redis-py's
// RedisCluster check cluster_enabled; see cluster.go), and fills each
// section as a client expects the figure of the whole data set:
//
//   - Server, Clients (blocked_clients: its clients in a blocking
//     command), Stats (connections and commands), Replication: the
//     proxy's own (it is a master without replicas);
//   - Memory: used_memory, used_memory_rss, used_memory_peak, maxmemory
//     and used_memory_dataset summed over the primaries, with their
//     *_human forms; mem_allocator and number_of_cached_scripts (scripts
//     are loaded on every primary) from the first primary (by address);
//   - Persistence: the first primary's fields, but
//     rdb_changes_since_last_save summed over the primaries;
//   - Stats also sums the primaries' keyspace_hits, keyspace_misses,
//     expired_keys, evicted_keys and total_error_replies;
//   - Keyspace: db0 with keys and expires summed over the primaries
//     (counters' sub-keys and hotcount's own keys included), as Redis
//     omits an empty database;
//   - CPU: the proxy process's own (getrusage);
//   - Commandstats (only asked for by name, "all" or "everything", as in
//     Redis) and Errorstats: the primaries' figures summed per command
//     and per error, hotcount's own commands to them included; errors
//     the proxy answers itself (refusals, its CROSSSLOT) are not counted;
//   - Cluster: cluster_enabled:1; Hotcount: the proxy's counters.
//
// The primaries are asked (one INFO each, at once) only for the sections
// that need them. A primary that does not answer makes INFO an error.

// infoSummed are the fields added over the primaries, by section.
var infoSummed = map[string][]string{
	"memory":      {"used_memory", "used_memory_rss", "used_memory_peak", "maxmemory", "used_memory_dataset"},
	"persistence": {"rdb_changes_since_last_save"},
	"stats":       {"keyspace_hits", "keyspace_misses", "expired_keys", "evicted_keys", "total_error_replies"},
}

// infoFields parses INFO text into field → value.
func infoFields(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// primaryInfo reads INFO sections from every primary, in address order.
func (c *conn) primaryInfo(sections ...string) ([]map[string]string, string) {
	ctx, cancel := c.timeout()
	defer cancel()
	res, err := c.allPrimaries(ctx, append([]string{"INFO"}, sections...))
	if err != nil {
		return nil, upstreamError(err)
	}
	out := make([]map[string]string, len(res))
	for i := range res {
		if e := resultError(&res[i]); e != "" {
			return nil, e
		}
		text, _ := res[i].ToString()
		out[i] = infoFields(text)
	}
	return out, ""
}

// humanBytes is Redis's bytesToHuman.
func humanBytes(n int64) string {
	f := float64(n)
	switch {
	case n < 1024:
		return strconv.FormatInt(n, 10) + "B"
	case n < 1<<20:
		return fmt.Sprintf("%.2fK", f/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.2fM", f/(1<<20))
	case n < 1<<40:
		return fmt.Sprintf("%.2fG", f/(1<<30))
	}
	return fmt.Sprintf("%.2fT", f/(1<<40))
}

// sum adds field over the primaries' INFO.
func sum(nodes []map[string]string, field string) int64 {
	var n int64
	for _, m := range nodes {
		v, _ := strconv.ParseInt(m[field], 10, 64)
		n += v
	}
	return n
}

// keyspaceOf parses "keys=1,expires=0,avg_ttl=0".
func keyspaceOf(v string) (keys, expires int64) {
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(val, 10, 64)
		switch k {
		case "keys":
			keys = n
		case "expires":
			expires = n
		}
	}
	return keys, expires
}

// infoNotDefault are the sections that INFO with no argument or
// "default" leaves out (Redis's "all" and "everything" bring them in).
var infoNotDefault = map[string]bool{"commandstats": true}

// sumStats adds the primaries' "prefix<name>:a=1,b=2" lines field by
// field, per name, keeping each line's field order; usec_per_call is
// recomputed from the sums. The lines are sorted by name.
func sumStats(nodes []map[string]string, prefix string) []string {
	type stat struct {
		fields []string
		sums   map[string]float64
	}
	stats := map[string]*stat{}
	for _, m := range nodes {
		for k, v := range m {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			st := stats[k]
			if st == nil {
				st = &stat{sums: map[string]float64{}}
				stats[k] = st
			}
			for _, kv := range strings.Split(v, ",") {
				f, val, _ := strings.Cut(kv, "=")
				if _, ok := st.sums[f]; !ok {
					st.fields = append(st.fields, f)
				}
				n, _ := strconv.ParseFloat(val, 64)
				st.sums[f] += n
			}
		}
	}
	names := make([]string, 0, len(stats))
	for k := range stats {
		names = append(names, k)
	}
	sort.Strings(names)
	lines := make([]string, 0, len(names))
	for _, k := range names {
		st := stats[k]
		var b strings.Builder
		b.WriteString(k + ":")
		for i, f := range st.fields {
			if i > 0 {
				b.WriteByte(',')
			}
			if f == "usec_per_call" {
				per := 0.0
				if calls := st.sums["calls"]; calls > 0 {
					per = st.sums["usec"] / calls
				}
				fmt.Fprintf(&b, "%s=%.2f", f, per)
				continue
			}
			fmt.Fprintf(&b, "%s=%d", f, int64(st.sums[f]))
		}
		lines = append(lines, b.String())
	}
	return lines
}

// infoCmd: INFO [section ...].
func (c *conn) infoCmd(args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	every := want["all"] || want["everything"]
	dflt := len(want) == 0 || want["default"]
	show := func(name string) bool {
		name = strings.ToLower(name)
		return every || want[name] || dflt && !infoNotDefault[name]
	}
	s := c.s
	var nodes []map[string]string
	if show("memory") || show("persistence") || show("stats") || show("keyspace") || show("commandstats") || show("errorstats") {
		ask := []string{"memory", "persistence", "stats", "keyspace"}
		if show("commandstats") {
			ask = append(ask, "commandstats")
		}
		if show("errorstats") {
			ask = append(ask, "errorstats")
		}
		var e string
		if nodes, e = c.primaryInfo(ask...); e != "" {
			c.out = appendErr(c.out, e)
			return
		}
	}
	first := map[string]string{}
	if len(nodes) > 0 {
		first = nodes[0]
	}
	now := s.cfg.Clock.Now()
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !show(name) {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	_, port, _ := net.SplitHostPort(c.laddr)
	uptime := int64(now.Sub(s.started).Seconds())
	section("Server",
		"redis_version:"+s.version,
		"redis_mode:standalone",
		"hotcount_proxy:1",
		"os:"+runtime.GOOS,
		"arch_bits:64",
		"process_id:"+strconv.Itoa(os.Getpid()),
		"tcp_port:"+port,
		"uptime_in_seconds:"+strconv.FormatInt(uptime, 10),
		"uptime_in_days:"+strconv.FormatInt(uptime/86400, 10),
	)
	section("Clients",
		"connected_clients:"+strconv.Itoa(s.Clients()),
		"maxclients:"+strconv.Itoa(s.cfg.MaxClients),
		"blocked_clients:"+strconv.FormatInt(s.stats.blocked.Load(), 10),
	)
	var mem []string
	for _, f := range infoSummed["memory"] {
		n := sum(nodes, f)
		mem = append(mem, f+":"+strconv.FormatInt(n, 10), f+"_human:"+humanBytes(n))
	}
	mem = append(mem, "mem_allocator:"+first["mem_allocator"],
		"number_of_cached_scripts:"+first["number_of_cached_scripts"],
		"hotcount_input_bytes:"+strconv.FormatInt(s.input.used.Load(), 10),
		"hotcount_memory_budget:"+strconv.FormatInt(s.input.limit, 10))
	section("Memory", mem...)
	var pers []string
	for _, f := range []string{"loading", "async_loading", "rdb_changes_since_last_save", "rdb_bgsave_in_progress",
		"rdb_last_save_time", "rdb_last_bgsave_status", "aof_enabled", "aof_rewrite_in_progress", "aof_last_bgrewrite_status"} {
		v := first[f]
		if f == "rdb_changes_since_last_save" {
			v = strconv.FormatInt(sum(nodes, f), 10)
		}
		if v != "" {
			pers = append(pers, f+":"+v)
		}
	}
	section("Persistence", pers...)
	st := []string{
		"total_connections_received:" + strconv.FormatInt(s.stats.accepted.Load(), 10),
		"total_commands_processed:" + strconv.FormatInt(s.stats.commands.Load(), 10),
		"rejected_connections:" + strconv.FormatInt(s.stats.rejected.Load(), 10),
		"migrate_cached_sockets:0", // MIGRATE is refused
	}
	for _, f := range infoSummed["stats"] {
		st = append(st, f+":"+strconv.FormatInt(sum(nodes, f), 10))
	}
	section("Stats", st...)
	section("Replication", "role:master", "connected_slaves:0", "master_failover_state:no-failover",
		"master_repl_offset:0", "second_repl_offset:-1", "repl_backlog_active:0")
	section("CPU", cpuLines()...)
	if show("commandstats") {
		section("Commandstats", sumStats(nodes, "cmdstat_")...)
	}
	if show("errorstats") {
		section("Errorstats", sumStats(nodes, "errorstat_")...)
	}
	section("Cluster", "cluster_enabled:1")
	var keys, expires int64
	for _, m := range nodes {
		k, e := keyspaceOf(m["db0"])
		keys += k
		expires += e
	}
	var ks []string
	if keys > 0 {
		ks = append(ks, fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=0", keys, expires))
	}
	section("Keyspace", ks...)
	bs := s.counters.Stats().Buffer
	section("Hotcount",
		"counter_increments:"+strconv.FormatInt(s.stats.counterIncrs.Load(), 10),
		"counter_reads:"+strconv.FormatInt(s.stats.counterReads.Load(), 10),
		"passed_through:"+strconv.FormatInt(s.stats.passed.Load(), 10),
		"upstream_errors:"+strconv.FormatInt(s.stats.upstreamErrors.Load(), 10),
		"buffer_unflushed_delta:"+strconv.FormatInt(bs.Unflushed, 10),
		"buffer_unflushed_keys:"+strconv.Itoa(bs.PendingKeys),
		fmt.Sprintf("buffer_oldest_unflushed_seconds:%.3f", bs.OldestUnflushed.Seconds()),
		"upstream_cluster:"+strconv.FormatBool(s.cluster),
	)
	c.out = appendText(c.out, b.String(), c.proto)
}
