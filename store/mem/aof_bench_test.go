package mem

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// BenchmarkIncrAOF compares increments of the embedded store in memory
// only and with its append-only file (fsync before every acknowledgement,
// group-committed), side by side, at 1, 16 and 256 callers each writing
// its own key. It reports increments per second.
func BenchmarkIncrAOF(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		for _, aof := range []bool{false, true} {
			name := fmt.Sprintf("callers=%d/memory", callers)
			cfg := Config{}
			if aof {
				name = fmt.Sprintf("callers=%d/aof", callers)
				cfg.AOF = filepath.Join(b.TempDir(), "cache.aof")
			}
			b.Run(name, func(b *testing.B) {
				s, err := Open(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				var wg sync.WaitGroup
				per := (b.N + callers - 1) / callers
				b.ResetTimer()
				for c := range callers {
					key := "{bench:" + strconv.Itoa(c) + "#0}"
					wg.Go(func() {
						for range per {
							if _, err := s.IncrBy(ctx, key, 1); err != nil {
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
