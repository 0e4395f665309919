package rediscluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStandaloneNodeRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	n, err := StartNode(ctx, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	info, err := Do(ctx, n.Addr, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := infoField(info, "redis_mode"); v != "standalone" {
		t.Errorf("redis_mode %q, want standalone", v)
	}
	if v, _ := infoField(info, "tcp_port"); v != strconv.Itoa(n.Port) {
		t.Errorf("tcp_port %q, want %d", v, n.Port)
	}
	for range 2 {
		if _, err := Do(ctx, n.Addr, "INCRBY", "c", "5"); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := Do(ctx, n.Addr, "GET", "c"); err != nil || v != "10" {
		t.Fatalf("GET c = %q, %v", v, err)
	}
	st, err := CommandStats(ctx, n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if st["incrby"] != 2 || st["get"] != 1 {
		t.Errorf("command stats %v, want incrby=2 get=1", st)
	}
	if _, err := Do(ctx, n.Addr, "SAVE"); err != nil {
		t.Fatal(err)
	}

	oldPID := n.PID()
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n.PID() == oldPID || !processGone(oldPID) {
		t.Errorf("Restart kept pid %d", oldPID)
	}
	if v, err := Do(ctx, n.Addr, "GET", "c"); err != nil || v != "10" {
		t.Errorf("GET c after Restart = %q, %v; want the saved 10", v, err)
	}
	if err := n.RestartEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := Do(ctx, n.Addr, "GET", "c"); !errors.Is(err, ErrNil) {
		t.Errorf("GET c after RestartEmpty = %q, %v; want ErrNil", v, err)
	}

	pid := n.PID()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) || n.Running() {
		t.Errorf("pid %d runs after Stop", pid)
	}
	if _, err := os.Stat(n.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary dir not removed: %v", err)
	}
	if err := n.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := n.Restart(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("Restart after Stop = %v, want ErrStopped", err)
	}
}

func TestStartNodeWithDirAndPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	dir := t.TempDir()
	// A port picked free may be taken by another test's node before this
	// one starts on it (a node given its port does not move): pick again.
	var n *Node
	var port int
	for attempt := 1; ; attempt++ {
		var err error
		if port, err = pickPort(true); err != nil {
			t.Fatal(err)
		}
		n, err = StartNode(ctx, NodeOptions{Dir: dir, Port: port, Cluster: true, Args: []string{"--maxmemory", "16mb"}})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrPortInUse) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; picking another port", attempt, err)
	}
	t.Cleanup(func() { n.Stop() })
	if n.Port != port || n.Addr != "127.0.0.1:"+strconv.Itoa(port) || n.Dir != dir {
		t.Errorf("node %+v, want port %d in %s", n, port, dir)
	}
	info, err := Do(ctx, n.Addr, "INFO", "cluster")
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		t.Errorf("INFO cluster = %q, %v", info, err)
	}
	mm, err := Do(ctx, n.Addr, "CONFIG", "GET", "maxmemory")
	if err != nil || mm != "maxmemory\n16777216" {
		t.Errorf("CONFIG GET maxmemory = %q, %v", mm, err)
	}
	if _, err := os.Stat(filepath.Join(dir, nodesFile)); err != nil {
		t.Errorf("no nodes.conf: %v", err)
	}
	// The port is taken now: a second node on it must fail, not retry.
	if _, err := StartNode(ctx, NodeOptions{Port: port}); !errors.Is(err, ErrPortInUse) {
		t.Errorf("StartNode on a taken port = %v, want ErrPortInUse", err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("caller's dir removed: %v", err)
	}
	if err := n.Restart(ctx); err != nil {
		t.Errorf("Restart after Stop of a node with its own dir: %v", err)
	}
}

func TestLaunchLostPortRace(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	bin, err := RedisServer()
	if err != nil {
		t.Fatal(err)
	}
	// takeFirst takes the first port it is shown, after the free-port check
	// and before redis-server binds, as a concurrent process would.
	var held []net.Listener
	t.Cleanup(func() {
		for _, l := range held {
			l.Close()
		}
	})
	takeFirst := func(dir string) func(int) string {
		taken := false
		return func(port int) string {
			if !taken {
				taken = true
				l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					t.Error(err)
				} else {
					held = append(held, l)
				}
			}
			return dir
		}
	}
	port, err := pickPort(false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = launch(ctx, launchSpec{bin: bin, port: port, dirFor: takeFirst(t.TempDir())})
	if !errors.Is(err, ErrPortInUse) {
		t.Errorf("launch on a requested port lost to another process = %v, want ErrPortInUse", err)
	}
	n, err := launch(ctx, launchSpec{bin: bin, dirFor: takeFirst(t.TempDir())})
	if err != nil {
		t.Fatalf("launch on a picked port did not retry: %v", err)
	}
	defer n.Stop()
	if len(held) != 2 {
		t.Fatalf("held %d ports, want 2", len(held))
	}
	if held[1].Addr().(*net.TCPAddr).Port == n.Port {
		t.Errorf("node runs on the lost port %d", n.Port)
	}
	if _, err := Do(ctx, n.Addr, "PING"); err != nil {
		t.Error(err)
	}
}

func TestPickPort(t *testing.T) {
	t.Parallel()
	lo, hi, err := portRange()
	if err != nil {
		t.Fatal(err)
	}
	if _, set := os.LookupEnv(PortsEnv); !set && hi-lo < minPortSpan {
		t.Fatalf("port range [%d,%d) too small", lo, hi)
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := pickPort(true)
		if err != nil {
			t.Fatal(err)
		}
		// Whether p was free when picked is not checked again here: other
		// test processes may take it the moment after (portFree is
		// checked below).
		if seen[p] || p < lo || p >= hi {
			t.Fatalf("picked port %d: seen %v, range [%d,%d)", p, seen[p], lo, hi)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := l.Addr().(*net.TCPAddr).Port
	if portFree(held) {
		t.Errorf("portFree(%d) while it is listened on", held)
	}
	l.Close()
}

func TestFindRedis(t *testing.T) {
	t.Parallel()
	missing := func(string) (string, error) { return "", errors.New("not on PATH") }
	_, err := findRedis(missing, filepath.Join(t.TempDir(), "redis-server"))
	if !errors.Is(err, ErrNoRedis) || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Errorf("findRedis without redis = %v", err)
	}
	fake := filepath.Join(t.TempDir(), "redis-server")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := findRedis(missing, fake); err != nil || p != fake {
		t.Errorf("findRedis with fallback = %q, %v", p, err)
	}
	onPath := func(string) (string, error) { return "/opt/bin/redis-server", nil }
	if p, err := findRedis(onPath, fake); err != nil || p != "/opt/bin/redis-server" {
		t.Errorf("findRedis on PATH = %q, %v", p, err)
	}
}
