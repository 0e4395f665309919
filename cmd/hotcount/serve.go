package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/dirlock"
	"github.com/hotcount/hotcount/server"
	"github.com/hotcount/hotcount/store/mem"
)

// shutdownTimeout bounds the graceful stop: in-flight requests first, then
// the Client's drain.
const shutdownTimeout = 15 * time.Second

// runServe runs the HTTP API and dashboard until ctx is cancelled (SIGINT or
// SIGTERM), then stops gracefully: it stops accepting, finishes in-flight
// requests and closes the Client, which drains what it buffered.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stdout, stderr)
	registerFlags(fs, cmdServe)
	if err := checkFlagArgs(fs, cmdServe, args); err != nil {
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
	cfg, err := loadConfig(set, os.LookupEnv)
	if err != nil {
		return fs.usagef("%v", err)
	}
	return serve(ctx, cfg, stdout, stderr)
}

// clientConfig turns the serve configuration into the library's, with db
// as the durable store. Each namespace keeps its own flush interval.
func clientConfig(cfg serveConfig, db durable.Backend) hotcount.Config {
	hc := hotcount.Config{
		Redis:      cfg.redisConn,
		Defaults:   hotcount.Namespace{Mode: hotcount.Mode(cfg.Mode)},
		Durability: hotcount.DurabilityConfig{Store: db},
	}
	for _, ns := range cfg.Namespaces {
		hc.Namespaces = append(hc.Namespaces, ns.namespace())
	}
	hc.Peers = append([]hotcount.PeerConfig(nil), cfg.peerConns...)
	if hc.Redis.Addrs == nil && len(cfg.Redis) > 0 {
		hc.Redis.Addrs = append([]string(nil), cfg.Redis...)
	}
	applyLibrary(&cfg, &hc)
	if len(hc.Redis.Addrs) == 0 && hc.Store == nil && cfg.Data != "" {
		// The embedded store keeps what it acknowledged in the data
		// folder, which serve holds alone (see openDurable).
		hc.Embedded.AOF = filepath.Join(cfg.Data, embeddedAOF)
	}
	if a := cfg.AutoN; cfg.autoNOn() {
		hc.AutoN = hotcount.AutoNConfig{Enabled: true, Budget: a.Budget, MaxN: a.MaxN, Hysteresis: a.Hysteresis}
	}
	return hc
}

// embeddedAOF is the embedded store's append-only file in the data folder.
const embeddedAOF = "cache.aof"

// openDurable opens the durable store: PostgreSQL when a URL is given,
// else the SQLite file in the data folder (created if missing). A data
// folder is locked first (see internal/dirlock): exclusively when this
// process holds the embedded cache (no Redis), which lives in one process
// only; shared when the store stands behind a Redis Cluster, where many
// processes may share it (sqlite.OpenFolder, which bench longtail uses
// too). release closes the store and drops the lock.
func openDurable(ctx context.Context, cfg serveConfig) (db durable.Backend, release func() error, err error) {
	exclusive := len(cfg.Redis) == 0 // the embedded store's file lives there too
	if cfg.Postgres != "" {
		take := dirlock.Shared
		if exclusive {
			take = dirlock.Exclusive
		}
		if len(cfg.Redis) > 0 || cfg.Data == "" {
			db, err = postgres.Open(ctx, postgres.Config{URL: cfg.Postgres})
			if err != nil {
				return nil, nil, err
			}
			return db, db.Close, nil
		}
		lock, err := take(cfg.Data)
		if err != nil {
			return nil, nil, err
		}
		db, err = postgres.Open(ctx, postgres.Config{URL: cfg.Postgres})
		if err != nil {
			lock.Release()
			return nil, nil, err
		}
		return db, func() error { return errors.Join(db.Close(), lock.Release()) }, nil
	}
	sdb, err := sqlite.OpenFolder(ctx, cfg.Data, exclusive)
	if err != nil {
		return nil, nil, err
	}
	return sdb, sdb.Close, nil
}

// embeddedNodesChanged says that the embedded store's file in the data
// folder was written with another embedded_nodes than cfg's, and what to
// start with.
func embeddedNodesChanged(cfg serveConfig, ne *mem.NodesError) string {
	s := settingByName(setEmbeddedNodes)
	where := ""
	if src := cfg.Sources[s.name]; src != "" && src != "default" {
		where = " (from " + src + ")"
	}
	return fmt.Sprintf("%s%s is %d, but the data folder %s was written with %d nodes: start with --%s %d (%s %d) or another data folder",
		s.name, where, ne.Nodes, cfg.Data, ne.Written, s.flag(), ne.Written, s.env(), ne.Written)
}

