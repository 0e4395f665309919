package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/dirlock"
	"github.com/hotcount/hotcount/proxy"
	"github.com/hotcount/hotcount/server"
)

// runProxy serves the Redis protocol: counter keys (those a namespace of
// the config file matches) through the Client, every other key passed to
// the cluster. It runs until ctx is cancelled (SIGINT or SIGTERM), then
// stops accepting, finishes what clients sent and closes the Client,
// which flushes every buffered delta.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("proxy", stdout, stderr)
	registerFlags(fs, cmdProxy)
	if err := checkFlagArgs(fs, cmdProxy, args); err != nil {
		return fs.usagef("%v", err)
	}
	if code, done := fs.parse(args); done {
		return code
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[settingOfFlag(f.Name).name] = f.Value.String() })
	for _, w := range envTypos(os.Environ()) {
		fmt.Fprintln(stderr, "hotcount: warning:", w)
	}
	cfg, err := loadConfigFor(cmdProxy, set, os.LookupEnv)
	if err != nil {
		return usagef(stderr, "proxy: %v", err)
	}
	if len(cfg.Redis) == 0 {
		return usagef(stderr, "proxy: --redis is required (the seeds of the Redis Cluster to front)")
	}
	if err := checkProxyStore(cfg); err != nil {
		return usagef(stderr, "proxy: %v", err)
	}
	if len(cfg.Namespaces) == 0 {
		fmt.Fprintln(stderr, "hotcount: warning: no namespaces in the config file: no key is a counter, every command passes through")
	}
	return serveProxy(ctx, cfg, stdout, stderr)
}

// proxyClientConfig is the Client configuration of the proxy (serve's)
// and the reply mode of each namespace. A namespace that replies exact
// keeps its read cache for other reads; the proxy reads it with GetFresh.
func proxyClientConfig(cfg serveConfig, db durable.Backend) (hotcount.Config, map[string]proxy.Reply) {
	hc := clientConfig(cfg, db)
	// Many clients' counter commands share each node's connection: gather
	// them into fewer writes (see proxy.CounterFlushDelay).
	hc.Redis.FlushDelay = proxy.CounterFlushDelay
	hc.Redis.IncrBatchWindow = proxy.CounterBatchWindow
	replies := map[string]proxy.Reply{}
	for _, ns := range cfg.Namespaces {
		replies[ns.Prefix] = proxy.Reply(ns.Reply)
	}
	return hc, replies
}

// proxyHasStore reports whether the proxy opens a durable store: only
// when one is named, a PostgreSQL URL or a data folder given explicitly
// (proxies beside many app hosts share PostgreSQL, not a file each).
func proxyHasStore(cfg serveConfig) bool {
	return cfg.Postgres != "" || cfg.Sources[setData] != "default"
}

