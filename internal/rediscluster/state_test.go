package rediscluster

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDaemonizedClusterDownAndStatus(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 40*time.Second)
	dir := t.TempDir()
	c, err := StartCluster(ctx, ClusterOptions{Primaries: 3, Dir: dir, Daemonize: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() }) // reaps the children Down signalled
	if _, err := StartCluster(ctx, ClusterOptions{Primaries: 3, Dir: dir, Daemonize: true}); !errors.Is(err, ErrRunning) {
		t.Errorf("second StartCluster in %s = %v, want ErrRunning", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil || len(st.Nodes) != 3 {
		t.Fatalf("state file %s: %v", b, err)
	}
	text, err := Status(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, ": ok, 3 of 3 nodes up") || !strings.Contains(text, "seeds: "+strings.Join(c.Seeds(), ",")) {
		t.Errorf("status:\n%s", text)
	}
	if strings.Count(text, "primary") != 3 {
		t.Errorf("status does not list 3 primaries:\n%s", text)
	}

	// One node down: degraded.
	victim := c.Nodes()[2]
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	rep, err := StatusReport(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Up != 2 || rep.Nodes[2].Running || rep.State == "ok" {
		t.Errorf("status with %s killed: %+v", victim.Addr, rep)
	}

	var pids []int
	for _, n := range c.Nodes() {
		if pid := n.PID(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	if err := Down(dir); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("pid %d runs after Down", pid)
		}
	}
	if _, err := Status(ctx, dir); !errors.Is(err, ErrNoCluster) {
		t.Errorf("Status after Down = %v, want ErrNoCluster", err)
	}
	if err := Down(dir); !errors.Is(err, ErrNoCluster) {
		t.Errorf("second Down = %v, want ErrNoCluster", err)
	}
	if _, err := os.Stat(filepath.Join(victim.Dir, logFile)); err != nil {
		t.Errorf("Down removed the logs: %v", err)
	}
}

func TestDownIgnoresRecycledPids(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nd := filepath.Join(dir, "node-1")
	if err := os.MkdirAll(nd, 0o755); err != nil {
		t.Fatal(err)
	}
	// Our own pid is alive and not a redis-server: it must not be signalled.
	pf := filepath.Join(nd, pidFile)
	if err := os.WriteFile(pf, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pidfile kept: %v", err)
	}
	if err := Down(t.TempDir()); !errors.Is(err, ErrNoCluster) {
		t.Errorf("Down of an empty dir = %v, want ErrNoCluster", err)
	}
}
