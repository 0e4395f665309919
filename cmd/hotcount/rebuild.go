package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/dirlock"
	"github.com/hotcount/hotcount/keyspace"
)

// runRebuild recreates the cache view of counters from the durable store:
// durable-mode counters from the event log (only counters the log has),
// fast-mode counters of cache nodes that lost their data from their
// checkpoints, with their label-set records (see hotcount.Client.Rebuild).
// It refuses a --data folder that holds no store and a store that does
// not belong to the cluster (exit 2). --key and --prefix limit every
// step; --dry-run reports what would change and writes nothing. Pause the
// writers of the rebuilt counters while it runs.
func runRebuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rebuild", stdout, stderr)
	redisAddrs := fs.String("redis", "", "Redis seed addresses, comma-separated (required)")
	pgURL := fs.String("postgres", "", "PostgreSQL URL of the durable store")
	schema := fs.String("schema", "", "PostgreSQL schema of the durable store (default: the search_path)")
	dataDir := fs.String("data", "", "data directory of the SQLite durable store (must hold its hotcount.db)")
	n := fs.Int("n", hotcount.DefaultN, "number of sub-counters of the counters")
	key := fs.String("key", "", "rebuild this counter only (every step, the restore of lost nodes too)")
	prefix := fs.String("prefix", "", "rebuild the counters whose key starts with this, in every step (default: all)")
	dryRun := fs.Bool("dry-run", false, "report what would change and change nothing")
	asJSON := fs.Bool("json", false, "print JSON")
	var sec redisSecurity
	sec.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	switch {
	case *redisAddrs == "":
		return usagef(stderr, "rebuild: --redis is required")
	case (*pgURL == "") == (*dataDir == ""):
		return usagef(stderr, "rebuild: give exactly one of --postgres and --data")
	case *schema != "" && *pgURL == "":
		return usagef(stderr, "rebuild: --schema needs --postgres")
	case *key != "" && *prefix != "":
		return usagef(stderr, "rebuild: give --key or --prefix, not both")
	case *n < 1 || *n > keyspace.MaxN:
		return usagef(stderr, "rebuild: --n must be 1..%d, got %d", keyspace.MaxN, *n)
	}
	if *key != "" {
		if err := hotcount.ValidateKey(*key); err != nil {
			return usagef(stderr, "rebuild: %v", err)
		}
	}
	rc, err := sec.forRedis(splitAddrs(*redisAddrs))
	if err != nil {
		return usagef(stderr, "rebuild: %v", err)
	}
	if *dataDir != "" {
		if _, err := os.Stat(filepath.Join(*dataDir, sqlite.DefaultFileName)); err != nil {
			return usagef(stderr, "rebuild: --data %s holds no durable store (%s): give the data folder of the store that serves this cluster", *dataDir, sqlite.DefaultFileName)
		}
	}
	if *pgURL != "" {
		ok, err := postgres.Exists(ctx, postgres.Config{URL: *pgURL, Schema: *schema})
		if err != nil {
			return failf(stderr, "rebuild: durable store: %v", err)
		}
		if !ok {
			return usagef(stderr, "rebuild: --postgres holds no durable store (schema %q): give the store that serves this cluster", *schema)
		}
	}
	var be durable.Backend
	if *pgURL != "" {
		be, err = postgres.Open(ctx, postgres.Config{URL: *pgURL, Schema: *schema})
	} else {
		// Shared: refused while a process serves the embedded store from
		// this folder (it would be foreign to the cluster anyway).
		lock, lerr := dirlock.Shared(*dataDir)
		if lerr != nil {
			return failf(stderr, "rebuild: %v", lerr)
		}
		defer lock.Release()
		be, err = sqlite.Open(ctx, sqlite.Config{Dir: *dataDir})
	}
	if err != nil {
		return failf(stderr, "rebuild: durable store: %v", err)
	}
	defer be.Close()
	c, err := hotcount.New(ctx, hotcount.Config{
		// the rebuild below does it and reports it
		Redis:    rc,
		Defaults: hotcount.Namespace{N: *n, Mode: hotcount.ModeDurable},
		Reads:    hotcount.ReadConfig{NoCache: true},
		// No background round: the rebuild below is the only one, so a
		// limited or dry run stays limited or dry.
		Durability: hotcount.DurabilityConfig{NoStartupRepair: true, Store: be, CheckpointInterval: 24 * time.Hour},
	})
	if err != nil {
		return openFailure(stderr, "rebuild", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	opts := hotcount.RebuildOptions{Prefix: *prefix, DryRun: *dryRun}
	if *key != "" {
		opts.Keys = []string{*key}
	}
	rep, err := c.RebuildWith(ctx, opts)
	if errors.Is(err, hotcount.ErrForeignStore) {
		return usagef(stderr, "rebuild: refused, nothing changed: %v", err)
	}
	if err != nil {
		return failf(stderr, "rebuild: %v", err)
	}
	if *asJSON {
		restores := make([]map[string]any, 0, len(rep.Restores))
		for _, r := range rep.Restores {
			restores = append(restores, map[string]any{
				"node": r.Node, "keys": r.Keys, "amount": r.Amount, "metas": r.Metas, "partial": r.Partial,
				"window_ms": r.Window.Milliseconds(), "estimated_loss": r.EstimatedLoss,
			})
		}
		return printJSON(stdout, stderr, map[string]any{
			"dry_run": rep.DryRun, "keys": rep.Keys, "corrected": rep.Corrected, "delta": rep.Delta,
			"skipped": rep.Skipped, "not_in_log": rep.NotInLog, "restores": restores,
		})
	}
	would := ""
	if rep.DryRun {
		would = "would be "
		fmt.Fprintln(stdout, "dry run: nothing was changed")
	}
	fmt.Fprintf(stdout, "durable counters: %d checked, %d %scorrected (total correction %+d)\n", rep.Keys, rep.Corrected, would, rep.Delta)
	if rep.NotInLog > 0 {
		fmt.Fprintf(stdout, "%d counters not in the log left alone\n", rep.NotInLog)
	}
	for _, r := range rep.Restores {
		fmt.Fprintf(stdout, "node %s had lost its data: %d sub-counters %srestored from checkpoints (%+d, window %v), %d label sets %srestored\n",
			r.Node, r.Keys, would, r.Amount, r.Window.Round(time.Millisecond), r.Metas, would)
		if r.Partial {
			fmt.Fprintf(stdout, "node %s: limited run, its other counters are restored by the next full rebuild or checkpoint round\n", r.Node)
		}
	}
	return exitOK
}
