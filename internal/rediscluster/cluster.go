package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// DefaultPrimaries is the number of primaries when
// ClusterOptions.Primaries is 0.
const DefaultPrimaries = 3

// Cluster limits.
const (
	numSlots      = 16384
	createTimeout = 60 * time.Second // StartCluster, when ctx has no deadline
	maxRedirects  = 5
)

// ClusterOptions configures StartCluster. The zero value is 3 primaries
// without replicas on free ports in a temporary directory.
type ClusterOptions struct {
	// Primaries is the number of primaries; 0 means DefaultPrimaries.
	Primaries int
	// Replicas is the number of replicas per primary; 0 means none.
	Replicas int
	// Dir holds one directory per node (node-PORT) and the state file.
	// "" means a fresh temporary directory that Stop removes.
	Dir string
	// BasePort, when set, puts node i on BasePort+i (primaries first, then
	// the replicas of primary 0, of primary 1, ...). 0 picks free ports.
	BasePort int
	// TLS, when set, makes every node serve TLS on a second port
	// (Node.TLSAddr, Cluster.TLSSeeds) and speak TLS on the cluster bus
	// and for replication, with these files.
	TLS *TLS
	// Daemonize lets the processes outlive this process (for the command
	// line): they run in their own session, and Down(Dir) stops them.
	Daemonize bool
}

// Cluster is a running Redis Cluster of real redis-server processes.
type Cluster struct {
	dir       string
	ownDir    bool
	primaries int
	replicas  int
	nodes     []*Node
	ids       map[string]*Node // cluster node ID -> node

	stopOnce sync.Once
	stopErr  error
}

