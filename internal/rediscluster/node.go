package rediscluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Timings of process control.
const (
	readyTimeout = 30 * time.Second       // start to PONG, when ctx has no deadline
	pollInterval = 10 * time.Millisecond  // process and readiness polling
	pingTimeout  = 500 * time.Millisecond // one readiness PING
	termTimeout  = 5 * time.Second        // SIGTERM to exit, before SIGKILL
	killTimeout  = 10 * time.Second       // SIGKILL to exit of a process we did not start
	portRetries  = 5                      // restarts on another port after losing a port race
)

// File names inside a node directory.
const (
	logFile   = "redis.log"
	outFile   = "redis.out"
	pidFile   = "redis.pid"
	nodesFile = "nodes.conf"
)

// NodeOptions configures StartNode. The zero value is a standalone node on a
// free port in a fresh temporary directory.
type NodeOptions struct {
	// Dir is the node's working directory (data, log, pidfile); created if
	// missing. "" means a fresh temporary directory that Stop removes.
	Dir string
	// Port is the node's port; 0 picks a free one (with a free bus port
	// when Cluster is set).
	Port int
	// Cluster starts the node cluster-enabled (an empty cluster of one
	// node; nothing assigns it slots).
	Cluster bool
	// Args are extra redis-server arguments appended to the defaults, e.g.
	// {"--maxmemory", "64mb"}.
	Args []string
}

// Node is one redis-server process. Its exported fields are fixed for its
// life: a restart uses the same port, directory and configuration.
type Node struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Port is the client port; the cluster bus port is Port+10000.
	Port int
	// TLSAddr is "127.0.0.1:port" of the node's TLS port, where clients
	// reach it over TLS; "" when it serves none (ClusterOptions.TLS).
	TLSAddr string
	// Dir is the working directory (dump file, nodes.conf, redis.log).
	Dir string

	bin    string
	args   []string
	daemon bool
	ownDir bool // Dir is a temporary directory this package made

	mu    sync.Mutex
	cmd   *exec.Cmd // set while a process started by this process may run
	pid   int       // pid of the running process, 0 when none
	final bool      // stopped for good
}

