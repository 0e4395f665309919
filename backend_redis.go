package hotcount

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/store"
)

func openRedis(ctx context.Context, s settings) (store.Store, error) {
	return nil, fmt.Errorf("%w: redis backend not built yet", ErrUnavailable)
}
