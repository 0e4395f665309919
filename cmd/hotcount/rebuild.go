package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/keyspace"
)

// runRebuild recreates the cache view of counters from the durable store:
// durable-mode counters from the event log, fast-mode counters of cache
// nodes that lost their data from their checkpoints (see
// hotcount.Client.Rebuild). Pause the writers of the rebuilt counters
// while it runs.
func runRebuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rebuild", stdout, stderr)
	redisAddrs := fs.String("redis", "", "Redis seed addresses, comma-separated (required)")
	pgURL := fs.String("postgres", "", "PostgreSQL URL of the durable store")
	schema := fs.String("schema", "", "PostgreSQL schema of the durable store (default: the search_path)")
	dataDir := fs.String("data", "", "data directory of the SQLite durable store")
	n := fs.Int("n", hotcount.DefaultN, "number of sub-counters of the counters")
	key := fs.String("key", "", "rebuild this counter only")
	prefix := fs.String("prefix", "", "rebuild the counters whose key starts with this (default: all)")
	asJSON := fs.Bool("json", false, "print JSON")
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
	var be durable.Backend
	var err error
	if *pgURL != "" {
		be, err = postgres.Open(ctx, postgres.Config{URL: *pgURL, Schema: *schema})
	} else {
		be, err = sqlite.Open(ctx, sqlite.Config{Dir: *dataDir})
	}
	if err != nil {
		return failf(stderr, "rebuild: durable store: %v", err)
	}
	defer be.Close()
	c, err := hotcount.New(ctx, hotcount.Config{
		// the rebuild below does it and reports it
		Redis:      hotcount.RedisConfig{Addrs: splitAddrs(*redisAddrs)},
		Defaults:   hotcount.Namespace{N: *n, Mode: hotcount.ModeDurable},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{NoStartupRepair: true, Store: be},
	})
	if err != nil {
		return openFailure(stderr, "rebuild", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	var rep hotcount.RebuildReport
	if *key != "" {
		rep, err = c.RebuildKeys(ctx, *key)
	} else {
		rep, err = c.Rebuild(ctx, *prefix)
	}
	if err != nil {
		return failf(stderr, "rebuild: %v", err)
	}
	if *asJSON {
		restores := make([]map[string]any, 0, len(rep.Restores))
		for _, r := range rep.Restores {
			restores = append(restores, map[string]any{
				"node": r.Node, "keys": r.Keys, "amount": r.Amount,
				"window_ms": r.Window.Milliseconds(), "estimated_loss": r.EstimatedLoss,
			})
		}
		return printJSON(stdout, stderr, map[string]any{
			"keys": rep.Keys, "corrected": rep.Corrected, "delta": rep.Delta,
			"skipped": rep.Skipped, "restores": restores,
		})
	}
	fmt.Fprintf(stdout, "durable counters: %d checked, %d corrected (total correction %+d)\n", rep.Keys, rep.Corrected, rep.Delta)
	for _, r := range rep.Restores {
		fmt.Fprintf(stdout, "node %s had lost its data: %d sub-counters restored from checkpoints (+%d, window %v)\n",
			r.Node, r.Keys, r.Amount, r.Window.Round(time.Millisecond))
	}
	return exitOK
}
