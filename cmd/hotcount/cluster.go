package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/cgroup"
	"github.com/hotcount/hotcount/internal/rediscluster"
)

// Timeouts of the cluster subcommands.
const (
	clusterUpTimeout     = 2 * time.Minute
	clusterStatusTimeout = 10 * time.Second
	defaultClusterDir    = "hotcount-cluster"
	// defaultClusterReplicas gives each primary of `cluster up` one
	// replica, so that failover can be tried.
	defaultClusterReplicas = 1
)

const clusterUsage = `Usage: hotcount cluster <up|down|status> [flags]

  up      start a local Redis Cluster of redis-server processes that keep
          running after this command; prints the seed addresses. With
          --node-cpu 10% each node runs under its own CPU quota (a cgroup),
          so that nodes on one machine have a known, limited capacity.
          With --regions eu,us one cluster per region, for a multi-region
          demo: each in DIR/NAME, one line of seeds per region
  down    stop the cluster (or the regions' clusters) started in --dir and
          remove its CPU groups
  status  show the nodes of the cluster (or of each region's) in --dir and
          their CPU quotas (exit 1 unless healthy)

Run 'hotcount cluster <subcommand> --help' for its flags.

Examples:
  hotcount cluster up --dir /tmp/hc --port 7100
  hotcount cluster status --dir /tmp/hc
  hotcount cluster down --dir /tmp/hc
  hotcount cluster up --dir /tmp/rs --port 17100 --regions eu,us --replicas 0
`

// runCluster dispatches hotcount cluster up|down|status.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usagef(stderr, "cluster: missing subcommand (up, down or status)")
	}
	switch args[0] {
	case "up":
		return runClusterUp(ctx, args[1:], stdout, stderr)
	case "down":
		return runClusterDown(ctx, args[1:], stdout, stderr)
	case "status":
		return runClusterStatus(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, clusterUsage)
		return exitOK
	}
	return usagef(stderr, "cluster: unknown subcommand %q (up, down or status)", args[0])
}

func runClusterUp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cluster up", stdout, stderr)
	dir := fs.String("dir", defaultClusterDir, "directory for node data, logs, pidfiles and the state file")
	port := fs.Int("port", 0, "port of the first node; nodes use port..port+n-1 (0 picks free ports)")
	primaries := fs.Int("primaries", rediscluster.DefaultPrimaries, "number of primaries")
	replicas := fs.Int("replicas", defaultClusterReplicas, "replicas per primary")
	nodeCPU := fs.String("node-cpu", "", "CPU quota of each node as a share of one CPU, e.g. 10% (a cgroup per node; needs root or a delegated cgroup)")
	regionList := fs.String("regions", "", "start one cluster per region, e.g. eu,us: each in DIR/NAME, the i-th (from 0) at port+i*100 when --port is set")
	if code, done := fs.parse(args); done {
		return code
	}
	switch {
	case *dir == "":
		return usagef(stderr, "cluster up: --dir must not be empty")
	case *primaries < 1:
		return usagef(stderr, "cluster up: --primaries must be at least 1, got %d", *primaries)
	case *replicas < 0:
		return usagef(stderr, "cluster up: --replicas must not be negative, got %d", *replicas)
	}
	names, err := parseRegionNames(*regionList)
	if err != nil {
		return usagef(stderr, "cluster up: --regions: %v", err)
	}
	n := *primaries * (1 + *replicas)
	stride := regionPortStride(n)
	last := *port + n - 1
	if len(names) > 1 {
		last += (len(names) - 1) * stride
	}
	if *port < 0 || (*port > 0 && last+10000 > 65535) {
		return usagef(stderr, "cluster up: --port %d does not leave room for %d nodes and their bus ports (port+10000)", *port, n*max(1, len(names)))
	}
	var quota cgroup.Quota
	if *nodeCPU != "" {
		if quota, err = cgroup.ParseCPU(*nodeCPU); err != nil {
			return usagef(stderr, "cluster up: --node-cpu: %v", err)
		}
	}
	up := clusterUp{primaries: *primaries, replicas: *replicas, nodeCPU: *nodeCPU, quota: quota}
	ctx, cancel := context.WithTimeout(ctx, clusterUpTimeout*time.Duration(max(1, len(names))))
	defer cancel()
	if _, err := readRegionNames(*dir); err == nil {
		return failf(stderr, "cluster up: regions are already running in %s (stop them with: hotcount cluster down --dir %s)", *dir, *dir)
	}
	if names == nil {
		seeds, code := up.start(ctx, *dir, *port, "", stderr)
		if code != exitOK {
			return code
		}
		for _, s := range seeds {
			fmt.Fprintln(stdout, s)
		}
		if *nodeCPU != "" {
			fmt.Fprintf(stdout, "cpu: each node capped at %v of one CPU (%v)\n", quota, up.hier)
		}
		fmt.Fprintf(stdout, "seeds: %s\n", strings.Join(seeds, ","))
		return exitOK
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return failf(stderr, "cluster up: %v", err)
	}
	all := make([][]string, len(names))
	for i, name := range names {
		p := 0
		if *port > 0 {
			p = *port + i*stride
		}
		seeds, code := up.start(ctx, filepath.Join(*dir, name), p, "region "+name+": ", stderr)
		if code != exitOK {
			// Stop the regions started before this one.
			for _, done := range names[:i] {
				sub := filepath.Join(*dir, done)
				_ = rediscluster.Down(sub)
				_, _ = removeCaps(sub)
			}
			return code
		}
		all[i] = seeds
	}
	if err := os.WriteFile(filepath.Join(*dir, regionsFile), []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		for _, name := range names {
			_ = rediscluster.Down(filepath.Join(*dir, name))
			_, _ = removeCaps(filepath.Join(*dir, name))
		}
		return failf(stderr, "cluster up: %v (the clusters were stopped)", err)
	}
	for i, name := range names {
		fmt.Fprintf(stdout, "%s: %s\n", name, strings.Join(all[i], ","))
	}
	if *nodeCPU != "" {
		fmt.Fprintf(stdout, "cpu: each node capped at %v of one CPU (%v)\n", quota, up.hier)
	}
	return exitOK
}

