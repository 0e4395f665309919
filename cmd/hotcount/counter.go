package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// backendFlags are the flags that choose a backend for one-shot commands:
// a running server (--server), or a backend directly.
type backendFlags struct {
	server string
	token  string
	redis  string
	n      int
}

func (b *backendFlags) register(fs *flagSet) {
	fs.StringVar(&b.server, "server", "", "URL of a running `hotcount serve` (instead of --redis)")
	fs.StringVar(&b.token, "token", "", "bearer token for --server write endpoints")
	fs.StringVar(&b.redis, "redis", "", "Redis seed addresses, comma-separated (empty: the embedded store, which lives only inside this one process)")
	fs.IntVar(&b.n, "n", hotcount.DefaultN, "number of sub-counters of a counter that has no metadata yet")
}

// remote returns the server client when --server was given.
func (b *backendFlags) remote(stderr io.Writer) (r *remote, code int, ok bool) {
	if b.server == "" {
		return nil, 0, true
	}
	if b.redis != "" {
		return nil, usagef(stderr, "give --server or --redis, not both"), false
	}
	r, err := newRemote(b.server, b.token)
	if err != nil {
		return nil, usagef(stderr, "%v", err), false
	}
	return r, 0, true
}

func (b *backendFlags) open(ctx context.Context) (*hotcount.Client, error) {
	return hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: splitAddrs(b.redis)}, Defaults: hotcount.Namespace{N: b.n}, Reads: hotcount.ReadConfig{NoCache: true}})
}

// checkN rejects an N outside 1..MaxN.
func (b *backendFlags) checkN(stderr io.Writer) (int, bool) {
	if b.n < 1 || b.n > keyspace.MaxN {
		return usagef(stderr, "--n must be 1..%d, got %d", keyspace.MaxN, b.n), false
	}
	return 0, true
}

func runIncr(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("incr", stderr)
	var b backendFlags
	b.register(fs)
	key := fs.String("key", "", "counter key (required)")
	by := fs.Int64("by", 1, "delta to add (non-zero)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	if code, ok := b.checkN(stderr); !ok {
		return code
	}
	if *key == "" {
		return usagef(stderr, "incr: --key is required")
	}
	if err := validateInput(*key, *by); err != nil {
		return usagef(stderr, "incr: %v", err)
	}
	rem, code, ok := b.remote(stderr)
	if !ok {
		return code
	}
	if rem != nil {
		var out map[string]any
		if err := rem.do(ctx, "POST", counterPath(*key, "/incr"), map[string]int64{"by": *by}, &out); err != nil {
			return remoteFailure(stderr, "incr", err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, map[string]any{"key": *key, "accepted": true, "by": *by})
		}
		fmt.Fprintf(stdout, "%s += %d\n", *key, *by)
		return exitOK
	}
	c, err := b.open(ctx)
	if err != nil {
		return openFailure(stderr, err)
	}
	defer c.Close(context.Background())
	if err := c.Incr(ctx, *key, *by); err != nil {
		if errors.Is(err, hotcount.ErrOverflow) {
			return usagef(stderr, "incr: %v", err)
		}
		return failf(stderr, "incr: %v", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, map[string]any{"key": *key, "accepted": true, "by": *by})
	}
	fmt.Fprintf(stdout, "%s += %d\n", *key, *by)
	return exitOK
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("get", stderr)
	var b backendFlags
	b.register(fs)
	key := fs.String("key", "", "counter key (required)")
	asJSON := fs.Bool("json", false, `print JSON: {"key", "value", "stale_ms"}`)
	if code, done := fs.parse(args); done {
		return code
	}
	if code, ok := b.checkN(stderr); !ok {
		return code
	}
	if *key == "" {
		return usagef(stderr, "get: --key is required")
	}
	if err := validateInput(*key, 1); err != nil {
		return usagef(stderr, "get: %v", err)
	}
	rem, code, ok := b.remote(stderr)
	if !ok {
		return code
	}
	if rem != nil {
		var out struct {
			Key     string `json:"key"`
			Value   int64  `json:"value"`
			StaleMS int64  `json:"stale_ms"`
		}
		if err := rem.do(ctx, "GET", counterPath(*key, ""), nil, &out); err != nil {
			return remoteFailure(stderr, "get", err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, map[string]any{"key": out.Key, "value": out.Value, "stale_ms": out.StaleMS})
		}
		fmt.Fprintf(stdout, "%d\n", out.Value)
		return exitOK
	}
	c, err := b.open(ctx)
	if err != nil {
		return openFailure(stderr, err)
	}
	defer c.Close(context.Background())
	r, err := c.Get(ctx, *key)
	if err != nil {
		return failf(stderr, "get: %v", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, map[string]any{"key": r.Key, "value": r.Value, "stale_ms": r.Stale.Milliseconds()})
	}
	fmt.Fprintf(stdout, "%d\n", r.Value)
	return exitOK
}

// validateInput applies the library's key and delta rules before anything
// is opened, so bad input is a usage error (exit 2).
func validateInput(key string, delta int64) error {
	if err := hotcount.ValidateKey(key); err != nil {
		return err
	}
	if delta == 0 {
		return hotcount.ErrZeroDelta
	}
	return nil
}

// openFailure reports a failure to open a backend: a bad configuration is a
// usage error, anything else a runtime failure.
func openFailure(stderr io.Writer, err error) int {
	if errors.Is(err, hotcount.ErrConfig) {
		return usagef(stderr, "%v", err)
	}
	return failf(stderr, "%v", err)
}

// printJSON writes v as one line of JSON.
func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(v); err != nil {
		return failf(stderr, "writing JSON: %v", err)
	}
	return exitOK
}
