package durability

import (
	"context"
	"time"

	"github.com/hotcount/hotcount/durable"
)

// listPage is the most keys or checkpoints one listing of the durable
// store returns. Every walk over the store (a heal sweep, the counters of
// a region's resync, the mode check at start, a rebuild, a restore) reads
// it page by page in key order, each page within its own timeout, so that
// none waits for the whole store in one query or holds all of it. A
// variable for tests.
var listPage = 10_000

// keyPages calls fn with the log keys that start with prefix
// (Log.KeysAfter), a page at a time in key order; each page is read after
// fn returned for the one before.
func (d *Service) keyPages(ctx context.Context, prefix string, fn func(keys []string) error) error {
	return walk(ctx, commitTimeout(d.cfg.Timeout), func(ctx context.Context, after string) ([]string, error) {
		return d.be.KeysAfter(ctx, prefix, after, listPage)
	}, func(k string) string { return k }, fn)
}

// checkpointPages is keyPages for the checkpoints whose key starts with
// prefix (Checkpoints.ListCheckpointsAfter).
func (d *Service) checkpointPages(ctx context.Context, prefix string, fn func(cps []durable.Checkpoint) error) error {
	return walk(ctx, commitTimeout(d.cfg.Timeout), func(ctx context.Context, after string) ([]durable.Checkpoint, error) {
		return d.be.ListCheckpointsAfter(ctx, prefix, after, listPage)
	}, func(cp durable.Checkpoint) string { return cp.Key }, fn)
}

// walk reads pages of up to listPage items with list, each within
// timeout and after the key of the last item of the page before, and
// calls fn with every page that is not empty, until a page comes back
// short.
func walk[T any](ctx context.Context, timeout time.Duration, list func(ctx context.Context, after string) ([]T, error), key func(T) string, fn func([]T) error) error {
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		page, err := list(lctx, after)
		cancel()
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if len(page) < listPage {
			return nil
		}
		after = key(page[len(page)-1])
	}
}
