package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hotcount/hotcount"
)

// AdminHandler returns the HTTP handler of the admin port:
//
//	GET /metrics  Prometheus metrics from a registry of the proxy's own:
//	              Go and process collectors, the proxy's counters, the
//	              Client's buffer gauges and, with Config.Durable, the
//	              durable store's series (checkpoints, rollups, ...)
//	GET /healthz  200 while the process serves
//	GET /readyz   200 when Ready (not draining, the cluster answers PING),
//	              else 503 with the reason
//
// Any other path is a 404, and another method on these paths a 405 with
// Allow, each with a JSON error body (see JSONErrors).
func (s *Server) AdminHandler() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(s),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("%w: registering metrics: %w", ErrConfig, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return JSONErrors(mux), nil
}

// JSONErrors returns a handler that serves mux and writes the answers mux
// gives to a request no route takes as serve writes them: 404 for a path
// no route serves, 405 with Allow for a method the path's routes do not
// take, each with a JSON body {"error": "..."} instead of mux's plain
// text.
func JSONErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &unmatched{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.code {
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeJSON(w, rec.code, map[string]string{"error": fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)})
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
		}
	})
}

// unmatched records the status and headers of mux's answer to a request
// no route takes, and drops its plain-text body.
type unmatched struct {
	header http.Header
	code   int
}

func (u *unmatched) Header() http.Header { return u.header }

func (u *unmatched) Write(p []byte) (int, error) { return len(p), nil }

func (u *unmatched) WriteHeader(code int) {
	if u.code == 0 {
		u.code = code
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// metric is one series read at scrape time.
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s *Server, bs *hotcount.BufferStats) float64
}

func counterOf(name, help string, v func(*stats) *atomic.Int64) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue,
		func(s *Server, _ *hotcount.BufferStats) float64 { return float64(v(&s.stats).Load()) }}
}

func gaugeOf(name, help string, f func(s *Server, bs *hotcount.BufferStats) float64) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
}

var metrics = []metric{
	gaugeOf("hotcount_proxy_clients", "Open client connections.",
		func(s *Server, _ *hotcount.BufferStats) float64 { return float64(s.Clients()) }),
	counterOf("hotcount_proxy_connections_total", "Client connections accepted.",
		func(st *stats) *atomic.Int64 { return &st.accepted }),
	counterOf("hotcount_proxy_connections_rejected_total", "Client connections refused (MaxClients, shutdown).",
		func(st *stats) *atomic.Int64 { return &st.rejected }),
	counterOf("hotcount_proxy_commands_total", "Commands received.",
		func(st *stats) *atomic.Int64 { return &st.commands }),
	counterOf("hotcount_proxy_protocol_errors_total", "Connections closed for malformed or oversized input.",
		func(st *stats) *atomic.Int64 { return &st.protocolErrors }),
	counterOf("hotcount_proxy_panics_total", "Commands that panicked (bugs), answered with an error.",
		func(st *stats) *atomic.Int64 { return &st.panics }),
	counterOf("hotcount_proxy_increments_total", "INCR/INCRBY/DECR/DECRBY on counter keys accepted.",
		func(st *stats) *atomic.Int64 { return &st.counterIncrs }),
	counterOf("hotcount_proxy_reads_total", "Summed reads of counter keys (through the Client).",
		func(st *stats) *atomic.Int64 { return &st.counterReads }),
	counterOf("hotcount_proxy_estimate_answers_total", "Counter values answered from the proxy's estimate without a read.",
		func(st *stats) *atomic.Int64 { return &st.estimateReads }),
	counterOf("hotcount_proxy_clears_total", "Counters cleared (DEL, UNLINK, SET).",
		func(st *stats) *atomic.Int64 { return &st.counterClears }),
	counterOf("hotcount_proxy_passthrough_total", "Commands passed through to the cluster.",
		func(st *stats) *atomic.Int64 { return &st.passed }),
	counterOf("hotcount_proxy_split_total", "Multi-slot commands split by slot or sent to every primary.",
		func(st *stats) *atomic.Int64 { return &st.split }),
	counterOf("hotcount_proxy_upstream_errors_total", "Round trips to the cluster that failed (not Redis error replies).",
		func(st *stats) *atomic.Int64 { return &st.upstreamErrors }),
	counterOf("hotcount_proxy_refused_total", "Commands refused as unsupported by the proxy.",
		func(st *stats) *atomic.Int64 { return &st.refused }),
	gaugeOf("hotcount_proxy_estimates", "Counter keys with an estimate held.",
		func(s *Server, _ *hotcount.BufferStats) float64 { return float64(s.est.size()) }),
	gaugeOf("hotcount_buffer_unflushed_delta", "Sum of this process's buffered deltas not yet acknowledged by the cache.",
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.Unflushed) }),
	gaugeOf("hotcount_buffer_unflushed_keys", "Keys holding a buffered delta.",
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.PendingKeys) }),
	gaugeOf("hotcount_buffer_oldest_unflushed_seconds", "Age of the oldest buffered delta not yet acknowledged (the loss window of a crash).",
		func(_ *Server, bs *hotcount.BufferStats) float64 { return bs.OldestUnflushed.Seconds() }),
	{prometheus.NewDesc("hotcount_buffer_flushes_total", "Flush rounds.", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.Flushes) }},
	{prometheus.NewDesc("hotcount_buffer_flush_errors_total", "Flush rounds that failed in part or whole.", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.FlushErrors) }},
	{prometheus.NewDesc("hotcount_buffer_writes_total", "Flushed increments the cache applied.", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.OpsApplied) }},
	{prometheus.NewDesc("hotcount_buffer_backpressure_total", "Increments refused because the buffer bound was reached.", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.Backpressure) }},
	{prometheus.NewDesc("hotcount_cold_writes_total", "Cold keys' flushes sent as one plain INCRBY (no script, no extra key).", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.ColdWrites) }},
	{prometheus.NewDesc("hotcount_cold_dropped_total", "Cold keys' flushes that got no reply (timeout, lost connection) and were not sent again: each may or may not have been applied.", nil, nil), prometheus.CounterValue,
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.ColdDropped) }},
	gaugeOf("hotcount_cold_dropped_delta", "Signed sum of the deltas of the cold flushes dropped without a reply since start (at most this much is missing).",
		func(_ *Server, bs *hotcount.BufferStats) float64 { return float64(bs.ColdDroppedDelta) }),
}

// collector exports the proxy's metrics, read at scrape time.
type collector struct {
	s   *Server
	dur durableSeries // nil without a durable store
}

func newCollector(s *Server) collector {
	c := collector{s: s}
	if s.cfg.Durable {
		c.dur = newDurableSeries()
	}
	return c
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
	if c.dur != nil {
		c.dur.Describe(ch)
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.counters.Stats() // one scan of the buffer per scrape
	for _, m := range metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(c.s, &st.Buffer))
	}
	if c.dur != nil {
		c.dur.Collect(ch, &st)
	}
}
