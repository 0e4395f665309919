package durability

import (
	"context"

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
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
		page, err := d.be.KeysAfter(lctx, prefix, after, listPage)
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
		after = page[len(page)-1]
	}
}

// checkpointPages is keyPages for the checkpoints whose key starts with
// prefix (Checkpoints.ListCheckpointsAfter).
func (d *Service) checkpointPages(ctx context.Context, prefix string, fn func(cps []durable.Checkpoint) error) error {
	after := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
		page, err := d.be.ListCheckpointsAfter(lctx, prefix, after, listPage)
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
		after = page[len(page)-1].Key
	}
}
