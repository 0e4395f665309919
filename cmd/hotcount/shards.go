package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/placement"
)

// shardsJSON is the output of `hotcount shards --json`.
type shardsJSON struct {
	Key        string            `json:"key"`
	N          int               `json:"n"`
	Epoch      uint64            `json:"epoch"`
	Shards     []placement.Shard `json:"shards"`
	Collisions int               `json:"collisions"`
	Total      int64             `json:"total"`
}

func runShards(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("shards", stderr)
	var b backendFlags
	b.register(fs)
	key := fs.String("key", "", "counter key (required)")
	asJSON := fs.Bool("json", false, `print JSON: {"key", "shards": [{"label","key","slot","node","value"}], "collisions"}`)
	rebalance := fs.Bool("rebalance", false, "first move colliding sub-counters back onto distinct primaries (with --redis)")
	if code, done := fs.parse(args); done {
		return code
	}
	if *rebalance && b.server != "" {
		return usagef(stderr, "shards: --rebalance works on a backend (--redis), not through --server")
	}
	if code, ok := b.checkN(stderr); !ok {
		return code
	}
	if *key == "" {
		return usagef(stderr, "shards: --key is required")
	}
	if err := hotcount.ValidateKey(*key); err != nil {
		return usagef(stderr, "shards: %v", err)
	}
	rem, code, ok := b.remote(stderr)
	if !ok {
		return code
	}
	var out shardsJSON
	if rem != nil {
		var rep struct {
			N          int               `json:"n"`
			Value      int64             `json:"value"`
			Shards     []placement.Shard `json:"shards"`
			Collisions int               `json:"collisions"`
		}
		if err := rem.do(ctx, "GET", counterPath(*key, "/shards"), nil, &rep); err != nil {
			return remoteFailure(stderr, "shards", err)
		}
		out = shardsJSON{Key: *key, N: rep.N, Shards: rep.Shards, Collisions: rep.Collisions, Total: rep.Value}
	} else {
		c, err := b.open(ctx)
		if err != nil {
			return openFailure(stderr, err)
		}
		defer c.Close(context.Background())
		if *rebalance {
			changed, err := c.Rebalance(ctx, *key)
			if err != nil {
				return failf(stderr, "shards: rebalance: %v", err)
			}
			if changed && !*asJSON {
				fmt.Fprintln(stdout, "rebalanced: colliding sub-counters folded onto distinct primaries")
			}
		}
		rep, err := c.Shards(ctx, *key)
		if err != nil {
			return failf(stderr, "shards: %v", err)
		}
		out = shardsJSON{
			Key: *key, N: len(rep.Meta.Write), Epoch: rep.Meta.Epoch,
			Shards: rep.Placement.Shards, Collisions: rep.Collisions, Total: rep.Total,
		}
	}
	if out.Shards == nil {
		out.Shards = []placement.Shard{}
	}
	if *asJSON {
		return printJSON(stdout, stderr, out)
	}
	fmt.Fprintf(stdout, "%s: n=%d epoch=%d total=%d collisions=%d\n", out.Key, out.N, out.Epoch, out.Total, out.Collisions)
	fmt.Fprintf(stdout, "%-6s %-6s %-22s %12s  %s\n", "label", "slot", "node", "value", "sub-key")
	for _, s := range out.Shards {
		fmt.Fprintf(stdout, "%-6s %-6d %-22s %12d  %s\n", s.Label, s.Slot, s.Node, s.Value, s.Key)
	}
	return exitOK
}

func runResize(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("resize", stderr)
	server := fs.String("server", "", "URL of a running `hotcount serve` (instead of --redis)")
	token := fs.String("token", "", "bearer token for --server")
	redis := fs.String("redis", "", "Redis seed addresses, comma-separated (empty: the embedded store of this process)")
	key := fs.String("key", "", "counter key (required)")
	n := fs.Int("n", 0, "new number of sub-counters (required, 1..1024)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	switch {
	case *key == "":
		return usagef(stderr, "resize: --key is required")
	case *n < 1 || *n > hotcount.MaxN:
		return usagef(stderr, "resize: --n must be 1..%d, got %d", hotcount.MaxN, *n)
	}
	if err := hotcount.ValidateKey(*key); err != nil {
		return usagef(stderr, "resize: %v", err)
	}
	if *server != "" {
		if *redis != "" {
			return usagef(stderr, "resize: give --server or --redis, not both")
		}
		rem, err := newRemote(*server, *token)
		if err != nil {
			return usagef(stderr, "resize: %v", err)
		}
		var rep struct {
			N      int `json:"n"`
			Shards []struct {
				Label string `json:"label"`
			} `json:"shards"`
		}
		if err := rem.do(ctx, "PUT", counterPath(*key, "/shards"), map[string]int{"n": *n}, &rep); err != nil {
			return remoteFailure(stderr, "resize", err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, map[string]any{"key": *key, "n": rep.N})
		}
		fmt.Fprintf(stdout, "%s: n=%d\n", *key, rep.N)
		return exitOK
	}
	c, err := hotcount.New(ctx, hotcount.Config{Redis: splitAddrs(*redis), NoReadCache: true})
	if err != nil {
		return openFailure(stderr, err)
	}
	defer c.Close(context.Background())
	if err := c.Resize(ctx, *key, *n); err != nil {
		return failf(stderr, "resize: %v", err)
	}
	w, _, err := c.Labels(ctx, *key)
	if err != nil {
		return failf(stderr, "resize: %v", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, map[string]any{"key": *key, "n": len(w), "labels": w})
	}
	fmt.Fprintf(stdout, "%s: n=%d labels=%v\n", *key, len(w), w)
	return exitOK
}
