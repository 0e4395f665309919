package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
)

func runShards(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("shards", stdout, stderr)
	var b backendFlags
	b.register(fs, "for a counter that does not exist yet: show the placement this many sub-counters (1..1024) would get")
	key := fs.String("key", "", "counter key (required)")
	asJSON := fs.Bool("json", false, `print the report as JSON, with the HTTP API's field names: {"key","n","read_n","epoch","value","distinct_nodes","collisions","shards":[{"label","key","slot","node","value"}],"folds","pinned","exists"}`)
	rebalance := fs.Bool("rebalance", false, "first move colliding sub-counters back onto distinct primaries (with --redis)")
	if code, done := fs.parse(args); done {
		return code
	}
	if code, ok := b.checkN(); !ok {
		return code
	}
	if *key == "" {
		return fs.usagef("--key is required")
	}
	if err := hotcount.ValidateKey(*key); err != nil {
		return fs.usagef("%v", err)
	}
	rem, rc, code, ok := b.connect()
	if !ok {
		return code
	}
	if *rebalance && rem != nil {
		return fs.usagef("--rebalance works on a backend (--redis), not through --server")
	}
	var out hotcount.ShardReport
	if rem != nil {
		path := counterPath(*key, "/shards")
		if b.n > 0 {
			path += "?n=" + strconv.Itoa(b.n)
		}
		if err := rem.do(ctx, "GET", path, nil, &out); err != nil {
			return remoteFailure(stderr, "shards", err)
		}
	} else {
		c, err := b.open(ctx, rc)
		if err != nil {
			return openFailure(stderr, "shards", err)
		}
		defer c.Close(context.Background())
		if *rebalance {
			changed, err := c.Rebalance(ctx, *key)
			if err != nil {
				return fs.failf("rebalance: %v", err)
			}
			if changed && !*asJSON {
				fmt.Fprintln(stdout, "rebalanced: colliding sub-counters folded onto distinct primaries")
			}
		}
		if out, err = c.ShardsN(ctx, *key, b.n); err != nil {
			return fs.failf("%v", err)
		}
	}
	if out.Shards == nil {
		out.Shards = []placement.Shard{}
	}
	if *asJSON {
		return printJSON(stdout, stderr, out)
	}
	fmt.Fprintf(stdout, "%s: n=%d read_n=%d epoch=%d value=%d distinct_nodes=%d collisions=%d pinned=%t\n",
		out.Key, out.N, out.ReadN, out.Epoch, out.Value, out.DistinctNodes, out.Collisions, out.Pinned)
	if !out.Exists {
		fmt.Fprintf(stdout, "%s does not exist yet: the placement it would get with n=%d\n", out.Key, out.N)
	} else if b.n > 0 && b.n != out.N {
		fmt.Fprintf(stdout, "%s exists with n=%d: --n applies to a counter that does not exist yet (resize changes it)\n", out.Key, out.N)
	}
	fmt.Fprintf(stdout, "%-6s %-6s %-22s %12s  %s\n", "label", "slot", "node", "value", "sub-key")
	for _, s := range out.Shards {
		fmt.Fprintf(stdout, "%-6s %-6d %-22s %12d  %s\n", s.Label, s.Slot, s.Node, s.Value, s.Key)
	}
	if out.Collisions > 0 {
		fmt.Fprintf(stdout, "%d sub-counters share a primary with another: move them back onto distinct primaries with\n  hotcount shards --redis SEEDS --key %s --rebalance\n",
			out.Collisions, shellQuote(*key))
	}
	return exitOK
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_-./@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func runResize(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("resize", stdout, stderr)
	var b backendFlags
	b.register(fs, "")
	key := fs.String("key", "", "counter key (required)")
	n := fs.Int("n", 0, fmt.Sprintf("new number of sub-counters (1..%d), pinned: automatic N and cooling leave the counter alone until --auto", keyspace.MaxN))
	auto := fs.Bool("auto", false, "unpin instead: automatic N and cooling size the counter again")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	nGiven := false
	fs.Visit(func(f *flag.Flag) { nGiven = nGiven || f.Name == "n" })
	switch {
	case *key == "":
		return fs.usagef("--key is required")
	case !*auto && !nGiven:
		return fs.usagef("give --n N (1..%d) or --auto", keyspace.MaxN)
	case *auto && *n != 0:
		return fs.usagef("give --n or --auto, not both")
	case !*auto && (*n < 1 || *n > keyspace.MaxN):
		return fs.usagef("--n must be 1..%d, got %d", keyspace.MaxN, *n)
	}
	if err := hotcount.ValidateKey(*key); err != nil {
		return fs.usagef("%v", err)
	}
	rem, rc, code, ok := b.connect()
	if !ok {
		return code
	}
	if rem != nil {
		var rep hotcount.ShardReport
		var body any = map[string]int{"n": *n}
		if *auto {
			body = map[string]bool{"auto": true}
		}
		if err := rem.do(ctx, "PUT", counterPath(*key, "/shards"), body, &rep); err != nil {
			return remoteFailure(stderr, "resize", err)
		}
		return printResized(stdout, stderr, rep, *asJSON)
	}
	c, err := hotcount.New(ctx, hotcount.Config{Redis: rc, Reads: hotcount.ReadConfig{NoCache: true}})
	if err != nil {
		return openFailure(stderr, "resize", err)
	}
	defer c.Close(context.Background())
	if *auto {
		err = c.Unpin(ctx, *key)
	} else {
		err = c.Resize(ctx, *key, *n)
	}
	if err != nil {
		return fs.failf("%v", err)
	}
	rep, err := c.Shards(ctx, *key)
	if err != nil {
		return fs.failf("%v", err)
	}
	return printResized(stdout, stderr, rep, *asJSON)
}

// printResized prints the report after a resize: as JSON (the shard
// report), or one line.
func printResized(stdout, stderr io.Writer, rep hotcount.ShardReport, asJSON bool) int {
	if asJSON {
		return printJSON(stdout, stderr, rep)
	}
	labels := make([]string, len(rep.Shards))
	for i, s := range rep.Shards {
		labels[i] = s.Label
	}
	fmt.Fprintf(stdout, "%s: n=%d read_n=%d labels=%v pinned=%t\n", rep.Key, rep.N, rep.ReadN, labels, rep.Pinned)
	return exitOK
}
