// Package server is hotcount's HTTP face: a JSON API over a
// *hotcount.Client, Prometheus metrics, health probes and a live
// dashboard, all from one http.Handler that opens no listener itself.
//
// The server translates HTTP into Client calls and Client results into
// JSON; it keeps no model of the data of its own. Hot keys, node write
// rates, automatic-N decisions and the loss-window gauges all come from the
// Client, which measures them in every mode.
//
// Access. With no token configured every route answers anyone (serve it on
// loopback). Once any token is configured (Config.Token, Config.Tokens),
// every data and admin route needs a bearer token that carries the route's
// scope (ScopeRead, ScopeWrite, ScopeAdmin) and, for a token limited to
// key prefixes, a counter inside them; /metrics needs ScopeMetrics or
// ScopeAdmin unless Config.MetricsPublic. The health probes, the OpenAPI
// document and the dashboard's static files are public (the dashboard asks
// for a token and sends it with its API calls); Config.NoDashboard turns
// the dashboard off. A missing or unknown token answers 401, a token
// without the scope or outside its prefixes 403. Tokens are compared as
// SHA-256 sums in constant time.
//
// Every request is checked completely before anything is changed: the
// token, the key (one URL-escaped path segment, hotcount.ValidateKey; "."
// and ".." cannot be named in a path, escaped or not) and the body: one
// JSON object of bounded size whose member names match exactly, each
// present once, none null, with integers that fit int64 and nothing after
// it. A rejected request changes nothing. A request framed by
// Transfer-Encoding (net/http drops a Content-Length sent with it, as RFC
// 9112 says) is answered and its connection closed. Errors are JSON
// {"error": "..."} with the status documented in openapi.json; backend
// trouble is 503 with Retry-After. A recover guard answers 500 if a handler
// panics, but no input is meant to reach it.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcount/hotcount"
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
	// DefaultNodeBudget is the cache writes per second one node may take,
	// drawn as a line on the dashboard's absorption chart: the automatic-N
	// default budget.
	DefaultNodeBudget = hotcount.DefaultAutoNBudget
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("hotcount: invalid server config")

// Config configures a Server. Only Client is required.
type Config struct {
	// Client holds the counters: a *hotcount.Client.
	Client Backend
	// Token, when set, is one bearer token that carries every scope on
	// every key (the single token of earlier releases; reads need it too).
	Token string
	// Tokens are bearer tokens with scopes and optional key prefixes. When
	// Token or Tokens is set, every data and admin route needs a token
	// (see the package doc).
	Tokens []Token
	// MetricsPublic serves /metrics without a token even when tokens are
	// configured.
	MetricsPublic bool
	// NoDashboard turns the dashboard (/ and /assets/) off: they answer
	// 404.
	NoDashboard bool
	// NodeBudget is the cache writes per second one node may take, drawn
	// on the dashboard; 0 means DefaultNodeBudget.
	NodeBudget float64
	// Logger receives errors and panics; nil means slog.Default().
	Logger *slog.Logger
	// AccessLog logs one line per request to Logger (method, path, route,
	// status, bytes, duration, token name; never a secret).
	AccessLog bool
	// MaxBody bounds request bodies in bytes; 0 means DefaultMaxBody.
	MaxBody int64
	// MaxBatchBody bounds the body of a batch read; 0 means
	// DefaultMaxBatchBody.
	MaxBatchBody int64
	// MaxKeys bounds the keys of a batch read; 0 means DefaultMaxKeys.
	MaxKeys int
	// RetryAfter is sent with 503 answers; 0 means DefaultRetryAfter.
	RetryAfter time.Duration
	// Timings, when set, is exported with the other metrics: the Client's
	// background operations, fed by hotcount.Config.Observe.
	Timings *Timings
}

// Server serves the hotcount HTTP API. Create it with New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	c       Backend
	tokens  []*principal
	csrf    *http.CrossOriginProtection
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
	// scope is what a token needs for the route; "" means public.
	scope Scope
	// keyed routes name one counter in {key}: a token limited to prefixes
	// must cover it.
	keyed bool
	// global routes span every counter: a token limited to prefixes may
	// not use them.
	global bool
	// api routes accept only the query parameters in params, each once.
	api    bool
	params []string
}

