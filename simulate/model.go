package simulate

import (
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/hotcount/hotcount/keyspace"
)

// cluster maps slots to nodes: node j owns the j-th of Nodes equal slot
// ranges, as redis-cli --cluster create lays them out.
type cluster struct {
	nodes    int
	slotNode []int32
}

func newCluster(nodes int) *cluster {
	c := &cluster{nodes: nodes, slotNode: make([]int32, keyspace.SlotCount)}
	for s := range c.slotNode {
		c.slotNode[s] = int32(s * nodes / keyspace.SlotCount)
	}
	return c
}

// node returns the node that holds key.
func (c *cluster) node(key string) int { return int(c.slotNode[keyspace.Slot(key)]) }

// hashedNodes returns the nodes of the sub-counters "0".."n-1" of key: where
// labels land when nobody chooses them.
func (c *cluster) hashedNodes(key string, n int) []int {
	out := make([]int, n)
	for i, l := range keyspace.NaiveLabels(n) {
		out[i] = c.node(keyspace.SubKey(key, l))
	}
	return out
}

// placedNodes returns the nodes of n sub-counters of key whose labels are
// chosen to spread evenly: candidate labels "0", "1", … are tried in order
// and a label is kept when its node holds fewer sub-counters than the
// current level, so every node holds ⌊n/K⌋ or ⌈n/K⌉ of them. Should the
// label search run long (it cannot with equal slot ranges, but the bound
// keeps it finite), the remaining sub-counters go to the least-loaded nodes
// with the label "". labels[i] is the label of the sub-counter on nodes[i].
func (c *cluster) placedNodes(key string, n int) (nodes []int, labels []string) {
	k := c.nodes
	counts := make([]int, k)
	out := make([]int, 0, n)
	labels = make([]string, 0, n)
	label := 0
	buf := make([]byte, 0, len(key)+24)
	for level := 1; len(out) < n; level++ {
		want := min(k, n-len(out)) // labels to place at this level
		placed := 0
		limit := label + 64*k*(int(math.Log(float64(k)))+1) + 1024
		for placed < want && label < limit {
			buf = append(buf[:0], '{')
			buf = append(buf, key...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(label), 10)
			buf = append(buf, '}')
			label++
			j := int(c.slotNode[keyspace.CRC16(string(buf[1:len(buf)-1]))%keyspace.SlotCount])
			if counts[j] < level {
				counts[j]++
				out = append(out, j)
				labels = append(labels, strconv.Itoa(label-1))
				placed++
			}
		}
		for ; placed < want; placed++ { // fallback, see the doc comment
			j := 0
			for i := range counts {
				if counts[i] < counts[j] {
					j = i
				}
			}
			counts[j]++
			out = append(out, j)
			labels = append(labels, "")
		}
	}
	return out, labels
}

// naiveDistinct returns the share of the key names "k:0" … "k:trials-1"
// whose sub-counters "0".."n-1" land on n distinct nodes, by their real
// slots. CRC16 is linear, so labels that differ in one byte are not
// independent: this share can differ a lot from PAllDistinct.
func (c *cluster) naiveDistinct(n, trials int) float64 {
	if n > c.nodes {
		return 0
	}
	stamp := make([]int32, c.nodes)
	ok := 0
	var buf []byte
	for t := 1; t <= trials; t++ {
		buf = backgroundKey(buf[:0], t-1)
		buf = append(buf, '#')
		base := len(buf)
		distinct := true
		for l := 0; l < n && distinct; l++ {
			buf = strconv.AppendInt(buf[:base], int64(l), 10)
			j := c.slotNode[keyspace.CRC16(string(buf))%keyspace.SlotCount]
			distinct = stamp[j] != int32(t)
			stamp[j] = int32(t)
		}
		if distinct {
			ok++
		}
	}
	return float64(ok) / float64(trials)
}

// spread reports how sub-counter nodes share out: the number of distinct
// nodes, the collisions (sub-counters minus distinct nodes) and the most
// sub-counters on one node.
func spread(nodes []int) (distinct, collisions, maxPerNode int) {
	seen := make(map[int]int, len(nodes))
	for _, j := range nodes {
		seen[j]++
		maxPerNode = max(maxPerNode, seen[j])
	}
	return len(seen), len(nodes) - len(seen), maxPerNode
}

// monteCarlo estimates, for n labels thrown uniformly onto k nodes, the
// probability that all are distinct and the mean number of collisions
// (n minus distinct nodes).
func monteCarlo(rng *rand.Rand, k, n, trials int) (pDistinct, collisions float64) {
	stamp := make([]int32, k)
	allDistinct, coll := 0, 0
	for t := 1; t <= trials; t++ {
		c := 0
		for range n {
			j := rng.IntN(k)
			if stamp[j] == int32(t) {
				c++
			} else {
				stamp[j] = int32(t)
			}
		}
		if c == 0 {
			allDistinct++
		}
		coll += c
	}
	return float64(allDistinct) / float64(trials), float64(coll) / float64(trials)
}

// bufferedRate is the expected write rate one key puts on the cache when its
// rate r is split over procs processes that each flush at most one write
// per interval d (seconds), and only when they hold a delta: a process sees
// r·d/procs increments per interval, Poisson, so it flushes with probability
// 1-exp(-r·d/procs).
func bufferedRate(r float64, procs int, d float64) float64 {
	p := float64(procs)
	return p / d * -math.Expm1(-r*d/p)
}

// zipfRates returns the rate of each background key by rank: total·i^-s/H.
func zipfRates(keys int, s, total float64) []float64 {
	rates := make([]float64, keys)
	var h float64
	for i := range rates {
		w := math.Pow(float64(i+1), -s)
		rates[i] = w
		h += w
	}
	for i := range rates {
		rates[i] *= total / h
	}
	return rates
}

// backgroundKey names the background key of rank i (0-based).
func backgroundKey(buf []byte, i int) []byte {
	buf = append(buf[:0], "k:"...)
	return strconv.AppendInt(buf, int64(i), 10)
}
