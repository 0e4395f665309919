package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, all named hotcount_* and
// registered on the server's own registry.
type metrics struct {
	s          *Server
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	increments prometheus.Counter
	panics     prometheus.Counter
	handler    http.Handler
}

func newMetrics(s *Server) *metrics {
	return &metrics{
		s: s,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcount_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hotcount_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"route"}),
		increments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotcount_http_increments_total",
			Help: "Increments accepted through the HTTP API.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotcount_http_panics_total",
			Help: "Handler panics caught and answered with 500.",
		}),
	}
}

// register registers the metrics and the Client's on reg.
func (m *metrics) register(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.increments, m.panics, newClientCollector(m.s.c)} {
		if err := reg.Register(c); err != nil {
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
}

// handleMetrics serves the registry in the Prometheus text format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
