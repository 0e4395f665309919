// Package server is hotcount's HTTP face: a JSON API over a
// *hotcount.Client, Prometheus metrics, health probes and a live
// dashboard, all from one http.Handler that opens no listener itself.
//
// The server translates HTTP into Client calls and Client results into
// JSON; it keeps no model of the data of its own. Hot keys, node write
// rates, automatic-N decisions and the loss-window gauges all come from the
// Client, which measures them in every mode.
//
// Every request is checked completely before anything is changed: the key
// (one URL-escaped path segment, hotcount.ValidateKey), the body (a JSON
// object of bounded size, no unknown fields, nothing after it, integers that
// fit int64) and, for writes when a token is configured, the bearer token
// (compared in constant time). A rejected request changes nothing. Errors
// are JSON {"error": "..."} with the status documented in openapi.json;
// backend trouble is 503 with Retry-After. A recover guard answers 500 if a
// handler panics, but no input is meant to reach it.
package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults used when a Config field is zero.
const (
	// DefaultMaxBody bounds request bodies other than batch reads.
	DefaultMaxBody = 64 << 10
	// DefaultMaxBatchBody bounds the body of POST /v1/counters:get.
	DefaultMaxBatchBody = 1 << 20
	// DefaultMaxKeys bounds the keys of one batch read.
	DefaultMaxKeys = 1000
	// DefaultRetryAfter is the Retry-After of a 503.
	DefaultRetryAfter = time.Second
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("hotcount: invalid server config")

// Config configures a Server. Only Client is required.
type Config struct {
	// Client holds the counters: a *hotcount.Client.
	Client Backend
	// Token, when set, is required as "Authorization: Bearer <Token>" on
	// the write endpoints (increment, clear, resize).
	Token string
	// Logger receives errors and panics; nil means slog.Default().
	Logger *slog.Logger
	// MaxBody bounds request bodies in bytes; 0 means DefaultMaxBody.
	MaxBody int64
	// MaxBatchBody bounds the body of a batch read; 0 means
	// DefaultMaxBatchBody.
	MaxBatchBody int64
	// MaxKeys bounds the keys of a batch read; 0 means DefaultMaxKeys.
	MaxKeys int
	// RetryAfter is sent with 503 answers; 0 means DefaultRetryAfter.
	RetryAfter time.Duration
}

// Server serves the hotcount HTTP API. Create it with New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	c       Backend
	mux     *http.ServeMux
	routes  []string
	reg     *prometheus.Registry
	metrics *metrics
	ready   chan struct{} // closed by Drain
}

// handlerFunc is an endpoint: it writes a success itself and returns an
// error for the caller to write.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one entry of the route table.
type route struct {
	pattern string
	h       handlerFunc
	write   bool // needs the token
}

