package redis

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: rueidis.DefaultTCPKeepAlive}
}

// RefreshTopology reads the slot map from the cluster now and installs it.
// The Epoch increases when the map differs from the current one. On a
// standalone server it only refreshes the connection table.
func (s *Store) RefreshTopology(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return s.refresh(ctx, 0, false)
}

// refresh fetches and installs the topology. With coalesce set, it returns
// at once when a refresh that started after the caller observed seq
// (refreshStarted.Load()) has completed meanwhile.
func (s *Store) refresh(ctx context.Context, seen uint64, coalesce bool) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if coalesce && s.refreshDone.Load() > seen {
		return nil
	}
	seq := s.refreshStarted.Add(1)
	topo, clients, err := s.fetch(ctx)
	if err != nil {
		return err
	}
	if old := s.state.Load(); old != nil {
		if slices.Equal(old.topo.Nodes, topo.Nodes) && old.topo.Owner == topo.Owner {
			topo = old.topo
		} else {
			topo.Epoch = old.topo.Epoch + 1
		}
	}
	st := &state{topo: topo, clients: make([]rueidis.Client, len(topo.Nodes)), counters: make([]*nodeCounters, len(topo.Nodes))}
	for i, n := range topo.Nodes {
		st.clients[i] = clients[n]
		st.counters[i] = s.counters(n)
	}
	s.state.Store(st)
	s.refreshDone.Store(seq)
	return nil
}

// kickRefresh asks the refresh goroutine for a refresh soon, without
// waiting.
func (s *Store) kickRefresh() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// refreshLoop refreshes the topology periodically and when kicked, until
// Close.
func (s *Store) refreshLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TopologyRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		case <-s.kick:
		}
		seen := s.refreshStarted.Load()
		ctx, cancel := context.WithTimeout(s.base, s.cfg.Timeout)
		_ = s.refresh(ctx, seen, true) // a failed refresh keeps the old map; the next tick retries
		cancel()
	}
}

// probeKey is the key of the EXISTS that makes the cluster client read
// the slot map again when it knows no node (fetch); nothing writes it.
const probeKey = "hotcount:probe"

// fetch reads the slot map: CLUSTER SLOTS from the known nodes in turn until
// one answers with a map that covers every slot.
func (s *Store) fetch(ctx context.Context) (*store.Topology, map[string]rueidis.Client, error) {
	clients := s.client.Nodes()
	if s.cluster && len(clients) == 0 {
		// The cluster client's last map read came back with no slots (the
		// seed that answered first holds none: a node outside the cluster,
		// or one that lost its configuration) and it kept no node. A
		// command with a key makes it read the map again, from every seed.
		_ = s.client.Do(ctx, s.client.B().Exists().Key(probeKey).Build()).Error()
		clients = s.client.Nodes()
	}
	addrs := make([]string, 0, len(clients))
	for a := range clients {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	if !s.cluster {
		t := &store.Topology{Nodes: addrs[:1], Epoch: 1}
		return t, clients, nil
	}
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("%w: no cluster node is known", store.ErrUnavailable)
	}
	var lastErr error
	first := int(s.refreshStarted.Load()) % len(addrs) // spread the queries over the nodes
	for i := range addrs {
		addr := addrs[(first+i)%len(addrs)]
		c := clients[addr]
		qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		resp := c.Do(qctx, c.B().ClusterSlots().Build())
		cancel()
		t, err := parseSlots(resp, addr)
		if err == nil {
			return t, clients, nil
		}
		lastErr = fmt.Errorf("CLUSTER SLOTS from %s: %w", addr, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, fmt.Errorf("%w: %w", store.ErrUnavailable, lastErr)
}

// parseSlots turns a CLUSTER SLOTS reply into a topology with Epoch 1.
// Each entry is [start, end, primary, replicas...] and each node is
// [host, port, id, ...]; an empty or "?" host means the host of from.
func parseSlots(resp rueidis.RedisResult, from string) (*store.Topology, error) {
	entries, err := resp.ToArray()
	if err != nil {
		return nil, err
	}
	fromHost, _, _ := net.SplitHostPort(from)
	type span struct {
		start, end int64
		node       string
	}
	spans := make([]span, 0, len(entries))
	names := map[string]bool{}
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("malformed slot range: %v", e)
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 ||
			start < 0 || end < start || end >= keyspace.SlotCount {
			return nil, fmt.Errorf("malformed slot range: %v", e)
		}
		host, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("malformed node in slot range: %v", e)
		}
		if host == "" || host == "?" {
			host = fromHost
		}
		name := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		names[name] = true
		spans = append(spans, span{start, end, name})
	}
	t := &store.Topology{Epoch: 1}
	for n := range names {
		t.Nodes = append(t.Nodes, n)
	}
	slices.Sort(t.Nodes)
	var covered [keyspace.SlotCount]bool
	for _, sp := range spans {
		idx := uint16(slices.Index(t.Nodes, sp.node))
		for slot := sp.start; slot <= sp.end; slot++ {
			t.Owner[slot] = idx
			covered[slot] = true
		}
	}
	if i := slices.Index(covered[:], false); i >= 0 {
		return nil, fmt.Errorf("slot %d has no primary", i)
	}
	return t, nil
}
