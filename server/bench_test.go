package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// benchEnv is one loopback server holding both the API and a no-op handler,
// and one load generator, shared by BenchmarkHTTPIncr and
// BenchmarkHTTPNoop so that their ratio measures the API's own cost.
var benchEnv struct {
	once   sync.Once
	url    string
	client *http.Client
	ts     *httptest.Server
	hc     *hotcount.Client
}

// benchTeardown stops the shared benchmark server, if one was started.
func benchTeardown() {
	if benchEnv.ts == nil {
		return
	}
	benchEnv.client.CloseIdleConnections()
	benchEnv.ts.Close()
	benchEnv.hc.Close(context.Background())
}

func benchSetup(b *testing.B) (string, *http.Client) {
	benchEnv.once.Do(func() {
		// Not tied to b's cleanup: the server outlives each benchmark run.
		c, err := hotcount.New(context.Background(), hotcount.Config{})
		if err != nil {
			panic(err)
		}
		s, err := New(Config{Client: c, Logger: quietLogger()})
		if err != nil {
			panic(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", s)
		mux.HandleFunc("POST /noop", func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}\n"))
		})
		ts := httptest.NewServer(mux) // lives until benchTeardown
		benchEnv.url, benchEnv.ts, benchEnv.hc = ts.URL, ts, c
		benchEnv.client = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	})
	return benchEnv.url, benchEnv.client
}

// benchParallelism × GOMAXPROCS clients keep the server busy, so that the
// benchmark measures throughput rather than one request's latency.
const benchParallelism = 8

func benchPost(b *testing.B, path, body string) {
	url, client := benchSetup(b)
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url+path, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkHTTPIncr: increments per second of one hot key through the API.
func BenchmarkHTTPIncr(b *testing.B) { benchPost(b, "/v1/counters/likes:post:42/incr", `{"by":1}`) }

// BenchmarkHTTPNoop: the same requests to a handler that does nothing.
func BenchmarkHTTPNoop(b *testing.B) { benchPost(b, "/noop", `{"by":1}`) }

// BenchmarkHTTPRatio measures the same two request kinds in alternating
// phases of ratioPhase requests each (all clients on one kind at a time),
// so that both see the same machine load however it drifts, and reports
// each kind's throughput and their ratio (incr / no-op; target ≥ 0.7).
func BenchmarkHTTPRatio(b *testing.B) {
	url, client := benchSetup(b)
	const ratioPhase = 2000
	workers := benchParallelism * runtime.GOMAXPROCS(0)
	var dur [2]time.Duration
	var reqs [2]int
	paths := [2]string{"/v1/counters/likes:post:42/incr", "/noop"}
	b.ResetTimer()
	for done, phase := 0, 0; done < b.N; phase++ {
		kind, n := phase%2, min(ratioPhase, b.N-done)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					resp, err := client.Post(url+paths[kind], "application/json", strings.NewReader(`{"by":1}`))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		dur[kind] += time.Since(start)
		reqs[kind] += n
		done += n
	}
	if dur[0] > 0 && dur[1] > 0 {
		incr := float64(reqs[0]) / dur[0].Seconds()
		noop := float64(reqs[1]) / dur[1].Seconds()
		b.ReportMetric(incr, "incr-req/s")
		b.ReportMetric(noop, "noop-req/s")
		b.ReportMetric(incr/noop, "ratio")
	}
}