// clusterUp is what cluster up starts each cluster with.
type clusterUp struct {
	primaries, replicas int
	nodeCPU             string
	quota               cgroup.Quota
	hier                cgroup.Hierarchy // set by start when nodeCPU is
}

// start starts one cluster in dir with its first node at port (0: free
// ports) and returns its seeds, or the exit code after writing the error
// (prefixed with what, e.g. "region eu: ") to stderr.
func (u *clusterUp) start(ctx context.Context, dir string, port int, what string, stderr io.Writer) ([]string, int) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, failf(stderr, "cluster up: %s%v", what, err)
	}
	if u.nodeCPU != "" {
		if u.hier, err = prepareCaps(absDir); err != nil {
			return nil, failf(stderr, "cluster up: %s--node-cpu %s: %v", what, u.nodeCPU, err)
		}
	}
	c, err := rediscluster.StartCluster(ctx, rediscluster.ClusterOptions{
		Primaries: u.primaries,
		Replicas:  u.replicas,
		Dir:       dir,
		BasePort:  port,
		Daemonize: true,
	})
	if errors.Is(err, rediscluster.ErrRunning) {
		return nil, failf(stderr, "cluster up: %sa cluster is already running in %s (stop it with: hotcount cluster down --dir %s)", what, dir, dir)
	}
	if err != nil {
		return nil, failf(stderr, "cluster up: %s%v", what, err)
	}
	if u.nodeCPU != "" {
		if err := capNodes(c, absDir, u.hier, u.nodeCPU, u.quota); err != nil {
			downErr := rediscluster.Down(absDir)
			_, rmErr := removeCaps(absDir)
			return nil, failf(stderr, "cluster up: %s--node-cpu %s: %v (the cluster was stopped%s)", what, u.nodeCPU, err, cleanupNote(errors.Join(downErr, rmErr)))
		}
	}
	return c.Seeds(), exitOK
}

// regionsFile lists, one per line, the regions that cluster up --regions
// started in a directory (each a cluster in the subdirectory of its name).
const regionsFile = "hotcount-regions"

// regionPortStride is how far apart the regions' first ports are: 100,
// or the next multiple of 100 that leaves room for n nodes.
func regionPortStride(n int) int { return (n + 99) / 100 * 100 }

// parseRegionNames splits --regions: nil for "", else 1 or more distinct
// valid region names.
func parseRegionNames(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var names []string
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case !hotcount.ValidRegion(name):
			return nil, fmt.Errorf("region name %q: 1-64 letters, digits, - or _", name)
		case seen[name]:
			return nil, fmt.Errorf("region %q named twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, nil
}

// readRegionNames returns the regions cluster up --regions started in dir.
func readRegionNames(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, regionsFile))
	if err != nil {
		return nil, err
	}
	names, err := parseRegionNames(strings.Join(strings.Fields(string(b)), ","))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("%s: not a list of regions (%v)", filepath.Join(dir, regionsFile), err)
	}
	return names, nil
}

// cleanupNote describes a failed clean-up for an error message.
func cleanupNote(err error) string {
	if err == nil {
		return ""
	}
	return "; cleaning up also failed: " + err.Error()
}

