package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// clusterCLI runs hotcount with args and returns the exit code and output.
func clusterCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestClusterUpStatusDown(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "cluster")
	t.Cleanup(func() { testenv.Down(dir) }) // in case the test fails before down

	code, out, errOut := clusterCLI(t, ctx, "cluster", "up", "--dir", dir, "--replicas", "0")
	if code != exitOK {
		t.Fatalf("cluster up: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("cluster up printed %q, want 3 seeds and a seeds line", out)
	}
	seedsLine, ok := strings.CutPrefix(lines[3], "seeds: ")
	if !ok {
		t.Fatalf("last line %q is not a seeds line", lines[3])
	}
	seeds := splitAddrs(seedsLine)
	if strings.Join(seeds, "\n") != strings.Join(lines[:3], "\n") {
		t.Errorf("seeds line %q does not match the listed seeds %q", seedsLine, lines[:3])
	}
	for _, s := range seeds {
		if r, err := testenv.Do(ctx, s, "PING"); err != nil || r != "PONG" {
			t.Errorf("PING %s = %q, %v", s, r, err)
		}
	}

	code, _, errOut = clusterCLI(t, ctx, "cluster", "up", "--dir", dir, "--replicas", "0")
	if code != exitFailure || !strings.Contains(errOut, "already running") {
		t.Errorf("second cluster up: exit %d, stderr %q; want 1 and 'already running'", code, errOut)
	}

	code, out, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "ok, 3 of 3 nodes up") || !strings.Contains(out, "seeds: "+seedsLine) {
		t.Errorf("cluster status: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir, "--json")
	var st testenv.ClusterStatus
	if code != exitOK {
		t.Errorf("cluster status --json: exit %d, stderr %q", code, errOut)
	} else if err := json.Unmarshal([]byte(out), &st); err != nil || st.State != "ok" || len(st.Nodes) != 3 {
		t.Errorf("cluster status --json = %q (%v)", out, err)
	}

	code, _, errOut = clusterCLI(t, ctx, "cluster", "down", "--dir", dir)
	if code != exitOK {
		t.Fatalf("cluster down: exit %d, stderr %q", code, errOut)
	}
	for _, s := range seeds {
		if _, err := testenv.Do(ctx, s, "PING"); err == nil {
			t.Errorf("%s still answers after down", s)
		}
	}
	code, _, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir)
	if code != exitFailure || !strings.Contains(errOut, "no cluster") {
		t.Errorf("status after down: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = clusterCLI(t, ctx, "cluster", "down", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "no cluster") {
		t.Errorf("second down: exit %d, stdout %q", code, out)
	}
}

func TestClusterBadUsage(t *testing.T) {
	ctx := t.Context()
	for _, args := range [][]string{
		{"cluster"},
		{"cluster", "sideways"},
		{"cluster", "up", "--primaries", "x"},
		{"cluster", "up", "--primaries", "0"},
		{"cluster", "up", "--replicas", "-1"},
		{"cluster", "up", "--port", "-5"},
		{"cluster", "up", "--port", "65000"},
		{"cluster", "up", "--dir", ""},
		{"cluster", "up", "extra"},
		{"cluster", "down", "--nope"},
		{"cluster", "status", "--json=maybe"},
		{"cluster", "up", "--node-cpu", "10"},
		{"cluster", "up", "--node-cpu", "0%"},
		{"cluster", "up", "--node-cpu", "lots%"},
		{"cluster", "up", "--regions", "eu,eu"},
		{"cluster", "up", "--regions", "eu,"},
		{"cluster", "up", "--regions", "e u"},
		{"cluster", "up", "--regions", "eu,us", "--port", "65000"},
	} {
		code, out, errOut := clusterCLI(t, ctx, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
		if out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%q: stdout %q, stderr %q; want one line on stderr", args, out, errOut)
		}
	}
	if code, out, _ := clusterCLI(t, ctx, "cluster", "--help"); code != exitOK || !strings.Contains(out, "up") {
		t.Errorf("cluster --help: exit %d, stdout %q", code, out)
	}
	if code, out, _ := clusterCLI(t, ctx, "cluster", "up", "--help"); code != exitOK || !strings.Contains(out, "-primaries") || !strings.Contains(out, "Examples:") {
		t.Errorf("cluster up --help: exit %d, stdout %q", code, out)
	}
}

// TestClusterCPUCaps starts a one-node cluster with --node-cpu 10% and
// checks that the node runs in its own group under that quota, that
// status shows it, and that down removes the group. It skips, saying why,
// where this process may not create CPU groups.
func TestClusterCPUCaps(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	h, err := prepareCaps(dir)
	if err != nil {
		t.Skipf("no CPU caps here: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() { testenv.Down(dir); removeCaps(dir) }) // in case the test fails before down

	code, out, errOut := clusterCLI(t, ctx, "cluster", "up", "--dir", dir, "--primaries", "1", "--replicas", "0", "--node-cpu", "10%")
	if code != exitOK {
		t.Fatalf("cluster up --node-cpu: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "cpu: each node capped at 10% (10ms per 100ms)") {
		t.Errorf("cluster up printed %q, want the cap", out)
	}

	code, out, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir, "--json")
	if code != exitOK {
		t.Fatalf("cluster status --json: exit %d, stderr %q", code, errOut)
	}
	var st clusterStatusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.CPU == nil || len(st.CPU.Nodes) != 1 {
		t.Fatalf("cluster status --json = %q (%v), want one capped node", out, err)
	}
	n := st.CPU.Nodes[0]
	if n.Quota != "10% (10ms per 100ms)" || n.Share != 0.1 || !n.InGroup || n.Error != "" {
		t.Errorf("node cap = %+v, want 10%% with the node's process in the group", n)
	}
	// The kernel's own view of the group.
	q, limited, err := h.Quota(n.Group)
	if err != nil || !limited || q.Max != 10*time.Millisecond || q.Period != 100*time.Millisecond {
		t.Errorf("group %s: quota %v limited %v, %v", n.Group, q, limited, err)
	}
	// A capped node answers the cluster bus late under load: its node
	// timeout is long enough that its peers do not mark it failed.
	if got, err := testenv.Do(ctx, st.Nodes[0].Addr, "CONFIG", "GET", "cluster-node-timeout"); err != nil || got != "cluster-node-timeout\n"+strconv.Itoa(cappedNodeTimeout) {
		t.Errorf("CONFIG GET cluster-node-timeout = %q (%v), want %d", got, err, cappedNodeTimeout)
	}
	pid := st.Nodes[0].PID
	if procs, err := h.Procs(n.Group); err != nil || len(procs) != 1 || procs[0] != pid {
		t.Errorf("group %s holds %v (%v), want the node's pid %d", n.Group, procs, err, pid)
	}
	code, out, _ = clusterCLI(t, ctx, "cluster", "status", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "10% (10ms per 100ms)") || !strings.Contains(out, n.Group) {
		t.Errorf("cluster status: exit %d, stdout %q", code, out)
	}

	code, out, errOut = clusterCLI(t, ctx, "cluster", "down", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "removed its CPU groups") {
		t.Fatalf("cluster down: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(h.Mount, filepath.FromSlash(n.Group))); !os.IsNotExist(err) {
		t.Errorf("group %s still exists after down (%v)", n.Group, err)
	}
	if _, err := os.Stat(filepath.Join(dir, cpuCapsFile)); !os.IsNotExist(err) {
		t.Errorf("%s still exists after down (%v)", cpuCapsFile, err)
	}
}

// TestClusterUpRegions starts two regions' clusters with one command,
// checks that each is its own healthy cluster on its own ports, that
// status reports both and that down stops both.
func TestClusterUpRegions(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "regions")
	t.Cleanup(func() { testenv.Down(filepath.Join(dir, "eu")); testenv.Down(filepath.Join(dir, "us")) })

	code, out, errOut := clusterCLI(t, ctx, "cluster", "up", "--dir", dir, "--regions", "eu,us", "--primaries", "1", "--replicas", "0")
	if code != exitOK {
		t.Fatalf("cluster up --regions: exit %d, stderr %q", code, errOut)
	}
	seeds := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, list, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("cluster up --regions printed %q, want NAME: SEEDS lines", out)
		}
		seeds[name] = splitAddrs(list)
	}
	if len(seeds) != 2 || len(seeds["eu"]) != 1 || len(seeds["us"]) != 1 || seeds["eu"][0] == seeds["us"][0] {
		t.Fatalf("cluster up --regions printed %q, want one seed for each of eu and us", out)
	}
	// Two clusters, not one: each node knows only itself.
	for name, s := range seeds {
		if r, err := testenv.Do(ctx, s[0], "CLUSTER", "INFO"); err != nil || !strings.Contains(r, "cluster_state:ok") || !strings.Contains(r, "cluster_known_nodes:1") {
			t.Errorf("region %s: CLUSTER INFO = %q, %v", name, r, err)
		}
	}
	code, _, errOut = clusterCLI(t, ctx, "cluster", "up", "--dir", dir, "--regions", "eu,us")
	if code != exitFailure || !strings.Contains(errOut, "already running") {
		t.Errorf("second cluster up --regions: exit %d, stderr %q; want 1 and 'already running'", code, errOut)
	}
	code, out, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "region eu:") || !strings.Contains(out, "region us:") || strings.Count(out, "ok, 1 of 1 nodes up") != 2 {
		t.Errorf("cluster status: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir, "--json")
	var st struct {
		Regions map[string]testenv.ClusterStatus `json:"regions"`
	}
	if code != exitOK {
		t.Errorf("cluster status --json: exit %d, stderr %q", code, errOut)
	} else if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Regions) != 2 || st.Regions["eu"].State != "ok" || st.Regions["us"].State != "ok" {
		t.Errorf("cluster status --json = %q (%v)", out, err)
	}

	code, out, errOut = clusterCLI(t, ctx, "cluster", "down", "--dir", dir)
	if code != exitOK || strings.Count(out, "stopped the cluster of region") != 2 {
		t.Fatalf("cluster down: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for name, s := range seeds {
		if _, err := testenv.Do(ctx, s[0], "PING"); err == nil {
			t.Errorf("region %s: %s still answers after down", name, s[0])
		}
	}
	code, _, errOut = clusterCLI(t, ctx, "cluster", "status", "--dir", dir)
	if code != exitFailure || !strings.Contains(errOut, "no cluster") {
		t.Errorf("status after down: exit %d, stderr %q", code, errOut)
	}
}
