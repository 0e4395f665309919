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
)

// shutdownTimeout bounds the graceful stop: in-flight requests first, then
// the Client's drain.
const shutdownTimeout = 15 * time.Second

// runServe runs the HTTP API and dashboard until ctx is cancelled (SIGINT or
// SIGTERM), then stops gracefully: it stops accepting, finishes in-flight
// requests and closes the Client, which drains what it buffered.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	fs.String(setListen, defaultListen, "host:port to serve on (port 0: any free port); env HOTCOUNT_LISTEN")
	fs.String(setRedis, "", "Redis seed addresses, comma-separated (empty: the embedded store); env HOTCOUNT_REDIS")
	fs.String(setPostgres, "", "PostgreSQL URL of the durable store (instead of --data); env HOTCOUNT_POSTGRES")
	fs.String(setData, defaultData, "folder of the SQLite durable store, created if missing; env HOTCOUNT_DATA")
	fs.String(setMode, defaultMode, "durability mode of keys no namespace names: fast or durable; env HOTCOUNT_MODE")
	fs.String(setFile, "", "YAML config file (listen, redis, postgres, data, mode, token, namespaces); env HOTCOUNT_CONFIG")
	fs.String(setToken, "", "bearer token required by write endpoints; env HOTCOUNT_TOKEN")
	if code, done := fs.parse(args); done {
		return code
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	cfg, err := loadConfig(set, os.LookupEnv)
	if err != nil {
		return usagef(stderr, "serve: %v", err)
	}
	return serve(ctx, cfg, stdout, stderr)
}

// clientConfig turns the serve configuration into the library's, with db
// as the durable store. Each namespace keeps its own flush interval.
func clientConfig(cfg serveConfig, db durable.Backend) hotcount.Config {
	hc := hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: append([]string(nil), cfg.Redis...)},
		Defaults:   hotcount.Namespace{Mode: hotcount.Mode(cfg.Mode)},
		Durability: hotcount.DurabilityConfig{Store: db},
	}
	for _, ns := range cfg.Namespaces {
		hc.Namespaces = append(hc.Namespaces, ns.namespace())
	}
	if a := cfg.AutoN; a != nil {
		hc.AutoN = hotcount.AutoNConfig{Enabled: true, Budget: a.Budget, MaxN: a.MaxN, Hysteresis: a.Hysteresis}
	}
	return hc
}

// openDurable opens the durable store: PostgreSQL when a URL is given,
// else the SQLite file in the data folder (created if missing).
func openDurable(ctx context.Context, cfg serveConfig) (durable.Backend, error) {
	if cfg.Postgres != "" {
		return postgres.Open(ctx, postgres.Config{URL: cfg.Postgres})
	}
	if err := os.MkdirAll(cfg.Data, 0o755); err != nil {
		return nil, fmt.Errorf("creating data folder: %w", err)
	}
	return sqlite.Open(ctx, sqlite.Config{Dir: cfg.Data})
}

// serve runs the server for a validated configuration.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) int {
	db, err := openDurable(ctx, cfg)
	if err != nil {
		return failf(stderr, "serve: durable store: %v", err)
	}
	c, err := hotcount.New(ctx, clientConfig(cfg, db))
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
	srv, err := server.New(server.Config{Client: c, Token: cfg.Token, Logger: logger})
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