// New returns a Server for cfg. The caller's Config is not modified.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if strings.TrimSpace(cfg.Token) != cfg.Token {
		return nil, fmt.Errorf("%w: Token must not have surrounding spaces", ErrConfig)
	}
	tokens, err := checkTokens(cfg.Token, cfg.Tokens)
	if err != nil {
		return nil, err
	}
	if cfg.NodeBudget < 0 {
		return nil, fmt.Errorf("%w: NodeBudget must not be negative", ErrConfig)
	}
	if cfg.NodeBudget == 0 {
		cfg.NodeBudget = DefaultNodeBudget
	}
	cfg.Tokens = nil // kept as principals only
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
	s := &Server{cfg: cfg, log: cfg.Logger, c: cfg.Client, tokens: tokens, csrf: http.NewCrossOriginProtection(),
		mux: http.NewServeMux(), ready: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.reg = prometheus.NewRegistry()
	s.metrics = newMetrics(s)
	if err := s.metrics.register(s.reg); err != nil {
		return nil, err
	}
	for _, rt := range s.table() {
		if s.cfg.NoDashboard && (rt.pattern == "GET /{$}" || rt.pattern == "GET /favicon.ico" || strings.HasPrefix(rt.pattern, "GET /assets/")) {
			continue
		}
		s.mux.Handle(rt.pattern, s.wrap(rt))
		s.routes = append(s.routes, rt.pattern)
	}
	return s, nil
}

// table lists every route the server serves, with the scope a token
// needs for it.
func (s *Server) table() []route {
	return []route{
		{pattern: "POST /v1/counters/{key}/incr", h: s.handleIncr, scope: ScopeWrite, keyed: true, api: true},
		{pattern: "GET /v1/counters/{key}", h: s.handleGet, scope: ScopeRead, keyed: true, api: true, params: []string{"consistency"}},
		{pattern: "DELETE /v1/counters/{key}", h: s.handleClear, scope: ScopeAdmin, keyed: true, api: true},
		{pattern: "POST /v1/counters:get", h: s.handleGetMulti, scope: ScopeRead, api: true}, // keys checked in the handler
		{pattern: "GET /v1/counters/{key}/shards", h: s.handleShards, scope: ScopeAdmin, keyed: true, api: true, params: []string{"n"}},
		{pattern: "PUT /v1/counters/{key}/shards", h: s.handleResize, scope: ScopeAdmin, keyed: true, api: true},
		{pattern: "GET /v1/counters/{key}/ttl", h: s.handleGetTTL, scope: ScopeRead, keyed: true, api: true},
		{pattern: "PUT /v1/counters/{key}/ttl", h: s.handleSetTTL, scope: ScopeAdmin, keyed: true, api: true},
		{pattern: "DELETE /v1/counters/{key}/ttl", h: s.handleDeleteTTL, scope: ScopeAdmin, keyed: true, api: true},
		{pattern: "GET /v1/nodes", h: s.handleNodes, scope: ScopeAdmin, global: true, api: true},
		{pattern: "GET /v1/hotkeys", h: s.handleHotKeys, scope: ScopeAdmin, api: true, params: []string{"n"}}, // filtered to the token's prefixes
		{pattern: "GET /v1/stats", h: s.handleStats, scope: ScopeAdmin, global: true, api: true},
		{pattern: "GET /v1/openapi.json", h: s.handleOpenAPI},
		{pattern: "GET /metrics", h: s.handleMetrics, scope: ScopeMetrics, global: true},
		{pattern: "GET /healthz", h: s.handleHealthz},
		{pattern: "GET /readyz", h: s.handleReadyz},
		{pattern: "GET /{$}", h: s.handleDashboard},
		{pattern: "GET /favicon.ico", h: s.handleFavicon},
		{pattern: "GET /assets/{file...}", h: s.handleAsset},
	}
}

