package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hotcount/hotcount/internal/cgroup"
	"github.com/hotcount/hotcount/internal/rediscluster"
)

// Timeouts of the cluster subcommands.
const (
	clusterUpTimeout     = 2 * time.Minute
	clusterStatusTimeout = 10 * time.Second
	defaultClusterDir    = "hotcount-cluster"
)

const clusterUsage = `Usage: hotcount cluster <up|down|status> [flags]

  up      start a local Redis Cluster of redis-server processes that keep
          running after this command; prints the seed addresses. With
          --node-cpu 10% each node runs under its own CPU quota (a cgroup),
          so that nodes on one machine have a known, limited capacity
  down    stop the cluster started in --dir and remove its CPU groups
  status  show the nodes of the cluster in --dir and their CPU quotas
          (exit 1 unless healthy)

Run 'hotcount cluster <subcommand> --help' for its flags.

Examples:
  hotcount cluster up --dir /tmp/hc --port 7100
  hotcount cluster status --dir /tmp/hc
  hotcount cluster down --dir /tmp/hc
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
	primaries := fs.Int("primaries", 3, "number of primaries")
	replicas := fs.Int("replicas", 1, "replicas per primary")
	nodeCPU := fs.String("node-cpu", "", "CPU quota of each node as a share of one CPU, e.g. 10% (a cgroup per node; needs root or a delegated cgroup)")
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
	n := *primaries * (1 + *replicas)
	if *port < 0 || (*port > 0 && *port+n-1+10000 > 65535) {
		return usagef(stderr, "cluster up: --port %d does not leave room for %d nodes and their bus ports (port+10000)", *port, n)
	}
	var quota cgroup.Quota
	var hier cgroup.Hierarchy
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return failf(stderr, "cluster up: %v", err)
	}
	if *nodeCPU != "" {
		if quota, err = cgroup.ParseCPU(*nodeCPU); err != nil {
			return usagef(stderr, "cluster up: --node-cpu: %v", err)
		}
		if hier, err = prepareCaps(absDir); err != nil {
			return failf(stderr, "cluster up: --node-cpu %s: %v", *nodeCPU, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, clusterUpTimeout)
	defer cancel()
	c, err := rediscluster.StartCluster(ctx, rediscluster.ClusterOptions{
		Primaries: *primaries,
		Replicas:  *replicas,
		Dir:       *dir,
		BasePort:  *port,
		Daemonize: true,
	})
	if errors.Is(err, rediscluster.ErrRunning) {
		return failf(stderr, "cluster up: a cluster is already running in %s (stop it with: hotcount cluster down --dir %s)", *dir, *dir)
	}
	if err != nil {
		return failf(stderr, "cluster up: %v", err)
	}
	if *nodeCPU != "" {
		if err := capNodes(c, absDir, hier, *nodeCPU, quota); err != nil {
			downErr := rediscluster.Down(absDir)
			_, rmErr := removeCaps(absDir)
			return failf(stderr, "cluster up: --node-cpu %s: %v (the cluster was stopped%s)", *nodeCPU, err, cleanupNote(errors.Join(downErr, rmErr)))
		}
	}
	seeds := c.Seeds()
	for _, s := range seeds {
		fmt.Fprintln(stdout, s)
	}
	if *nodeCPU != "" {
		fmt.Fprintf(stdout, "cpu: each node capped at %v of one CPU (%v)\n", quota, hier)
	}
	fmt.Fprintf(stdout, "seeds: %s\n", strings.Join(seeds, ","))
	return exitOK
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
	st, err := rediscluster.StatusReport(ctx, *dir)
	if errors.Is(err, rediscluster.ErrNoCluster) {
		return failf(stderr, "cluster status: no cluster in %s (start one with: hotcount cluster up --dir %s)", *dir, *dir)
	}
	if err != nil {
		return failf(stderr, "cluster status: %v", err)
	}
	caps, err := readCaps(*dir)
	if err != nil {
		return failf(stderr, "cluster status: %v", err)
	}
	out := clusterStatusJSON{ClusterStatus: st}
	if caps != nil {
		pids := map[string]int{}
		for _, n := range st.Nodes {
			pids[n.Addr] = n.PID
		}
		out.CPU = capStatus(caps, pids)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failf(stderr, "cluster status: %v", err)
		}
	} else {
		fmt.Fprint(stdout, st.Text())
		if out.CPU != nil {
			fmt.Fprint(stdout, out.CPU.text())
		} else {
			fmt.Fprintln(stdout, "cpu caps: none (started without --node-cpu)")
		}
	}
	if st.State != "ok" {
		return exitFailure
	}
	return exitOK
}
