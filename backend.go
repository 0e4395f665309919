package hotcount

import (
	"context"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// openStore opens the backend that s names: Redis when addresses are given,
// otherwise the embedded store.
func openStore(ctx context.Context, s settings) (store.Store, error) {
	if len(s.Redis) > 0 {
		return openRedis(ctx, s)
	}
	return mem.New(mem.Config{Nodes: s.EmbeddedNodes, Clock: funcClock{s.Now}})
}

// funcClock is the system clock with Now replaced (the Config's Now).
type funcClock struct{ now func() time.Time }

func (f funcClock) Now() time.Time {
	if f.now == nil {
		return time.Now()
	}
	return f.now()
}
func (funcClock) NewTicker(d time.Duration) clock.Ticker { return clock.Real().NewTicker(d) }
func (funcClock) After(d time.Duration) <-chan time.Time { return clock.Real().After(d) }