// StartNode starts one Redis, standalone or cluster-enabled, and returns once
// it answers PING.
func StartNode(ctx context.Context, o NodeOptions) (*Node, error) {
	if o.Port < 0 || o.Port+busOffset > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrInvalidOptions, o.Port)
	}
	bin, err := RedisServer()
	if err != nil {
		return nil, err
	}
	dir, own := o.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hotcount-redis-"); err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		own = true
	} else if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("rediscluster: %w", err)
	}
	n, err := launch(ctx, launchSpec{
		bin: bin, port: o.Port, cluster: o.Cluster, extra: append([]string(nil), o.Args...),
		dirFor: func(int) string { return dir },
	})
	if err != nil {
		if own {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	n.ownDir = own
	return n, nil
}

// launchSpec describes a node to launch.
type launchSpec struct {
	bin     string
	port    int // 0 = pick
	cluster bool
	daemon  bool
	fresh   bool // remove the directory before starting
	extra   []string
	tls     *TLS // serve TLS too (a cluster's nodes: ClusterOptions.TLS)
	dirFor  func(port int) string
}

// launch starts a node, retrying on another port when a picked port is lost
// to another process between the check and redis-server's bind.
func launch(ctx context.Context, s launchSpec) (*Node, error) {
	for attempt := 0; ; attempt++ {
		port := s.port
		if port == 0 {
			p, err := pickPort(s.cluster)
			if err != nil {
				return nil, err
			}
			port = p
		} else if err := checkPort(port, s.cluster); err != nil {
			return nil, err
		}
		extra, tlsAddr, err := s.tlsArgs(port)
		if err != nil {
			return nil, err
		}
		dir := s.dirFor(port)
		if s.fresh {
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("rediscluster: %w", err)
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		n := &Node{
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Port:    port,
			TLSAddr: tlsAddr,
			Dir:     dir,
			bin:     s.bin,
			args:    nodeArgs(port, dir, s.cluster, extra),
			daemon:  s.daemon,
		}
		n.mu.Lock()
		err = n.startLocked(ctx)
		n.mu.Unlock()
		if err == nil {
			return n, nil
		}
		if s.port != 0 || !errors.Is(err, ErrPortInUse) || attempt >= portRetries {
			return nil, err
		}
		if s.fresh {
			os.RemoveAll(dir)
		}
	}
}

// TLS names the PEM files of a cluster whose nodes serve TLS
// (ClusterOptions.TLS).
type TLS struct {
	CertFile, KeyFile string // the nodes' server certificate and key
	// ClientCertFile and ClientKeyFile are the certificate a node presents
	// when it connects to another: the cluster bus always asks for one.
	ClientCertFile, ClientKeyFile string
	CAFile                        string // the CA that signed them all
}

// tlsArgs returns s.extra with, when s.tls is set, the arguments that make
// the node on port serve TLS on a free port of its own (returned as
// tlsAddr) and speak TLS to the other nodes: on the cluster bus (kept at
// port+10000, where the plain-port handshakes of create look for it) and
// for replication, presenting the client certificate (the bus asks for
// one). The plain port stays open for this package's own commands;
// CLUSTER SLOTS answers each client with the ports of its own kind.
// Clients may present a certificate (tls-auth-clients optional).
func (s launchSpec) tlsArgs(port int) (extra []string, tlsAddr string, err error) {
	extra = s.extra
	if s.tls == nil {
		return extra, "", nil
	}
	tp, err := pickPort(false)
	if err != nil {
		return nil, "", err
	}
	extra = append(slices.Clone(extra),
		"--tls-port", strconv.Itoa(tp),
		"--tls-cert-file", s.tls.CertFile, "--tls-key-file", s.tls.KeyFile,
		"--tls-client-cert-file", s.tls.ClientCertFile, "--tls-client-key-file", s.tls.ClientKeyFile,
		"--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", "optional")
	if s.cluster {
		extra = append(extra, "--tls-cluster", "yes", "--tls-replication", "yes",
			"--cluster-port", strconv.Itoa(port+busOffset))
	}
	return extra, net.JoinHostPort("127.0.0.1", strconv.Itoa(tp)), nil
}

// nodeArgs returns the redis-server command line of a node.
func nodeArgs(port int, dir string, cluster bool, extra []string) []string {
	a := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, logFile),
		"--pidfile", filepath.Join(dir, pidFile),
		"--daemonize", "no",
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "local",
	}
	if cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", nodesFile,
			"--cluster-node-timeout", "2000",
			"--cluster-replica-validity-factor", "0",
			"--cluster-allow-replica-migration", "no",
		)
	}
	return append(a, extra...)
}

// startLocked starts the process and waits until it answers PING.
func (n *Node) startLocked(ctx context.Context) error {
	logPath := filepath.Join(n.Dir, logFile)
	var logOff int64
	if st, err := os.Stat(logPath); err == nil {
		logOff = st.Size()
	}
	out, err := os.OpenFile(filepath.Join(n.Dir, outFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	cmd := exec.Command(n.bin, n.args...)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = out, out
	if n.daemon {
		cmd.SysProcAttr = daemonAttr()
	} else {
		cmd.SysProcAttr = foregroundAttr()
	}
	err = cmd.Start()
	out.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("rediscluster: start %s: %w", n.Addr, err)
	}
	n.cmd, n.pid = cmd, cmd.Process.Pid
	if err := n.waitReady(ctx, logOff); err != nil {
		n.killLocked()
		return err
	}
	return nil
}

// waitReady polls until the node answers PONG, it exits, or ctx ends.
func (n *Node) waitReady(ctx context.Context, logOff int64) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyTimeout)
		defer cancel()
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if processGone(n.pid) {
			return n.startFailure(logOff)
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		r, err := Do(pctx, n.Addr, "PING")
		cancel()
		if err == nil && r == "PONG" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rediscluster: %s did not answer PING: %w (last: %v)", n.Addr, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// startFailure explains why a starting process exited.
func (n *Node) startFailure(logOff int64) error {
	var msg []byte
	if b, err := os.ReadFile(filepath.Join(n.Dir, logFile)); err == nil && int64(len(b)) >= logOff {
		msg = append(msg, b[logOff:]...)
	}
	if b, err := os.ReadFile(filepath.Join(n.Dir, outFile)); err == nil {
		msg = append(msg, b...)
	}
	tail := lastLines(msg, 5)
	if bytes.Contains(msg, []byte("Address already in use")) {
		return fmt.Errorf("%w: redis-server on %s exited: %s", ErrPortInUse, n.Addr, tail)
	}
	return fmt.Errorf("rediscluster: redis-server on %s exited at start: %s", n.Addr, tail)
}

// lastLines returns the last k non-empty lines of b, joined by " | ".
func lastLines(b []byte, k int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid != 0 && !processGone(n.pid)
}

// PID returns the pid of the running process, or 0.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid
}

