package server

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, registered on the server's
// own registry beside the Go and process collectors and the Client's
// stats (clientCollector). Every series that counts events is a counter
// named *_total; no label takes a counter key as its value: increments
// are labelled by namespace prefix, cache writes by node, errors by class.
type metrics struct {
	s          *Server
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	increments *prometheus.CounterVec
	errors     *prometheus.CounterVec
	calls      *prometheus.HistogramVec
	panics     prometheus.Counter
	handler    http.Handler
	// errCounts mirror hotcount_http_errors_total for /v1/stats.
	errCounts map[string]*errorCount
}

// errorCount is one class's series and its count.
type errorCount struct {
	c prometheus.Counter
	n atomic.Uint64
}

// latencyBuckets span 100 µs to 2.5 s: an in-process call to a request
// that waits out a backend timeout.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// The Client calls the server times, by the op label of
// hotcount_client_call_duration_seconds; get, get_exact and get_multi are
// the summed reads.
const (
	opIncr     = "incr"
	opIncrID   = "incr_id"
	opGet      = "get"
	opGetExact = "get_exact"
	opGetMulti = "get_multi"
	opClear    = "clear"
	opShards   = "shards"
	opResize   = "resize"
)

func newMetrics(s *Server) *metrics {
	m := &metrics{
		s: s,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcount_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hotcount_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		increments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcount_http_increments_total",
			Help: `Increments accepted through the HTTP API, by namespace prefix ("default": keys no namespace matches).`,
		}, []string{"namespace"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcount_http_errors_total",
			Help: "HTTP answers that were errors, by class (bad_request, unauthorized, forbidden, overflow, conflict, unavailable, backpressure, ...).",
		}, []string{"class"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hotcount_client_call_duration_seconds",
			Help:    "Latency of the Client calls the API makes, by op; get, get_exact and get_multi are summed reads.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotcount_http_panics_total",
			Help: "Handler panics caught and answered with 500.",
		}),
	}
	m.errCounts = make(map[string]*errorCount, len(errorClasses))
	for _, c := range errorClasses {
		m.errCounts[c] = &errorCount{c: m.errors.WithLabelValues(c)}
	}
	for _, op := range []string{opIncr, opIncrID, opGet, opGetExact, opGetMulti, opClear, opShards, opResize} {
		m.calls.WithLabelValues(op)
	}
	return m
}

// register registers the metrics, the Go and process collectors and the
// Client's on reg.
func (m *metrics) register(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{
		m.requests, m.duration, m.increments, m.errors, m.calls, m.panics,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newClientCollector(m.s.c, m.s.cfg.NodeBudget),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: registering metrics: %w", ErrConfig, err)
		}
	}
	if t := m.s.cfg.Timings; t != nil {
		if err := reg.Register(t.vec); err != nil {
			return fmt.Errorf("%w: registering metrics: %w", ErrConfig, err)
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return nil
}

// routeMetrics are one route's series, resolved once so that a request
// costs no label lookup on the common status codes.
type routeMetrics struct {
	duration prometheus.Observer
	ok       prometheus.Counter // code 200
	requests *prometheus.CounterVec
	route    string
}

// forRoute resolves route's series.
func (m *metrics) forRoute(route string) *routeMetrics {
	return &routeMetrics{
		duration: m.duration.WithLabelValues(route),
		ok:       m.requests.WithLabelValues(route, "200"),
		requests: m.requests,
		route:    route,
	}
}

// observe records one request.
func (rm *routeMetrics) observe(code int, d time.Duration) {
	if code == 0 || code == http.StatusOK {
		rm.ok.Inc()
	} else {
		rm.requests.WithLabelValues(rm.route, strconv.Itoa(code)).Inc()
	}
	rm.duration.Observe(d.Seconds())
}

// observeUnmatched records a request no route claimed.
func (m *metrics) observeUnmatched(code int) {
	m.requests.WithLabelValues("unmatched", strconv.Itoa(code)).Inc()
	m.countError(statusClass(code))
}

// countError counts one error answer of class (one of errorClasses).
func (m *metrics) countError(class string) {
	e := m.errCounts[class]
	if e == nil {
		e = m.errCounts[classInternal]
	}
	e.c.Inc()
	e.n.Add(1)
}

// errorCounts returns the non-zero error counts by class.
func (m *metrics) errorCounts() map[string]uint64 {
	out := map[string]uint64{}
	for c, e := range m.errCounts {
		if n := e.n.Load(); n > 0 {
			out[c] = n
		}
	}
	return out
}

// since records the latency of one Client call that started at start.
func (m *metrics) since(op string, start time.Time) {
	m.calls.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// incremented counts one accepted increment of key by its namespace.
func (m *metrics) incremented(c Backend, key string) {
	label := "default"
	if ns, ok := c.Namespace(key); ok {
		label = ns.Prefix
	}
	m.increments.WithLabelValues(label).Inc()
}

// handleMetrics serves the registry in the Prometheus text format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