// checkQuery refuses a query parameter an API route does not take, a
// parameter given twice and a query that does not parse.
func checkQuery(r *http.Request, rt route) error {
	if !rt.api || r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("bad query string: %v", err)
	}
	for name, vs := range q {
		if !slices.Contains(rt.params, name) {
			if len(rt.params) == 0 {
				return badRequest("unknown query parameter %q (%s takes none)", name, rt.pattern)
			}
			return badRequest("unknown query parameter %q (%s takes %q)", name, rt.pattern, rt.params)
		}
		if len(vs) > 1 {
			return badRequest("query parameter %q appears more than once", name)
		}
	}
	return nil
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
	bytes  int64
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
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
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
		s.metrics.countError(classPanic)
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
	if err := s.csrf.Check(r); err != nil {
		// A browser on another site sent a request that changes state
		// (Sec-Fetch-Site or Origin say so): a cross-site request forgery,
		// refused before anything else looks at it.
		rw.routed = true
		writeJSON(rw, http.StatusForbidden, errorBody{Error: "cross-origin request refused: " + err.Error()})
		s.metrics.observeUnmatched(http.StatusForbidden)
		s.accessLog(r, rw, "unmatched", nil, 0)
		return
	}
	if msg := badPath(r.URL.EscapedPath()); msg != "" {
		// The mux would clean such a path and redirect it elsewhere.
		rw.routed = true
		writeJSON(rw, http.StatusBadRequest, errorBody{Error: msg})
		s.metrics.observeUnmatched(http.StatusBadRequest)
		s.accessLog(r, rw, "unmatched", nil, 0)
		return
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
	s.accessLog(r, rw, "unmatched", nil, 0)
}

// wrap turns a route into an http.Handler: it claims the request, checks
// the token, writes a returned error and records metrics and the access
// log.
func (s *Server) wrap(rt route) http.Handler {
	rm := s.metrics.forRoute(rt.pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw, ok := w.(*respWriter)
		if !ok {
			rw = &respWriter{ResponseWriter: w}
		}
		rw.routed = true
		start := time.Now()
		p, err := s.authorize(r, rt)
		if err == nil {
			err = checkQuery(r, rt)
		}
		if err == nil {
			if p != nil {
				r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			}
			err = rt.h(rw, r)
		}
		if err != nil {
			s.writeError(rw, r, err)
		}
		d := time.Since(start)
		rm.observe(rw.code, d)
		s.accessLog(r, rw, rt.pattern, p, d)
	})
}

// accessLog logs one request when Config.AccessLog is set.
func (s *Server) accessLog(r *http.Request, rw *respWriter, route string, p *principal, d time.Duration) {
	if !s.cfg.AccessLog {
		return
	}
	token := ""
	if p != nil {
		token = p.name
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method), slog.String("path", r.URL.EscapedPath()), slog.String("route", route),
		slog.Int("status", max(rw.code, http.StatusOK)), slog.Int64("bytes", rw.bytes),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000), slog.String("remote", r.RemoteAddr),
		slog.String("token", token))
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

// badPath explains why a path is not canonical: a "." or ".." segment
// (escaped or not) or an empty one; or returns "" when it is canonical.
// net/http's mux would clean such a path and redirect to another route, and
// in a counter path such a segment would be a key that clients and proxies
// resolve on the way.
func badPath(escaped string) string {
	if escaped == "/" {
		return ""
	}
	segs := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	counter := len(segs) > 2 && segs[0] == "v1" && segs[1] == "counters"
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			u = seg
		}
		switch {
		case counter && i == 2 && (u == "" || u == "." || u == ".."):
			if u == "" {
				return "the counter key in the path is empty"
			}
			return fmt.Sprintf("the counter key %q cannot be used in a path (read it with POST /v1/counters:get)", u)
		case u == "." || u == "..":
			return fmt.Sprintf("the path %q has a %q segment", escaped, u)
		case u == "" && i < len(segs)-1:
			return fmt.Sprintf("the path %q has an empty segment", escaped)
		}
	}
	return ""
}
