package hotcount

import (
	"context"

	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// openStore opens the backend that s names: Redis when addresses are given,
// otherwise the embedded store.
func openStore(ctx context.Context, s settings) (store.Store, error) {
	if len(s.Redis) > 0 {
		return openRedis(ctx, s)
	}
	return mem.New(mem.Config{Nodes: s.EmbeddedNodes, Now: s.Now})
}