func runClusterDown(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cluster down", stdout, stderr)
	dir := fs.String("dir", defaultClusterDir, "directory the cluster was started in")
	if code, done := fs.parse(args); done {
		return code
	}
	if *dir == "" {
		return usagef(stderr, "cluster down: --dir must not be empty")
	}
	if names, err := readRegionNames(*dir); err == nil {
		for _, name := range names {
			sub := filepath.Join(*dir, name)
			if err := rediscluster.Down(sub); err != nil && !errors.Is(err, rediscluster.ErrNoCluster) {
				return failf(stderr, "cluster down: region %s: %v", name, err)
			}
			if _, err := removeCaps(sub); err != nil {
				return failf(stderr, "cluster down: region %s: removing the CPU groups: %v", name, err)
			}
			fmt.Fprintf(stdout, "stopped the cluster of region %s in %s\n", name, sub)
		}
		if err := os.Remove(filepath.Join(*dir, regionsFile)); err != nil {
			return failf(stderr, "cluster down: %v", err)
		}
		return exitOK
	}
	err := rediscluster.Down(*dir)
	noCluster := errors.Is(err, rediscluster.ErrNoCluster)
	if err != nil && !noCluster {
		return failf(stderr, "cluster down: %v", err)
	}
	hadCaps, err := removeCaps(*dir)
	if err != nil {
		return failf(stderr, "cluster down: removing the CPU groups: %v", err)
	}
	switch {
	case noCluster && hadCaps:
		fmt.Fprintf(stdout, "no cluster in %s; removed its CPU groups\n", *dir)
	case noCluster:
		fmt.Fprintf(stdout, "no cluster in %s\n", *dir)
	case hadCaps:
		fmt.Fprintf(stdout, "stopped the cluster in %s and removed its CPU groups\n", *dir)
	default:
		fmt.Fprintf(stdout, "stopped the cluster in %s\n", *dir)
	}
	return exitOK
}

// clusterStatusJSON is cluster status --json: rediscluster's status with the
// nodes' CPU caps, when the cluster has any.
type clusterStatusJSON struct {
	*rediscluster.ClusterStatus
	CPU *cpuStatus `json:"cpu,omitempty"`
}

func runClusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("cluster status", stdout, stderr)
	dir := fs.String("dir", defaultClusterDir, "directory the cluster was started in")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	if *dir == "" {
		return usagef(stderr, "cluster status: --dir must not be empty")
	}
	ctx, cancel := context.WithTimeout(ctx, clusterStatusTimeout)
	defer cancel()
	if names, err := readRegionNames(*dir); err == nil {
		return regionsStatus(ctx, *dir, names, *asJSON, stdout, stderr)
	}
	out, code := clusterStatusOf(ctx, *dir, stderr)
	if out == nil {
		return code
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failf(stderr, "cluster status: %v", err)
		}
	} else {
		out.write(stdout)
	}
	return code
}

// regionsStatus is cluster status of the regions cluster up --regions
// started in dir: each region's status in turn (--json: an object by
// region name); exit 1 unless every region is healthy.
func regionsStatus(ctx context.Context, dir string, names []string, asJSON bool, stdout, stderr io.Writer) int {
	code := exitOK
	all := map[string]*clusterStatusJSON{}
	for _, name := range names {
		out, c := clusterStatusOf(ctx, filepath.Join(dir, name), stderr)
		if c != exitOK {
			code = exitFailure
		}
		if out == nil {
			continue
		}
		all[name] = out
		if !asJSON {
			fmt.Fprintf(stdout, "region %s:\n", name)
			out.write(stdout)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"regions": all}); err != nil {
			return failf(stderr, "cluster status: %v", err)
		}
	}
	return code
}

// write prints the status as text.
func (out *clusterStatusJSON) write(w io.Writer) {
	fmt.Fprint(w, out.Text())
	if out.CPU != nil {
		fmt.Fprint(w, out.CPU.text())
	} else {
		fmt.Fprintln(w, "cpu caps: none (started without --node-cpu)")
	}
}

// clusterStatusOf reads the status of the cluster in dir, with its CPU
// caps: nil and the exit code after writing the error to stderr, or the
// status and exit 1 unless it is healthy.
func clusterStatusOf(ctx context.Context, dir string, stderr io.Writer) (*clusterStatusJSON, int) {
	st, err := rediscluster.StatusReport(ctx, dir)
	if errors.Is(err, rediscluster.ErrNoCluster) {
		return nil, failf(stderr, "cluster status: no cluster in %s (start one with: hotcount cluster up --dir %s)", dir, dir)
	}
	if err != nil {
		return nil, failf(stderr, "cluster status: %v", err)
	}
	caps, err := readCaps(dir)
	if err != nil {
		return nil, failf(stderr, "cluster status: %v", err)
	}
	out := &clusterStatusJSON{ClusterStatus: st}
	if caps != nil {
		pids := map[string]int{}
		for _, n := range st.Nodes {
			pids[n.Addr] = n.PID
		}
		out.CPU = capStatus(caps, pids)
	}
	if st.State != "ok" {
		return out, exitFailure
	}
	return out, exitOK
}
