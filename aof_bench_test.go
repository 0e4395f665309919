package hotcount_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/hotcount/hotcount"
)

// BenchmarkEmbeddedAOF compares unbuffered Client.Incr on the embedded
// store in memory only (what it was) and with its append-only file
// written before each acknowledgement and fsynced once a second (what
// `hotcount serve` uses) or before each acknowledgement, group committed,
// side by side, at 1, 16 and 256 callers, each on its own counter. It reports increments per second; compare the pairs:
//
//	go test -run '^$' -bench EmbeddedAOF -benchtime 2s .
func BenchmarkEmbeddedAOF(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		for _, policy := range []string{"", "everysec", "always"} {
			name := fmt.Sprintf("callers=%d/memory", callers)
			cfg := hotcount.Config{}
			if policy != "" {
				name = fmt.Sprintf("callers=%d/aof-%s", callers, policy)
				cfg.Embedded.AOF = filepath.Join(b.TempDir(), "cache.aof")
				cfg.Embedded.AOFSync = policy
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				c, err := hotcount.New(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(ctx)
				per := (b.N + callers - 1) / callers
				var wg sync.WaitGroup
				b.ResetTimer()
				for i := range callers {
					key := "bench:aof:" + strconv.Itoa(i)
					wg.Go(func() {
						for range per {
							if err := c.Incr(ctx, key, 1); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(per*callers)/b.Elapsed().Seconds(), "incr/s")
			})
		}
	}
}
