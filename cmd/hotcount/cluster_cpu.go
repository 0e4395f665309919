package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hotcount/hotcount/internal/cgroup"
	"github.com/hotcount/hotcount/internal/rediscluster"
)

// cpuCapsFile records, in the cluster directory, the CPU group of each
// node started with --node-cpu, so that status can show the quotas and
// down can remove the groups.
const cpuCapsFile = "hotcount-cpu.json"

// cpuCaps is the content of cpuCapsFile.
type cpuCaps struct {
	// NodeCPU is the share as given, e.g. "10%".
	NodeCPU string `json:"node_cpu"`
	// Version and Mount name the cgroup hierarchy.
	Version cgroup.Version `json:"cgroup_version"`
	Mount   string         `json:"mount"`
	// Nodes maps each node to its group.
	Nodes []cpuCapNode `json:"nodes"`
}

type cpuCapNode struct {
	Addr  string `json:"addr"`
	Group string `json:"group"`
}

func (c *cpuCaps) hierarchy() cgroup.Hierarchy {
	return cgroup.Hierarchy{Version: c.Version, Mount: c.Mount}
}

// cpuParent is the group under which the nodes of the cluster in dir get
// their groups: one per cluster directory.
func cpuParent(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "hotcount/cluster-" + hex.EncodeToString(sum[:6])
}

// prepareCaps finds the machine's cpu hierarchy and checks that groups
// can be made there, before any node starts. Its error explains what is
// missing.
func prepareCaps(dir string) (cgroup.Hierarchy, error) {
	h, err := cgroup.Find()
	if err != nil {
		return h, fmt.Errorf("CPU caps need the cpu controller of cgroup v1 or v2 mounted under /sys/fs/cgroup: %w", err)
	}
	if err := h.Check(cpuParent(dir)); err != nil {
		return h, fmt.Errorf("cannot create CPU groups on %v (run as root, or with a cgroup delegated to this user): %w", h, err)
	}
	return h, nil
}

// cappedNodeTimeout is the cluster-node-timeout, in milliseconds, of a
// capped node (Redis's default; uncapped nodes keep the 2 s of the test
// clusters). A node whose quota a load uses up answers the cluster bus
// late: with 2 s its peers marked it failed under `bench --rate 4x`, and
// with no replica to take over the cluster went down (CLUSTERDOWN).
const cappedNodeTimeout = 15000

// capNodes puts every node of c under its own group with quota q and
// records the groups in dir, and gives each node cappedNodeTimeout. On
// error the groups made so far stay recorded, so that removeCaps (cluster
// down) removes them.
func capNodes(c *rediscluster.Cluster, dir string, h cgroup.Hierarchy, nodeCPU string, q cgroup.Quota) error {
	caps := &cpuCaps{NodeCPU: nodeCPU, Version: h.Version, Mount: h.Mount}
	parent := cpuParent(dir)
	for _, n := range c.Nodes() {
		group := parent + "/node-" + strconv.Itoa(n.Port)
		caps.Nodes = append(caps.Nodes, cpuCapNode{Addr: n.Addr, Group: group})
		if err := writeCaps(dir, caps); err != nil {
			return err
		}
		if err := h.Create(group, q); err != nil {
			return err
		}
		pid := n.PID()
		if pid == 0 {
			return fmt.Errorf("node %s is not running", n.Addr)
		}
		if err := h.Add(group, pid); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rediscluster.Do(ctx, n.Addr, "CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(cappedNodeTimeout))
		cancel()
		if err != nil {
			return fmt.Errorf("node %s: cluster-node-timeout: %w", n.Addr, err)
		}
	}
	return nil
}

func writeCaps(dir string, caps *cpuCaps) error {
	b, err := json.MarshalIndent(caps, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, cpuCapsFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, cpuCapsFile))
}

// readCaps returns the caps recorded in dir, or nil when there are none.
func readCaps(dir string) (*cpuCaps, error) {
	b, err := os.ReadFile(filepath.Join(dir, cpuCapsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var caps cpuCaps
	if err := json.Unmarshal(b, &caps); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, cpuCapsFile), err)
	}
	return &caps, nil
}

// removeCaps removes the groups recorded in dir (their processes must
// have exited) and then the record. It reports whether there were any.
func removeCaps(dir string) (bool, error) {
	caps, err := readCaps(dir)
	if err != nil || caps == nil {
		return false, err
	}
	h := caps.hierarchy()
	var errs []error
	for _, n := range caps.Nodes {
		if err := h.Remove(n.Group); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return true, errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(dir, cpuCapsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, err
	}
	return true, nil
}

// cpuStatus is what status shows of the caps.
type cpuStatus struct {
	// NodeCPU is the share given to cluster up, e.g. "10%".
	NodeCPU string `json:"node_cpu"`
	// Hierarchy describes the cgroup hierarchy, e.g. "cgroup v1 at
	// /sys/fs/cgroup/cpu".
	Hierarchy string `json:"hierarchy"`
	// Nodes are the nodes' groups as read now.
	Nodes []cpuNodeStatus `json:"nodes"`
}

type cpuNodeStatus struct {
	Addr  string `json:"addr"`
	Group string `json:"group"`
	// Quota is e.g. "10% (10ms per 100ms)"; "none" when the group has no
	// quota; empty when it could not be read (see Error).
	Quota string `json:"quota,omitempty"`
	// Share is the part of one CPU the quota allows (0 without a quota).
	Share float64 `json:"share"`
	// InGroup reports whether the node's process is in the group.
	InGroup bool `json:"in_group"`
	// Periods and Throttled are the group's bandwidth counts.
	cgroup.Stat
	Error string `json:"error,omitempty"`
}

// capStatus reads the quota and accounting of each node's group; pids
// are the nodes' processes by address (0: not running).
func capStatus(caps *cpuCaps, pids map[string]int) *cpuStatus {
	h := caps.hierarchy()
	out := &cpuStatus{NodeCPU: caps.NodeCPU, Hierarchy: h.String()}
	for _, n := range caps.Nodes {
		ns := cpuNodeStatus{Addr: n.Addr, Group: n.Group}
		q, limited, err := h.Quota(n.Group)
		switch {
		case err != nil:
			ns.Error = err.Error()
		case limited:
			ns.Quota, ns.Share = q.String(), q.Share()
		default:
			ns.Quota = "none"
		}
		if procs, err := h.Procs(n.Group); err == nil {
			ns.InGroup = pids[n.Addr] != 0 && slices.Contains(procs, pids[n.Addr])
		}
		if st, err := h.Stat(n.Group); err == nil {
			ns.Stat = st
		}
		out.Nodes = append(out.Nodes, ns)
	}
	return out
}

// text renders the caps for people.
func (c *cpuStatus) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu caps: each node at %s of one CPU (%s)\n", c.NodeCPU, c.Hierarchy)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDR\tQUOTA\tIN GROUP\tTHROTTLED\tGROUP")
	for _, n := range c.Nodes {
		q := n.Quota
		if n.Error != "" {
			q = "error: " + n.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d of %d periods\t%s\n", n.Addr, q, n.InGroup, n.Throttled, n.Periods, n.Group)
	}
	tw.Flush()
	return b.String()
}