// StartCluster starts the nodes, assigns slots, joins them, attaches the
// replicas and returns once the cluster is healthy (see WaitHealthy). On
// error every process it started is killed. Without a ctx deadline the whole
// start is bounded by 60 s.
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if o.Primaries == 0 {
		o.Primaries = DefaultPrimaries
	}
	if o.Primaries < 0 || o.Replicas < 0 {
		return nil, fmt.Errorf("%w: %d primaries, %d replicas", ErrInvalidOptions, o.Primaries, o.Replicas)
	}
	total := o.Primaries * (1 + o.Replicas)
	if o.BasePort < 0 || (o.BasePort > 0 && o.BasePort+total-1+busOffset > 65535) {
		return nil, fmt.Errorf("%w: base port %d for %d nodes", ErrInvalidOptions, o.BasePort, total)
	}
	bin, err := RedisServer()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, createTimeout)
		defer cancel()
	}
	c := &Cluster{dir: o.Dir, primaries: o.Primaries, replicas: o.Replicas, ids: map[string]*Node{}}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "hotcount-cluster-"); err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		c.ownDir = true
	} else {
		if c.dir, err = filepath.Abs(c.dir); err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("rediscluster: %w", err)
		}
		if st, err := readState(c.dir); err == nil && len(st.alive()) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrRunning, c.dir)
		}
	}
	if err := c.startNodes(ctx, bin, o); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.writeState(); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.create(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startNodes launches all processes concurrently.
func (c *Cluster) startNodes(ctx context.Context, bin string, o ClusterOptions) error {
	total := o.Primaries * (1 + o.Replicas)
	nodes := make([]*Node, total)
	g, gctx := errgroup.WithContext(ctx)
	for i := range total {
		port := 0
		if o.BasePort > 0 {
			port = o.BasePort + i
		}
		g.Go(func() error {
			n, err := launch(gctx, launchSpec{
				bin: bin, port: port, cluster: true, daemon: o.Daemonize, fresh: true, tls: o.TLS,
				dirFor: func(p int) string { return filepath.Join(c.dir, "node-"+strconv.Itoa(p)) },
			})
			nodes[i] = n
			return err
		})
	}
	err := g.Wait()
	for _, n := range nodes {
		if n != nil {
			c.nodes = append(c.nodes, n)
		}
	}
	return err
}

// create assigns slots, joins the nodes and attaches the replicas.
func (c *Cluster) create(ctx context.Context) error {
	ids := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		id, err := Do(ctx, n.Addr, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[i] = id
		c.ids[id] = n
	}
	for i := range c.primaries {
		n := c.nodes[i]
		if _, err := Do(ctx, n.Addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
		lo, hi := i*numSlots/c.primaries, (i+1)*numSlots/c.primaries-1
		if _, err := Do(ctx, n.Addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return err
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if _, err := Do(ctx, first.Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port)); err != nil {
			return err
		}
	}
	if err := poll(ctx, c.allKnown); err != nil {
		return fmt.Errorf("%w: nodes did not meet: %w", ErrNotHealthy, err)
	}
	for i := range c.primaries {
		for j := range c.replicas {
			r := c.nodes[c.primaries+i*c.replicas+j]
			if err := poll(ctx, func(ctx context.Context) error {
				_, err := Do(ctx, r.Addr, "CLUSTER", "REPLICATE", ids[i])
				return err
			}); err != nil {
				return fmt.Errorf("%w: %s cannot replicate %s: %w", ErrNotHealthy, r.Addr, c.nodes[i].Addr, err)
			}
		}
	}
	return nil
}

// allKnown returns nil once every node knows every node, handshakes done.
func (c *Cluster) allKnown(ctx context.Context) error {
	for _, n := range c.nodes {
		s, err := Do(ctx, n.Addr, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		known := 0
		for _, e := range parseClusterNodes(s) {
			if !e.has("handshake") && !e.has("noaddr") {
				known++
			}
		}
		if known != len(c.nodes) {
			return fmt.Errorf("%s knows %d of %d nodes", n.Addr, known, len(c.nodes))
		}
	}
	return nil
}

// poll calls f every pollInterval until it returns nil or ctx ends; then it
// returns f's last error.
func poll(ctx context.Context, f func(context.Context) error) error {
	t := time.NewTicker(5 * pollInterval)
	defer t.Stop()
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Dir returns the cluster's directory.
func (c *Cluster) Dir() string { return c.dir }

// Seeds returns the addresses of all nodes, primaries first.
func (c *Cluster) Seeds() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// TLSSeeds returns the TLS addresses of all nodes, primaries first; nil
// when the cluster serves no TLS (ClusterOptions.TLS).
func (c *Cluster) TLSSeeds() []string {
	var out []string
	for _, n := range c.nodes {
		if n.TLSAddr != "" {
			out = append(out, n.TLSAddr)
		}
	}
	return out
}

// Nodes returns all nodes, primaries first (in their start order; roles
// change after a failover).
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns the node with address addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Primaries returns the current primaries, ordered by their lowest slot: the
// nodes that own slots and are not flagged as failed in the view of the
// first running node that answers CLUSTER NODES.
func (c *Cluster) Primaries(ctx context.Context) ([]string, error) {
	var last error = fmt.Errorf("%w: no running node", ErrNotHealthy)
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		s, err := Do(ctx, n.Addr, "CLUSTER", "NODES")
		if err != nil {
			last = err
			continue
		}
		return primariesOf(parseClusterNodes(s)), nil
	}
	return nil, last
}

// FlushAll runs FLUSHALL on every current primary (for test isolation).
func (c *Cluster) FlushAll(ctx context.Context) error {
	return c.onPrimaries(ctx, "FLUSHALL")
}

// ResetStats runs CONFIG RESETSTAT on every running node, so that
// CommandStats counts from zero.
func (c *Cluster) ResetStats(ctx context.Context) error {
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		if _, err := Do(ctx, n.Addr, "CONFIG", "RESETSTAT"); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) onPrimaries(ctx context.Context, args ...string) error {
	ps, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if _, err := Do(ctx, p, args...); err != nil {
			return err
		}
	}
	return nil
}

// Do runs one command on the cluster: on the first current primary, then
// following MOVED and ASK redirects (up to 5). The reply is as for Do.
func (c *Cluster) Do(ctx context.Context, args ...string) (string, error) {
	ps, err := c.Primaries(ctx)
	if err != nil {
		return "", err
	}
	if len(ps) == 0 {
		return "", fmt.Errorf("%w: no primary", ErrNotHealthy)
	}
	addr, asking := ps[0], false
	for range maxRedirects + 1 {
		cmds := [][]string{args}
		if asking {
			cmds = [][]string{{"ASKING"}, args}
		}
		rs, err := exchange(ctx, addr, cmds)
		if err != nil {
			return "", err
		}
		r := rs[len(rs)-1]
		if r.kind == '-' {
			f := strings.Fields(r.str)
			if len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK") {
				addr, asking = f[2], f[0] == "ASK"
				continue
			}
		}
		if err := r.err(); err != nil {
			return "", err
		}
		return r.text(), nil
	}
	return "", fmt.Errorf("%w: too many redirects for %s", ErrReply, args[0])
}

// Stop kills every process (SIGKILL: nothing is worth saving), removes the
// state file and, for a temporary directory, the directory. Stop is
// idempotent; nodes cannot be restarted afterwards.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, n := range c.nodes {
			wg.Go(func() {
				if err := n.stopFinal(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := os.Remove(filepath.Join(c.dir, stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		if c.ownDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, err)
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