// Kill sends SIGKILL (a crash: nothing is saved) and waits for the process
// to exit. Killing a node that is not running does nothing.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.killLocked()
}

// killLocked kills and reaps the process, if any, and removes its pidfile.
func (n *Node) killLocked() error {
	return n.signalLocked(syscall.SIGKILL, killTimeout)
}

// signalLocked sends sig, waits up to wait for the exit, and reaps. After a
// SIGTERM that is not obeyed in time it falls back to SIGKILL.
func (n *Node) signalLocked(sig syscall.Signal, wait time.Duration) error {
	if n.pid == 0 {
		return nil
	}
	pid := n.pid
	if err := signalProcess(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("rediscluster: signal %s: %w", n.Addr, err)
	}
	if !waitGone(pid, wait) {
		if sig != syscall.SIGKILL {
			return n.signalLocked(syscall.SIGKILL, killTimeout)
		}
		return fmt.Errorf("rediscluster: %s (pid %d) did not exit after %v", n.Addr, pid, sig)
	}
	if n.cmd != nil {
		n.cmd.Wait() // reap; the exit status of a killed server is no news
	}
	n.cmd, n.pid = nil, 0
	if err := os.Remove(filepath.Join(n.Dir, pidFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rediscluster: %w", err)
	}
	return nil
}

// waitGone polls until pid has exited or wait has passed.
func waitGone(pid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollInterval)
	}
	return true
}

// Stop shuts the node down (SIGTERM, then SIGKILL after 5 s). A node from
// StartNode with a temporary directory is gone for good: the directory is
// removed and Restart returns ErrStopped. Other nodes can be restarted.
// Stop is idempotent.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.signalLocked(syscall.SIGTERM, termTimeout)
	if n.ownDir && !n.final {
		n.final = true
		if rerr := os.RemoveAll(n.Dir); rerr != nil && err == nil {
			err = fmt.Errorf("rediscluster: %w", rerr)
		}
	}
	return err
}

// stopFinal kills the node and marks it stopped for good (Cluster.Stop).
func (n *Node) stopFinal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.final = true
	return n.killLocked()
}

// Restart stops the node if it runs and starts it again on the same port
// with the same configuration and directory. A cluster node keeps its
// nodes.conf and so rejoins its cluster (a killed primary that was failed
// over comes back as a replica). Data survives only through a dump file.
func (n *Node) Restart(ctx context.Context) error {
	return n.restart(ctx, false)
}

// RestartEmpty is Restart with the data thrown away: the dump and AOF files
// are deleted before the start, nodes.conf is kept. It models a cache node
// that lost its memory.
func (n *Node) RestartEmpty(ctx context.Context) error {
	return n.restart(ctx, true)
}

func (n *Node) restart(ctx context.Context, empty bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.final {
		return fmt.Errorf("%w: node %s", ErrStopped, n.Addr)
	}
	if err := n.signalLocked(syscall.SIGTERM, termTimeout); err != nil {
		return err
	}
	if empty {
		for _, pat := range []string{"dump.rdb", "temp-*.rdb", "appendonly.aof*", "appendonlydir"} {
			ms, _ := filepath.Glob(filepath.Join(n.Dir, pat))
			for _, m := range ms {
				if err := os.RemoveAll(m); err != nil {
					return fmt.Errorf("rediscluster: %w", err)
				}
			}
		}
	}
	return n.startLocked(ctx)
}
