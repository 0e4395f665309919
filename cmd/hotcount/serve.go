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
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/server"
	"github.com/hotcount/hotcount/server/config"
)

// shutdownTimeout bounds the graceful stop: in-flight requests first, then
// the Client's drain.
const shutdownTimeout = 15 * time.Second

// runServe runs the HTTP API and dashboard until ctx is cancelled (SIGINT or
// SIGTERM), then stops gracefully: it stops accepting, finishes in-flight
// requests and closes the Client, which drains what it buffered.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	fs.String(config.Listen, config.DefaultListen, "host:port to serve on (port 0: any free port); env HOTCOUNT_LISTEN")
	fs.String(config.Redis, "", "Redis seed addresses, comma-separated (empty: the embedded store); env HOTCOUNT_REDIS")
	fs.String(config.Postgres, "", "PostgreSQL URL of the durable store (instead of --data); env HOTCOUNT_POSTGRES")
	fs.String(config.Data, config.DefaultData, "folder of the SQLite durable store, created if missing; env HOTCOUNT_DATA")
	fs.String(config.Mode, config.DefaultMode, "durability mode of keys no namespace names: fast or durable; env HOTCOUNT_MODE")
	fs.String(config.File, "", "YAML config file (listen, redis, postgres, data, mode, token, namespaces); env HOTCOUNT_CONFIG")
	fs.String(config.Token, "", "bearer token required by write endpoints; env HOTCOUNT_TOKEN")
	if code, done := fs.parse(args); done {
		return code
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	cfg, err := config.Load(set, os.LookupEnv)
	if err != nil {
		return usagef(stderr, "serve: %v", err)
	}
	return serve(ctx, cfg, stdout, stderr)
}

// clientConfig turns the serve configuration into the library's, with db
// as the durable store.
func clientConfig(cfg config.Config, db durable.Backend, stderr io.Writer) hotcount.Config {
	hc := hotcount.Config{Redis: append([]string(nil), cfg.Redis...), Mode: hotcount.Mode(cfg.Mode), Durable: db}
	for _, ns := range cfg.Namespaces {
		hc.Namespaces = append(hc.Namespaces, hotcount.Namespace{
			Prefix: ns.Prefix, N: ns.N, Mode: hotcount.Mode(ns.Mode), Buffered: ns.Buffered != nil && *ns.Buffered,
			ReadCacheTTL: ns.ReadCacheTTL,
		})
		// One buffer serves every namespace: it flushes at the shortest
		// flush_interval asked for, which only ever shortens a loss window.
		if ns.FlushInterval != 0 && (hc.FlushInterval == 0 || ns.FlushInterval < hc.FlushInterval) {
			hc.FlushInterval = ns.FlushInterval
		}
	}
	if a := cfg.AutoN; a != nil {
		hc.AutoN, hc.AutoNBudget, hc.AutoNMaxN, hc.AutoNHysteresis = true, a.Budget, a.MaxN, a.Hysteresis
	}
	return hc
}

// openDurable opens the durable store: PostgreSQL when a URL is given,
// else the SQLite file in the data folder (created if missing).
func openDurable(ctx context.Context, cfg config.Config) (durable.Backend, error) {
	if cfg.Postgres != "" {
		return postgres.Open(ctx, postgres.Config{URL: cfg.Postgres})
	}
	if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
		return nil, fmt.Errorf("creating data folder: %w", err)
	}
	return sqlite.Open(ctx, sqlite.Config{Dir: cfg.Data})
}

// serve runs the server for a validated configuration.
func serve(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) int {
	db, err := openDurable(ctx, cfg)
	if err != nil {
		return failf(stderr, "serve: durable store: %v", err)
	}
	c, err := hotcount.New(ctx, clientConfig(cfg, db, stderr))
	if err != nil {
		db.Close()
		return openFailure(stderr, err)
	}
	// closeClient drains the Client (buffered deltas, pending durable
	// commits, final checkpoint), then closes the durable store under it.
	closeClient := func() error {
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return errors.Join(c.Close(cctx), db.Close())
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := server.New(server.Config{Backend: server.NewClientBackend(c, nil), Token: cfg.Token, Logger: logger})
	if err != nil {
		closeClient()
		return failf(stderr, "serve: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		closeClient()
		return failf(stderr, "serve: %v", err)
	}
	if !cfg.Loopback() && cfg.Token == "" {
		fmt.Fprintf(stderr, "hotcount: warning: serving on %s beyond loopback without --token: anyone who can reach it can write\n", cfg.Listen)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(stderr, "hotcount: http: ", 0),
	}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
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
	closeErr := closeClient()
	switch {
	case serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed):
		return failf(stderr, "serve: %v", serveErr)
	case shutErr != nil:
		return failf(stderr, "serve: graceful shutdown: %v", shutErr)
	case closeErr != nil:
		return failf(stderr, "serve: closing the client: %v", closeErr)
	}
	fmt.Fprintln(stderr, "hotcount: stopped cleanly")
	return exitOK
}