// checkProxyStore refuses a configuration that puts counters in durable
// mode (the default mode or a namespace's) when the proxy opens no
// durable store, naming the settings that give it one.
func checkProxyStore(cfg serveConfig) error {
	if proxyHasStore(cfg) {
		return nil
	}
	what := ""
	if cfg.Mode == string(hotcount.ModeDurable) {
		what = fmt.Sprintf("%s (from %s) is %s", setMode, cfg.Sources[setMode], cfg.Mode)
	} else {
		for i, ns := range cfg.Namespaces {
			if ns.Mode == string(hotcount.ModeDurable) {
				what = fmt.Sprintf("namespaces[%d] (prefix %q, from %s) has mode %s", i, ns.Prefix, cfg.Sources["namespaces"], ns.Mode)
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	data, pg := settingByName(setData), settingByName(setPostgres)
	return fmt.Errorf("%w: %s, which needs a durable store: give --%s DIR or --%s URL (%s or %s in the config file, %s or %s)",
		errInvalidConfig, what, data.flag(), pg.flag(), data.name, pg.name, data.env(), pg.env())
}

// openProxyDurable opens a durable store only when one is named (see
// proxyHasStore).
func openProxyDurable(ctx context.Context, cfg serveConfig) (durable.Backend, func() error, error) {
	if !proxyHasStore(cfg) {
		return nil, func() error { return nil }, nil
	}
	return openDurable(ctx, cfg)
}

// serveProxy runs the proxy for a validated configuration.
func serveProxy(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) int {
	setProcs(cfg)
	setMemoryLimit(cfg)
	db, closeDB, err := openProxyDurable(ctx, cfg)
	if errors.Is(err, dirlock.ErrLocked) {
		return failf(stderr, "proxy: %v", err)
	}
	if err != nil {
		return failf(stderr, "proxy: durable store: %v", err)
	}
	hcfg, replies := proxyClientConfig(cfg, db)
	hc, err := hotcount.New(ctx, hcfg)
	if err != nil {
		closeDB()
		return openFailure(stderr, "proxy", err)
	}
	closeClient := func() error {
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return errors.Join(hc.Close(cctx), closeDB())
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := proxy.New(ctx, proxy.Config{
		Counters:         hc,
		Redis:            hcfg.Redis,
		Password:         cfg.RESPPassword,
		MaxBulkLen:       int64(cfg.RESPMaxBulkLen),
		QueryBufferLimit: cfg.RESPQueryBufferLimit,
		MemoryBudget:     int64(cfg.RESPMemoryBudget),
		AllowFlush:       cfg.RESPAllowFlush,
		AllowConfig:      cfg.RESPAllowConfig,
		Announce:         cfg.RESPAnnounce,
		Peers:            cfg.RESPPeers,
		Replies:          replies,
		Durable:          db != nil,
		Logger:           logger,
	})
	if err != nil {
		closeClient()
		return failf(stderr, "proxy: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.RESPListen)
	if err != nil {
		srv.Close()
		closeClient()
		return failf(stderr, "proxy: %v", err)
	}
	if !loopback(cfg.RESPListen) && cfg.RESPPassword == "" {
		fmt.Fprintf(stderr, "hotcount: warning: serving Redis clients on %s beyond loopback without --resp-password\n", cfg.RESPListen)
	}
	var admin *http.Server
	adminDone := make(chan error, 1)
	if cfg.AdminListen != "off" {
		h, err := proxyAdmin(srv, hc, cfg, logger)
		var aln net.Listener
		if err == nil {
			aln, err = net.Listen("tcp", cfg.AdminListen)
		}
		if err != nil {
			ln.Close()
			srv.Close()
			closeClient()
			return failf(stderr, "proxy: admin port: %v", err)
		}
		admin = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(stderr, "hotcount: admin: ", 0)}
		fmt.Fprintf(stdout, "admin on http://%s\n", aln.Addr())
		go func() { adminDone <- admin.Serve(aln) }()
	}
	fmt.Fprintf(stdout, "listening on redis://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	shutErr := srv.Shutdown(sctx)
	if admin != nil {
		_ = admin.Shutdown(sctx)
	}
	cancel()
	closeErr := closeClient()
	switch {
	case serveErr != nil && !errors.Is(serveErr, proxy.ErrClosed):
		return failf(stderr, "proxy: %v", serveErr)
	case shutErr != nil:
		return failf(stderr, "proxy: graceful shutdown: %v", shutErr)
	case closeErr != nil:
		return failf(stderr, "proxy: closing the client (buffered deltas): %v", closeErr)
	}
	fmt.Fprintln(stderr, "hotcount: stopped cleanly")
	return exitOK
}

// setProcs applies resp_procs: GOMAXPROCS, unless resp_procs was left
// at its default and the GOMAXPROCS variable says otherwise. 0 keeps Go's
// own default (the CPUs the process may use).
func setProcs(cfg serveConfig) {
	if os.Getenv("GOMAXPROCS") != "" && cfg.Sources[setRESPProcs] == "default" {
		return
	}
	if n := *cfg.RESPProcs; n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// memoryLimitOver is what the proxy's soft memory limit allows beyond
// resp_memory_budget: the connections' first buffers, replies in flight,
// the Client's state.
const memoryLimitOver = 256 << 20

// setMemoryLimit gives the Go runtime a soft memory limit of
// resp_memory_budget plus memoryLimitOver (unless GOMEMLIMIT is set), so
// that input buffers the budget has let go are collected before the heap
// doubles: the budget bounds what connections hold, the limit how long
// what they held stays in memory.
func setMemoryLimit(cfg serveConfig) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	budget := int64(cfg.RESPMemoryBudget)
	if budget == 0 {
		budget = proxy.DefaultMemoryBudget
	}
	debug.SetMemoryLimit(budget + memoryLimitOver)
}

// loopback reports whether a host:port binds to loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// proxyDashboardRoutes are the routes of serve's handler that the proxy's
// admin port serves: the dashboard and the read-only API it draws from.
// Nothing that writes (increments, clears, resizes, deadlines) is served
// there; counter writes go through the Redis protocol. GET /assets is
// serve's too: its redirect to /assets/, with a JSON body (this mux's own
// redirect would answer in HTML).
var proxyDashboardRoutes = []string{
	"GET /{$}", "GET /favicon.ico", "GET /assets", "GET /assets/",
	"GET /v1/nodes", "GET /v1/hotkeys", "GET /v1/stats",
	"GET /v1/counters/{key}", "POST /v1/counters:get", "GET /v1/counters/{key}/shards",
}

// proxyAdmin is the handler of the proxy's admin port: the proxy's
// /metrics, /healthz and /readyz, and serve's dashboard with the read-only
// routes it uses (hot keys, writes per node, loss window) over the
// proxy's Client. The tokens of cfg (token, token_file, tokens) guard it
// as they guard serve: /metrics needs the metrics or admin scope (or
// metrics_public), the dashboard's routes their own scopes; /healthz and
// /readyz stay open.
func proxyAdmin(srv *proxy.Server, hc *hotcount.Client, cfg serveConfig, logger *slog.Logger) (http.Handler, error) {
	own, err := srv.AdminHandler()
	if err != nil {
		return nil, err
	}
	dash, err := server.New(server.Config{Client: hc, Logger: logger, Token: cfg.Token, Tokens: cfg.tokens, MetricsPublic: cfg.MetricsPublic})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", own)
	mux.Handle("GET /readyz", own)
	mux.Handle("GET /metrics", dash.Protect(server.ScopeMetrics, own))
	for _, p := range proxyDashboardRoutes {
		mux.Handle(p, dash)
	}
	// A path no route serves, or a method its routes do not take (the
	// routes that write among them), is answered in JSON as serve answers.
	h := proxy.JSONErrors(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if unclean(r.URL.Path) {
			// The mux would redirect such a path to its cleaned form,
			// which may name another counter (/v1/counters/a/../b);
			// serve refuses it with 400 before routing anything.
			dash.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// unclean reports whether an http.ServeMux would redirect a request for
// p elsewhere: p has an empty, "." or ".." segment.
func unclean(p string) bool {
	if p == "" || p[0] != '/' {
		return true
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np != p
}
