package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkIncrHandler is the API's own cost per increment, in-process
// (no network), on the embedded Client.
func BenchmarkIncrHandler(b *testing.B) {
	s, _ := newTestServer(b, nil, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest("POST", "/v1/counters/likes:post:42/incr", strings.NewReader(`{"by":1}`))
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
	})
}