// New returns a Server for cfg. The caller's Config is not modified.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if strings.TrimSpace(cfg.Token) != cfg.Token {
		return nil, fmt.Errorf("%w: Token must not have surrounding spaces", ErrConfig)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"MaxBody", cfg.MaxBody}, {"MaxBatchBody", cfg.MaxBatchBody}, {"MaxKeys", int64(cfg.MaxKeys)},
		{"RetryAfter", int64(cfg.RetryAfter)}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: %s must not be negative", ErrConfig, f.name)
		}
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBatchBody == 0 {
		cfg.MaxBatchBody = DefaultMaxBatchBody
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	s := &Server{cfg: cfg, log: cfg.Logger, c: cfg.Client, mux: http.NewServeMux(), ready: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.reg = prometheus.NewRegistry()
	s.metrics = newMetrics(s)
	if err := s.metrics.register(s.reg); err != nil {
		return nil, err
	}
	for _, rt := range s.table() {
		s.mux.Handle(rt.pattern, s.wrap(rt))
		s.routes = append(s.routes, rt.pattern)
	}
	return s, nil
}

// table lists every route the server serves.
func (s *Server) table() []route {
	return []route{
		{pattern: "POST /v1/counters/{key}/incr", h: s.handleIncr, write: true},
		{pattern: "GET /v1/counters/{key}", h: s.handleGet},
		{pattern: "DELETE /v1/counters/{key}", h: s.handleClear, write: true},
		{pattern: "POST /v1/counters:get", h: s.handleGetMulti},
		{pattern: "GET /v1/counters/{key}/shards", h: s.handleShards},
		{pattern: "PUT /v1/counters/{key}/shards", h: s.handleResize, write: true},
		{pattern: "GET /v1/nodes", h: s.handleNodes},
		{pattern: "GET /v1/hotkeys", h: s.handleHotKeys},
		{pattern: "GET /v1/openapi.json", h: s.handleOpenAPI},
		{pattern: "GET /metrics", h: s.handleMetrics},
		{pattern: "GET /healthz", h: s.handleHealthz},
		{pattern: "GET /readyz", h: s.handleReadyz},
		{pattern: "GET /{$}", h: s.handleDashboard},
		{pattern: "GET /assets/{file...}", h: s.handleAsset},
	}
}

// Routes returns the patterns of every served route ("METHOD /path").
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// Registry returns the server's own Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Drain makes /readyz answer 503, so that a load balancer stops sending
// traffic before shutdown. It is idempotent.
func (s *Server) Drain() {
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// respWriter records the status of a response. Until a route claims the
// request (routed), it swallows what the mux's own 404/405/redirect
// handlers write, so that ServeHTTP can answer in JSON instead.
type respWriter struct {
	http.ResponseWriter
	code   int
	routed bool
}

func (w *respWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	if w.routed {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *respWriter) Write(b []byte) (int, error) {
	if !w.routed {
		return len(b), nil
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := &respWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		s.metrics.panics.Inc()
		if rw.code == 0 {
			rw.routed = true
			writeJSON(rw, http.StatusInternalServerError, errorBody{Error: "internal error"})
		}
	}()
	if len(r.TransferEncoding) > 0 {
		// The body was framed by Transfer-Encoding alone: net/http drops a
		// Content-Length sent beside it, as RFC 9112 section 6.3 says. Such
		// a request may be an attempt at request smuggling, so the
		// connection is closed after the answer, as the RFC requires;
		// whatever followed on it is never read as a request.
		w.Header().Set("Connection", "close")
	}
	if strings.HasPrefix(r.URL.Path, "/v1/counters/") {
		if msg := badCounterPath(r.URL.EscapedPath()); msg != "" {
			// The mux would clean such a path and redirect it elsewhere.
			rw.routed = true
			writeJSON(rw, http.StatusBadRequest, errorBody{Error: msg})
			s.metrics.observeUnmatched(http.StatusBadRequest)
			return
		}
	}
	s.mux.ServeHTTP(rw, r)
	if rw.routed {
		return
	}
	// The mux found no route: answer its 404, 405 or redirect in JSON.
	code := rw.code
	if code == 0 {
		code = http.StatusNotFound
	}
	rw.routed = true
	var msg string
	switch code {
	case http.StatusNotFound:
		msg = fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, w.Header().Get("Allow"))
	default:
		msg = fmt.Sprintf("see %s", w.Header().Get("Location"))
	}
	writeJSON(rw, code, errorBody{Error: msg})
	s.metrics.observeUnmatched(code)
}

// wrap turns a route into an http.Handler: it claims the request, checks
// the token on write routes, writes a returned error and records metrics.
func (s *Server) wrap(rt route) http.Handler {
	rm := s.metrics.forRoute(rt.pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw, ok := w.(*respWriter)
		if !ok {
			rw = &respWriter{ResponseWriter: w}
		}
		rw.routed = true
		start := time.Now()
		var err error
		if rt.write && !s.authorized(r) {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="hotcount"`)
			err = &httpError{status: http.StatusUnauthorized, msg: "missing or wrong bearer token"}
		} else {
			err = rt.h(rw, r)
		}
		if err != nil {
			s.writeError(rw, r, err)
		}
		rm.observe(rw.code, time.Since(start))
	})
}

// authorized reports whether r carries the configured token (always true
// when no token is configured).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

// handleHealthz says the process is up.
func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// handleReadyz says whether the backend answers and the server is not
// draining.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-s.ready:
		return &httpError{status: http.StatusServiceUnavailable, msg: "shutting down"}
	default:
	}
	if err := s.c.Ping(r.Context()); err != nil {
		return &httpError{status: http.StatusServiceUnavailable, msg: "backend not ready: " + err.Error()}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// badCounterPath explains why a /v1/counters/ path has an empty, "." or
// ".." key segment, or returns "" when it has none. Such keys cannot be
// named in a path (they are valid keys for POST /v1/counters:get).
func badCounterPath(escaped string) string {
	rest := strings.TrimPrefix(escaped, "/v1/counters/")
	seg, _, _ := strings.Cut(rest, "/")
	switch seg {
	case "":
		return "the counter key in the path is empty"
	case ".", "..":
		return fmt.Sprintf("the counter key %q cannot be used in a path", seg)
	}
	return ""
}
