package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// Timeouts of the cluster subcommands.
const (
	clusterUpTimeout     = 2 * time.Minute
	clusterStatusTimeout = 10 * time.Second
	defaultClusterDir    = "hotcount-cluster"
)

const clusterUsage = `Usage: hotcount cluster <up|down|status> [flags]

  up      start a local Redis Cluster of redis-server processes that keep
          running after this command; prints the seed addresses
  down    stop the cluster started in --dir
  status  show the nodes of the cluster in --dir (exit 1 unless healthy)

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
	ctx, cancel := context.WithTimeout(ctx, clusterUpTimeout)
	defer cancel()
	c, err := testenv.StartCluster(ctx, testenv.ClusterOptions{
		Primaries: *primaries,
		Replicas:  *replicas,
		Dir:       *dir,
		BasePort:  *port,
		Daemonize: true,
	})
	if errors.Is(err, testenv.ErrRunning) {
		return failf(stderr, "cluster up: a cluster is already running in %s (stop it with: hotcount cluster down --dir %s)", *dir, *dir)
	}
	if err != nil {
		return failf(stderr, "cluster up: %v", err)
	}
	seeds := c.Seeds()
	for _, s := range seeds {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintf(stdout, "seeds: %s\n", strings.Join(seeds, ","))
	return exitOK
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
	err := testenv.Down(*dir)
	if errors.Is(err, testenv.ErrNoCluster) {
		fmt.Fprintf(stdout, "no cluster in %s\n", *dir)
		return exitOK
	}
	if err != nil {
		return failf(stderr, "cluster down: %v", err)
	}
	fmt.Fprintf(stdout, "stopped the cluster in %s\n", *dir)
	return exitOK
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
	st, err := testenv.StatusReport(ctx, *dir)
	if errors.Is(err, testenv.ErrNoCluster) {
		return failf(stderr, "cluster status: no cluster in %s (start one with: hotcount cluster up --dir %s)", *dir, *dir)
	}
	if err != nil {
		return failf(stderr, "cluster status: %v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return failf(stderr, "cluster status: %v", err)
		}
	} else {
		fmt.Fprint(stdout, st.Text())
	}
	if st.State != "ok" {
		return exitFailure
	}
	return exitOK
}
