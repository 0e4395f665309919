package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hotcount/hotcount/store"
)

// Usage implements store.Usager: DBSIZE and INFO memory's used_memory of
// every primary, one round trip each.
func (s *Store) Usage(ctx context.Context) ([]store.NodeUsage, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	st := s.state.Load()
	out := make([]store.NodeUsage, len(st.topo.Nodes))
	for i, node := range st.topo.Nodes {
		c := st.clients[i]
		if c == nil {
			c = s.client
		}
		keys, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		if err != nil {
			return nil, fmt.Errorf("DBSIZE %s: %w", node, s.mapErr(err))
		}
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("INFO memory %s: %w", node, s.mapErr(err))
		}
		out[i] = store.NodeUsage{Node: node, Keys: keys, Bytes: usedMemory(info)}
	}
	return out, nil
}

// usedMemory reads used_memory from an INFO memory reply (0 if absent).
func usedMemory(info string) int64 {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
