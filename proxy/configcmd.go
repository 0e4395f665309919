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
	addrs, nodes, release, err := c.allNodes(ctx)
	if err != nil {
		c.s.stats.upstreamErrors.Add(1)
		c.out = appendErr(c.out, upstreamError(err))
		return
	}
	res := c.sendAll(ctx, addrs, nodes, strs)
	release()
	first, refused := -1, 0
	for i := range res {
		if resultError(&res[i]) != "" {
			refused++
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 {
		c.out = appendOK(c.out)
		return
	}
	msg := resultError(&res[first]) + " (hotcount proxy: CONFIG " + sub + " refused by node " + addrs[first]
	if refused > 1 {
		msg += " and " + strconv.Itoa(refused-1) + " more"
	}
	msg += fmt.Sprintf("; applied on %d of %d nodes)", len(addrs)-refused, len(addrs))
	c.out = appendErr(c.out, msg)
}

// allNodes returns a client for every node, primaries and replicas,
// ordered by address (the one node of a standalone upstream), and a
// function that closes what it opened. The nodes are those CLUSTER NODES
// lists but for the failed ones and those without an address: CLUSTER
// SLOTS, which rueidis follows, leaves out a replica that has not synced
// yet, which a command meant for every node must not miss, so such a node
// is reached by a connection of its own for this one command.
func (c *conn) allNodes(ctx context.Context) ([]string, map[string]rueidis.Client, func(), error) {
	if !c.s.cluster {
		addrs, nodes, err := c.primaries(ctx)
		return addrs, nodes, func() {}, err
	}
	up := c.s.upstream(c.proto)
	text, err := up.Do(ctx, up.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, nil, nil, err
	}
	addrs := clusterNodeAddrs(text)
	if len(addrs) == 0 {
		return nil, nil, nil, errors.New("CLUSTER NODES lists no node")
	}
	nodes := up.Nodes()
	var opened []rueidis.Client
	release := func() {
		for _, n := range opened {
			n.Close()
		}
	}
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
			release()
			return nil, nil, nil, fmt.Errorf("node %s: %w", a, err)
		}
		opened = append(opened, n)
		nodes[a] = n
	}
	return addrs, nodes, release, nil
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