// logger returns the log of serve on stderr, in the configured format.
func logger(cfg serveConfig, stderr io.Writer) *slog.Logger {
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return slog.New(slog.NewTextHandler(stderr, nil))
}

// serve runs the server for a validated configuration.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) int {
	log := logger(cfg, stderr)
	db, closeDB, err := openDurable(ctx, cfg)
	if errors.Is(err, dirlock.ErrLocked) {
		return failf(stderr, "serve: %v", err)
	}
	if err != nil {
		return failf(stderr, "serve: durable store: %v", err)
	}
	timings := server.NewTimings()
	c, err := hotcount.New(ctx, withTimings(clientConfig(cfg, db), timings))
	if err != nil {
		closeDB()
		if ne := (*mem.NodesError)(nil); errors.As(err, &ne) {
			return usagef(stderr, "serve: %s", embeddedNodesChanged(cfg, ne))
		}
		return openFailure(stderr, "serve", err)
	}
	// closeClient drains the Client (buffered deltas, pending durable
	// commits, final checkpoint), then closes the durable store under it,
	// and says what it drained.
	closeClient := func() (drained string, err error) {
		before := c.Stats()
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		err = errors.Join(c.Close(cctx), closeDB())
		return drainReport(before, c.Stats()), err
	}
	budget := 0.0
	if cfg.autoNOn() {
		budget = cfg.AutoN.Budget
	}
	srv, err := server.New(server.Config{
		Client: c, Token: cfg.Token, Tokens: cfg.tokens, MetricsPublic: cfg.MetricsPublic, NoDashboard: !*cfg.Dashboard,
		NodeBudget: budget, Logger: log, AccessLog: cfg.AccessLog, Timings: timings,
	})
	if err != nil {
		closeClient()
		return failf(stderr, "serve: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		closeClient()
		return failf(stderr, "serve: %v", err)
	}
	scheme := "http"
	if cfg.listenTLS != nil {
		ln, scheme = tls.NewListener(ln, cfg.listenTLS), "https"
	}
	switch {
	case !cfg.Loopback() && !cfg.hasTokens():
		log.Warn("serving beyond loopback without a token: anyone who can reach it can read, write and clear", "listen", cfg.Listen)
	case !cfg.Loopback() && cfg.listenTLS == nil:
		log.Warn("serving beyond loopback without TLS: bearer tokens cross the network in clear text (set tls_cert and tls_key)", "listen", cfg.Listen)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "listening on %s://%s\n", scheme, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	shutErr := hs.Shutdown(sctx)
	cancel()
	drained, closeErr := closeClient()
	switch {
	case serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed):
		return failf(stderr, "serve: %v", serveErr)
	case shutErr != nil:
		return failf(stderr, "serve: graceful shutdown: %v", shutErr)
	case closeErr != nil:
		return failf(stderr, "serve: closing the client: %v (%s)", closeErr, drained)
	}
	fmt.Fprintf(stderr, "hotcount: stopped cleanly: %s\n", drained)
	return exitOK
}

// drainReport says what closing the Client drained, from its stats before
// and after.
func drainReport(before, after hotcount.Stats) string {
	b, a := before.Buffer, after.Buffer
	parts := []string{fmt.Sprintf("drained %d buffered increments of %d keys in %d cache writes",
		b.UnflushedAbs, b.PendingKeys, a.OpsApplied-b.OpsApplied)}
	if left := a.UnflushedAbs; left > 0 {
		parts = append(parts, fmt.Sprintf("%d increments of %d keys NOT drained", left, a.PendingKeys))
	}
	bd, ad := before.Durability, after.Durability
	if n := ad.Events - bd.Events; n > 0 {
		parts = append(parts, fmt.Sprintf("committed %d durable increments", n))
	}
	if ad.Checkpoints > bd.Checkpoints {
		parts = append(parts, fmt.Sprintf("last checkpoint saved %d sub-counters", ad.Saved-bd.Saved))
	} else if ad.CheckpointErrors > bd.CheckpointErrors {
		parts = append(parts, "the last checkpoint failed")
	} else {
		parts = append(parts, "no checkpoint needed")
	}
	return strings.Join(parts, "; ")
}

// withTimings feeds the Client's background timings to t.
func withTimings(hc hotcount.Config, t *server.Timings) hotcount.Config {
	hc.Observe = t.Observe
	return hc
}
