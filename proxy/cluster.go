package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/hotcount/hotcount/keyspace"
)

// Cluster mode: applications that already run against a Redis Cluster use
// cluster clients (go-redis ClusterClient, redis-py RedisCluster, ioredis
// Cluster, JedisCluster), which start with CLUSTER SLOTS (or SHARDS or
// NODES) and send each command to the node of its key's slot. The proxy
// answers these as a cluster in which every slot is served by the proxy
// itself (its announced address: Config.Announce, else the address the
// client connected to), or, with Config.Peers, by the group of proxies:
// the sorted list of the announced address and the peers splits the 16384
// slots in equal ranges, so every proxy of the group answers the same
// map. A client thus sends everything to the proxies, which route it
// themselves: a proxy serves any slot, so a client that holds an old map
// is never wrong. Node IDs are the SHA1 of the address. READONLY,
// READWRITE and ASKING are accepted (replica reads are the proxy's
// business). MOVED and ASK from the real cluster are followed by the
// proxy's Redis client; one that still reaches a reply is answered as
// TRYAGAIN, which cluster clients retry, never as a redirection to a node
// that is not the proxy.

// clusterNode is one proxy of the group as CLUSTER replies show it.
type clusterNode struct {
	addr, host string
	port       int
	id         string
	first      int // slots first..last
	last       int
	myself     bool
}

// nodeID is the 40-hex-digit node ID of a proxy address.
func nodeID(addr string) string {
	sum := sha1.Sum([]byte("hotcount-proxy:" + addr))
	return hex.EncodeToString(sum[:])
}

// clusterNodes returns the group as this connection's client sees it.
func (c *conn) clusterNodes() []clusterNode {
	self := c.s.cfg.Announce
	if self == "" {
		self = c.laddr
	}
	addrs := []string{self}
	for _, p := range c.s.cfg.Peers {
		if p != self {
			addrs = append(addrs, p)
		}
	}
	sort.Strings(addrs)
	nodes := make([]clusterNode, len(addrs))
	per := keyspace.SlotCount / len(addrs)
	for i, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		last := (i+1)*per - 1
		if i == len(addrs)-1 {
			last = keyspace.SlotCount - 1
		}
		nodes[i] = clusterNode{addr: a, host: host, port: p, id: nodeID(a), first: i * per, last: last, myself: a == self}
	}
	return nodes
}

// clusterCmd answers CLUSTER subcommands as a cluster of proxies.
func (c *conn) clusterCmd(args [][]byte) {
	if len(args) < 2 {
		c.out = appendErr(c.out, wrongArity("cluster"))
		return
	}
	var nb [32]byte
	sub := string(lower(nb[:0], args[1]))
	nodes := c.clusterNodes()
	switch {
	case sub == "slots" && len(args) == 2:
		c.out = appendArray(c.out, len(nodes))
		for _, n := range nodes {
			c.out = appendArray(c.out, 3)
			c.out = appendInt(c.out, int64(n.first))
			c.out = appendInt(c.out, int64(n.last))
			c.out = appendArray(c.out, 4)
			c.out = appendBulk(c.out, n.host)
			c.out = appendInt(c.out, int64(n.port))
			c.out = appendBulk(c.out, n.id)
			c.out = appendMap(c.out, 0, c.proto)
		}
	case sub == "shards" && len(args) == 2:
		c.out = appendArray(c.out, len(nodes))
		for _, n := range nodes {
			c.out = appendMap(c.out, 2, c.proto)
			c.out = appendBulk(c.out, "slots")
			c.out = appendArray(c.out, 2)
			c.out = appendInt(c.out, int64(n.first))
			c.out = appendInt(c.out, int64(n.last))
			c.out = appendBulk(c.out, "nodes")
			c.out = appendArray(c.out, 1)
			c.out = appendMap(c.out, 7, c.proto)
			for _, kv := range [][2]string{{"id", n.id}, {"ip", n.host}, {"endpoint", n.host}, {"role", "master"}, {"health", "online"}} {
				c.out = appendBulk(c.out, kv[0])
				c.out = appendBulk(c.out, kv[1])
			}
			c.out = appendBulk(c.out, "port")
			c.out = appendInt(c.out, int64(n.port))
			c.out = appendBulk(c.out, "replication-offset")
			c.out = appendInt(c.out, 0)
		}
	case sub == "nodes" && len(args) == 2:
		var b strings.Builder
		for _, n := range nodes {
			flags := "master"
			if n.myself {
				flags = "myself,master"
			}
			b.WriteString(n.id + " " + n.addr + "@" + strconv.Itoa(n.port+10000) + " " + flags +
				" - 0 0 1 connected " + strconv.Itoa(n.first) + "-" + strconv.Itoa(n.last) + "\n")
		}
		c.out = appendText(c.out, b.String(), c.proto)
	case sub == "info" && len(args) == 2:
		n := strconv.Itoa(len(nodes))
		c.out = appendText(c.out, strings.Join([]string{
			"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384",
			"cluster_slots_pfail:0", "cluster_slots_fail:0", "cluster_known_nodes:" + n,
			"cluster_size:" + n, "cluster_current_epoch:1", "cluster_my_epoch:1",
			"cluster_stats_messages_sent:0", "cluster_stats_messages_received:0",
			"total_cluster_links_buffer_limit_exceeded:0", "",
		}, "\r\n"), c.proto)
	case sub == "myid" && len(args) == 2:
		for _, n := range nodes {
			if n.myself {
				c.out = appendBulk(c.out, n.id)
			}
		}
	case sub == "keyslot" && len(args) == 3:
		c.out = appendInt(c.out, int64(keyspace.Slot(string(args[2]))))
	case sub == "help":
		lines := []string{
			"CLUSTER <subcommand> (hotcount proxy: a cluster of proxies that serve every slot). Subcommands are:",
			"SLOTS", "SHARDS", "NODES", "INFO", "MYID", "KEYSLOT <key>", "HELP",
		}
		c.out = appendArray(c.out, len(lines))
		for _, l := range lines {
			c.out = appendStatus(c.out, l)
		}
	default:
		c.s.stats.refused.Add(1)
		c.out = appendErr(c.out, "ERR CLUSTER "+strings.ToUpper(sub)+" is not supported by the hotcount proxy (or wrong number of arguments); run it on the cluster nodes directly")
	}
}

// okCmd answers +OK: READONLY, READWRITE and ASKING, which cluster
// clients send and the proxy has no use for.
func (c *conn) okCmd(args [][]byte) {
	if len(args) != 1 {
		var nb [32]byte
		c.out = appendErr(c.out, wrongArity(string(lower(nb[:0], args[0]))))
		return
	}
	c.out = appendOK(c.out)
}

// redirection reports whether a Redis error is a MOVED or ASK
// redirection, which must not reach a client: it would send the client to
// a node of the real cluster instead of the proxy.
func redirection(msg string) bool {
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// errRedirect replaces a redirection that reached a reply.
const errRedirect = "TRYAGAIN hotcount proxy: the cluster is moving this slot; try again"
