package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// config: CONFIG SET and CONFIG RESETSTAT are refused unless
// Config.AllowConfig (they would change every node of a cluster that other
// processes share); allowed, they go to every node (configAll). CONFIG
// REWRITE is refused (it would rewrite the nodes' own config files). The
// rest (GET, HELP, an unknown subcommand, a missing one) is answered by one
// node (any), with Redis's own replies and errors.
func (c *conn) config(args [][]byte) {
	if len(args) >= 2 {
		var nb [32]byte
		switch sub := string(lower(nb[:0], args[1])); sub {
		case "set", "resetstat":
			if !c.s.cfg.AllowConfig {
				c.s.stats.refused.Add(1)
				c.out = appendErr(c.out, "ERR CONFIG "+strings.ToUpper(sub)+" is refused by the hotcount proxy: it would change every node of the cluster, which other processes share; set resp_allow_config: true to allow it")
				return
			}
			c.configAll(strings.ToUpper(sub), c.strings(args))
			return
		case "rewrite":
			c.refuse(args)
			return
		}
	}
	c.do(c.strings(args), -1, nullShape{})
}

// configAll sends a CONFIG SET or RESETSTAT to every node, primaries and
// replicas, at once: a node's configuration is not replicated (FLUSHALL
// reaches the replicas through their primaries, CONFIG SET would not),
// CONFIG GET is answered by any node, and a replica promoted by a failover
// should run as its primary did. The reply is OK when every node said OK;
// otherwise the first refusing node's error (in address order), with the
// node named and how many nodes applied the command. The arguments go
// as the client sent them: the nodes check their arity and values.
func (c *conn) configAll(sub string, strs []string) {
	ctx, cancel := c.timeout()
	defer cancel()
	addrs, nodes, down, release, err := c.allNodes(ctx)
	if err != nil {
		c.s.stats.upstreamErrors.Add(1)
		c.out = appendErr(c.out, upstreamError(err))
		return
	}
	reach := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if down[a] == nil {
			reach = append(reach, a)
		}
	}
	res := c.sendAll(ctx, reach, nodes, strs)
	release()
	errs := make([]string, len(addrs))
	for i, j := 0, 0; i < len(addrs); i++ {
		if e := down[addrs[i]]; e != nil {
			errs[i] = upstreamError(e)
			continue
		}
		errs[i] = resultError(&res[j])
		j++
	}
	if msg := configFailure(sub, addrs, errs); msg != "" {
		c.out = appendErr(c.out, msg)
		return
	}
	c.out = appendOK(c.out)
}

// configFailure is the error reply of a CONFIG SUB sent to the nodes of
// addrs that answered errs ("" for OK): the first refusing node's error as
// the node wrote it, then the node's address, how many more refused and
// how many applied it; "" when every node said OK.
func configFailure(sub string, addrs, errs []string) string {
	first, refused := -1, 0
	for i, e := range errs {
		if e != "" {
			refused++
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 {
		return ""
	}
	msg := errs[first] + " (hotcount proxy: CONFIG " + sub + " failed on node " + addrs[first]
	if refused > 1 {
		msg += " and " + strconv.Itoa(refused-1) + " more"
	}
	return msg + fmt.Sprintf("; applied on %d of %d nodes)", len(addrs)-refused, len(addrs))
}

// allNodes returns every node, primaries and replicas, ordered by address
// (the one node of a standalone upstream), a client for each but those it
// could not connect to (down, with the error), and a function that closes
// what it opened. The nodes are those CLUSTER NODES lists but for the
// failed ones and those without an address: CLUSTER SLOTS, which rueidis
// follows, leaves out a replica that has not synced yet, which a command
// meant for every node must not miss, so such a node is reached by a
// connection of its own for this one command.
func (c *conn) allNodes(ctx context.Context) (addrs []string, nodes map[string]rueidis.Client, down map[string]error, release func(), err error) {
	release = func() {}
	if !c.s.cluster {
		addrs, nodes, err = c.primaries(ctx)
		return addrs, nodes, nil, release, err
	}
	up := c.s.upstream(c.proto)
	nodes = up.Nodes()
	// CLUSTER NODES from the first node that answers as a member of the
	// cluster: the cluster client sends it to any one node, which may be
	// the one that is down, or one removed from the cluster (reset, it
	// lists itself alone, without slots).
	var text string
	err = errors.New("no node is known")
	for _, a := range sortedAddrs(nodes) {
		n := nodes[a]
		if text, err = n.Do(ctx, n.B().ClusterNodes().Build()).ToString(); err == nil {
			if listsSlots(text) {
				break
			}
			err = fmt.Errorf("node %s lists no slot in CLUSTER NODES", a)
		}
	}
	if err != nil {
		return nil, nil, nil, release, err
	}
	if addrs = clusterNodeAddrs(text); len(addrs) == 0 {
		return nil, nil, nil, release, errors.New("CLUSTER NODES lists no node")
	}
	down = map[string]error{}
	var opened []rueidis.Client
	for _, a := range addrs {
		if nodes[a] != nil {
			continue
		}
		opt := c.s.upOpt
		opt.InitAddress = []string{a}
		opt.ForceSingleClient = true
		opt.AlwaysRESP2 = c.proto < 3
		n, err := rueidis.NewClient(opt)
		if err != nil {
			down[a] = fmt.Errorf("node %s: %w", a, err)
			continue
		}
		opened = append(opened, n)
		nodes[a] = n
	}
	release = func() {
		for _, n := range opened {
			n.Close()
		}
	}
	return addrs, nodes, down, release, nil
}

// listsSlots reports whether a CLUSTER NODES text gives a node slots.
func listsSlots(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if len(strings.Fields(line)) > 8 {
			return true
		}
	}
	return false
}

// clusterNodeAddrs returns the addresses CLUSTER NODES lists, sorted, but
// for nodes flagged failed, without an address or in a handshake.
func clusterNodeAddrs(text string) []string {
	var addrs []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		skip := false
		for _, flag := range strings.Split(f[2], ",") {
			if flag == "fail" || flag == "noaddr" || flag == "handshake" {
				skip = true
			}
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if host, port, err := net.SplitHostPort(addr); skip || err != nil || host == "" || port == "0" {
			continue
		}
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	return addrs
}
