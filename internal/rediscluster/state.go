package rediscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// stateFile is the name of the JSON file that describes a cluster in its
// directory.
const stateFile = "hotcount-cluster.json"

// clusterState is the content of the state file.
type clusterState struct {
	Primaries int         `json:"primaries"`
	Replicas  int         `json:"replicas"`
	Nodes     []stateNode `json:"nodes"`
}

// stateNode is one node in the state file.
type stateNode struct {
	Addr string `json:"addr"`
	Port int    `json:"port"`
	Dir  string `json:"dir"`
}

// writeState records the nodes in the cluster directory.
func (c *Cluster) writeState() error {
	st := clusterState{Primaries: c.primaries, Replicas: c.replicas}
	for _, n := range c.nodes {
		st.Nodes = append(st.Nodes, stateNode{Addr: n.Addr, Port: n.Port, Dir: n.Dir})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	tmp := filepath.Join(c.dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, stateFile)); err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	return nil
}

// readState reads the state file of dir; ErrNoCluster when there is none.
func readState(dir string) (*clusterState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoCluster, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("rediscluster: %w", err)
	}
	var st clusterState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("rediscluster: %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

// alive returns the pids of the state's nodes that still run.
func (st *clusterState) alive() []int {
	var out []int
	for _, n := range st.Nodes {
		if pid := readPid(filepath.Join(n.Dir, pidFile)); pid > 0 && isRedisProcess(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// readPid returns the pid in a pidfile, or 0.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Down stops the redis-server processes whose pidfiles are in dir's node
// directories (those named in the state file, and any dir/*/redis.pid):
// SIGTERM, then SIGKILL after 5 s. It removes the pidfiles and the state
// file and keeps the node directories (logs). A pid that is no longer a
// redis-server is not signalled. ErrNoCluster when dir holds neither.
func Down(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("rediscluster: %w", err)
	}
	seen := map[string]bool{}
	var pidfiles []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			pidfiles = append(pidfiles, p)
		}
	}
	st, stErr := readState(dir)
	if stErr == nil {
		for _, n := range st.Nodes {
			add(filepath.Join(n.Dir, pidFile))
		}
	} else if !errors.Is(stErr, ErrNoCluster) {
		return stErr
	}
	globbed, _ := filepath.Glob(filepath.Join(dir, "*", pidFile))
	for _, p := range globbed {
		add(p)
	}
	if stErr != nil && len(globbed) == 0 {
		return stErr
	}
	var pids []int
	for _, p := range pidfiles {
		if pid := readPid(p); pid > 0 && isRedisProcess(pid) {
			if err := signalProcess(pid, syscall.SIGTERM); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	var errs []error
	deadline := time.Now().Add(termTimeout)
	for _, pid := range pids {
		if waitGone(pid, time.Until(deadline)) {
			continue
		}
		signalProcess(pid, syscall.SIGKILL)
		if !waitGone(pid, killTimeout) {
			errs = append(errs, fmt.Errorf("rediscluster: pid %d did not exit", pid))
		}
	}
	for _, p := range pidfiles {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(filepath.Join(dir, stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ClusterStatus describes a cluster recorded in a directory.
type ClusterStatus struct {
	// Dir is the cluster directory (absolute).
	Dir string `json:"dir"`
	// State is "ok" (every node up and reporting cluster_state:ok),
	// "degraded" (some nodes down, the rest ok), "fail" (a running node
	// reports a failed cluster or does not answer) or "stopped" (no node up).
	State string `json:"state"`
	// Up is the number of nodes whose process runs.
	Up int `json:"up"`
	// Seeds are the addresses of all nodes, for --redis.
	Seeds []string `json:"seeds"`
	// Nodes are the nodes in start order, primaries first.
	Nodes []NodeStatus `json:"nodes"`
}

// NodeStatus describes one node of a ClusterStatus.
type NodeStatus struct {
	// Addr is "127.0.0.1:port".
	Addr string `json:"addr"`
	// PID is the process id from the pidfile, when the process runs.
	PID int `json:"pid,omitempty"`
	// Running reports whether the process runs.
	Running bool `json:"running"`
	// Role is "primary", "replica" or "" when unknown.
	Role string `json:"role,omitempty"`
	// Primary is the address a replica follows.
	Primary string `json:"primary,omitempty"`
	// Slots are the slot ranges a primary owns, e.g. "0-5460".
	Slots string `json:"slots,omitempty"`
	// ClusterState is the node's cluster_state ("ok" or "fail").
	ClusterState string `json:"cluster_state,omitempty"`
	// Error is why a running node could not be asked.
	Error string `json:"error,omitempty"`
}

// StatusReport inspects the cluster recorded in dir: which processes run
// and what each node says of itself. ErrNoCluster when dir holds no state.
func StatusReport(ctx context.Context, dir string) (*ClusterStatus, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("rediscluster: %w", err)
	}
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	cs := &ClusterStatus{Dir: dir}
	allOK := true
	for _, sn := range st.Nodes {
		cs.Seeds = append(cs.Seeds, sn.Addr)
		ns := NodeStatus{Addr: sn.Addr}
		if pid := readPid(filepath.Join(sn.Dir, pidFile)); pid > 0 && isRedisProcess(pid) {
			ns.PID, ns.Running = pid, true
			cs.Up++
			if !describeNode(ctx, &ns) {
				allOK = false
			}
		}
		cs.Nodes = append(cs.Nodes, ns)
	}
	switch {
	case cs.Up == 0:
		cs.State = "stopped"
	case !allOK:
		cs.State = "fail"
	case cs.Up < len(cs.Nodes):
		cs.State = "degraded"
	default:
		cs.State = "ok"
	}
	return cs, nil
}

// describeNode fills in what a running node says; false if it is not ok.
func describeNode(ctx context.Context, ns *NodeStatus) bool {
	info, err := Do(ctx, ns.Addr, "CLUSTER", "INFO")
	if err != nil {
		ns.Error = err.Error()
		return false
	}
	ns.ClusterState, _ = infoField(info, "cluster_state")
	s, err := Do(ctx, ns.Addr, "CLUSTER", "NODES")
	if err != nil {
		ns.Error = err.Error()
		return false
	}
	es := parseClusterNodes(s)
	if me, ok := myself(es); ok {
		switch {
		case me.has("master"):
			ns.Role, ns.Slots = "primary", me.slotText()
		case me.has("slave"):
			ns.Role = "replica"
			for _, e := range es {
				if e.id == me.master {
					ns.Primary = e.addr
				}
			}
		}
	}
	return ns.ClusterState == "ok"
}

// Status returns a human-readable status of the cluster recorded in dir
// (see StatusReport), ending with a "seeds: a,b,c" line.
func Status(ctx context.Context, dir string) (string, error) {
	cs, err := StatusReport(ctx, dir)
	if err != nil {
		return "", err
	}
	return cs.Text(), nil
}

// Text renders the status for people.
func (cs *ClusterStatus) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster in %s: %s, %d of %d nodes up\n", cs.Dir, cs.State, cs.Up, len(cs.Nodes))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDR\tROLE\tPID\tSTATE\tSLOTS/PRIMARY")
	for _, n := range cs.Nodes {
		role, pid, state, detail := n.Role, "-", n.ClusterState, n.Slots
		if role == "" {
			role = "-"
		}
		if n.Running {
			pid = strconv.Itoa(n.PID)
		} else {
			state = "down"
		}
		if n.Primary != "" {
			detail = "of " + n.Primary
		}
		if n.Error != "" {
			state, detail = "error", n.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Addr, role, pid, state, detail)
	}
	tw.Flush()
	fmt.Fprintf(&b, "seeds: %s\n", strings.Join(cs.Seeds, ","))
	return b.String()
}
