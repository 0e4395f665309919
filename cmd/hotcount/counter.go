package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// backendFlags are the flags that choose a backend for one-shot commands:
// a running server (--server, the default), or a Redis Cluster directly
// (--redis). There is no in-process store here: a count written into one
// would vanish when the command exits.
type backendFlags struct {
	fs        *flagSet
	server    string
	token     string
	tokenFile string
	redis     string
	sec       redisSecurity
	n         int
}

// DefaultServer is the server the one-shot commands talk to when neither
// --server, --redis, $HOTCOUNT_SERVER nor $HOTCOUNT_REDIS is given: the
// default listen address of `hotcount serve`.
const DefaultServer = "http://127.0.0.1:7070"

// The environment of the client commands.
const (
	envServer      = "HOTCOUNT_SERVER"       // --server
	envClientToken = "HOTCOUNT_CLIENT_TOKEN" // --token
	envRedis       = "HOTCOUNT_REDIS"        // --redis
	envRedisPass   = "HOTCOUNT_REDIS_PASSWORD"
)

// register adds the backend flags to fs, and --n with usage withN unless
// it is empty.
func (b *backendFlags) register(fs *flagSet, withN string) {
	b.fs = fs
	fs.StringVar(&b.server, "server", "", "`URL` of a running hotcount serve; default $"+envServer+", else "+DefaultServer+" (unless --redis or $"+envRedis+" is given)")
	fs.StringVar(&b.token, "token", "", "bearer token for --server; default $"+envClientToken+" (a flag shows in ps)")
	fs.StringVar(&b.tokenFile, "token-file", "", "file holding the bearer token for --server")
	fs.StringVar(&b.redis, "redis", "", "Redis seed addresses, comma-separated, to work on a cluster directly; default $"+envRedis)
	b.sec.register(fs)
	if withN != "" {
		fs.IntVar(&b.n, "n", 0, withN)
	}
}

// choose settles between a server and a cluster: a flag beats the
// environment; with neither, $HOTCOUNT_REDIS, then $HOTCOUNT_SERVER, then
// DefaultServer. Both flags, or both variables, are a usage error.
func (b *backendFlags) choose() (code int, ok bool) {
	var serverFlag, redisFlag bool
	b.fs.Visit(func(f *flag.Flag) {
		serverFlag = serverFlag || f.Name == "server"
		redisFlag = redisFlag || f.Name == "redis"
	})
	envS, envR := os.Getenv(envServer), os.Getenv(envRedis)
	switch {
	case serverFlag && redisFlag:
		return b.fs.usagef("give --server or --redis, not both"), false
	case serverFlag:
		b.redis = ""
	case redisFlag:
		b.server = ""
	case envS != "" && envR != "":
		return b.fs.usagef("$%s and $%s are both set: give --server or --redis", envServer, envRedis), false
	case envR != "":
		b.redis = envR
	case envS != "":
		b.server = envS
	default:
		b.server = DefaultServer
	}
	// A backend named but empty (--redis "", --server "", a variable of
	// blanks) is refused: read as no backend, it would open an in-process
	// store that forgets the count when the command exits.
	switch {
	case serverFlag && strings.TrimSpace(b.server) == "":
		return b.fs.usagef("--server needs a URL"), false
	case (redisFlag || b.server == "") && len(splitAddrs(b.redis)) == 0:
		if redisFlag {
			return b.fs.usagef("--redis needs at least one host:port"), false
		}
		return b.fs.usagef("$%s holds no host:port", envRedis), false
	}
	if b.server != "" && b.sec.set() {
		return b.fs.usagef("the --redis-* login and TLS flags need --redis"), false
	}
	if b.redis != "" && (b.token != "" || b.tokenFile != "") {
		// Not silently dropped: the cluster takes the --redis-* login.
		return b.fs.usagef("--token and --token-file are for --server; with --redis log in with --redis-username and --redis-password-file"), false
	}
	return 0, true
}

// remote returns the server client when the command talks to a server
// (see choose); r is nil when it works on a cluster directly.
func (b *backendFlags) remote() (r *remote, code int, ok bool) {
	if code, ok := b.choose(); !ok {
		return nil, code, false
	}
	if b.server == "" {
		return nil, 0, true
	}
	token := b.token
	switch {
	case b.tokenFile != "" && token != "":
		return nil, b.fs.usagef("give --token or --token-file, not both"), false
	case b.tokenFile != "":
		t, err := readSecret(b.tokenFile)
		if err != nil {
			return nil, b.fs.usagef("--token-file: %v", err), false
		}
		token = t
	case token == "":
		token = os.Getenv(envClientToken)
	}
	r, err := newRemote(b.server, token)
	if err != nil {
		return nil, b.fs.usagef("%v", err), false
	}
	return r, 0, true
}

// redisConfig returns the Redis settings of --redis and the login and TLS
// flags (the password from --redis-password-file or $HOTCOUNT_REDIS_PASSWORD).
func (b *backendFlags) redisConfig() (hotcount.RedisConfig, error) {
	return b.sec.forRedis(splitAddrs(b.redis))
}

func (b *backendFlags) open(ctx context.Context, rc hotcount.RedisConfig) (*hotcount.Client, error) {
	return hotcount.New(ctx, hotcount.Config{Redis: rc, Reads: hotcount.ReadConfig{NoCache: true}})
}

// checkN rejects an --n outside 1..MaxN (b.n stays 0 when --n is not
// given).
func (b *backendFlags) checkN() (int, bool) {
	given := false
	b.fs.Visit(func(f *flag.Flag) { given = given || f.Name == "n" })
	if given && (b.n < 1 || b.n > keyspace.MaxN) {
		return b.fs.usagef("--n must be 1..%d, got %d", keyspace.MaxN, b.n), false
	}
	return 0, true
}

// connect checks the backend flags and returns either a remote server or
// the settings of a Client to open; ok false means return code.
func (b *backendFlags) connect() (rem *remote, rc hotcount.RedisConfig, code int, ok bool) {
	rem, code, ok = b.remote()
	if !ok || rem != nil {
		return rem, rc, code, ok
	}
	rc, err := b.redisConfig()
	if err != nil {
		return nil, rc, b.fs.usagef("%v", err), false
	}
	return nil, rc, 0, true
}

func runIncr(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("incr", stdout, stderr)
	var b backendFlags
	b.register(fs, "for a counter that does not exist yet: create it with this many sub-counters (1..1024), pinned as resize pins them; refused when it exists with another number")
	key := fs.String("key", "", "counter key (required)")
	by := fs.Int64("by", 1, "delta to add (non-zero)")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	if code, ok := b.checkN(); !ok {
		return code
	}
	if *key == "" {
		return fs.usagef("--key is required")
	}
	if err := validateInput(*key, *by); err != nil {
		return fs.usagef("%v", err)
	}
	rem, rc, code, ok := b.connect()
	if !ok {
		return code
	}
	if rem != nil {
		var out map[string]any
		body := map[string]int64{"by": *by}
		if b.n > 0 {
			body["n"] = int64(b.n)
		}
		if err := rem.do(ctx, "POST", counterPath(*key, "/incr"), body, &out); err != nil {
			return remoteFailure(stderr, "incr", err)
		}
		if *asJSON {
			return printJSON(stdout, stderr, map[string]any{"key": *key, "accepted": true, "by": *by})
		}
		fmt.Fprintf(stdout, "%s += %d\n", *key, *by)
		return exitOK
	}
	c, err := b.open(ctx, rc)
	if err != nil {
		return openFailure(stderr, "incr", err)
	}
	defer c.Close(context.Background())
	if b.n > 0 {
		if _, err := c.Create(ctx, *key, b.n); err != nil {
			if errors.Is(err, hotcount.ErrExists) {
				return fs.usagef("%v (--n applies to a counter that does not exist yet; resize changes it)", err)
			}
			return fs.failf("%v", err)
		}
	}
	if err := c.Incr(ctx, *key, *by); err != nil {
		if errors.Is(err, hotcount.ErrOverflow) {
			return fs.usagef("%v", err)
		}
		return fs.failf("%v", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, map[string]any{"key": *key, "accepted": true, "by": *by})
	}
	fmt.Fprintf(stdout, "%s += %d\n", *key, *by)
	return exitOK
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("get", stdout, stderr)
	var b backendFlags
	b.register(fs, "")
	key := fs.String("key", "", "counter key (required)")
	asJSON := fs.Bool("json", false, `print JSON: {"key", "value", "stale_ms"}`)
	if code, done := fs.parse(args); done {
		return code
	}
	if *key == "" {
		return fs.usagef("--key is required")
	}
	if err := validateInput(*key, 1); err != nil {
		return fs.usagef("%v", err)
	}
	rem, rc, code, ok := b.connect()
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
	c, err := b.open(ctx, rc)
	if err != nil {
		return openFailure(stderr, "get", err)
	}
	defer c.Close(context.Background())
	r, err := c.Get(ctx, *key)
	if err != nil {
		return fs.failf("%v", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, map[string]any{"key": r.Key, "value": r.Value, "stale_ms": r.Stale.Milliseconds()})
	}
	fmt.Fprintf(stdout, "%d\n", r.Value)
	return exitOK
}

// validateInput applies the library's key and delta rules before anything
// is opened, so bad input is a usage error (exit 2), and an increment
// with --n that the counter would refuse does not create the counter
// first.
func validateInput(key string, delta int64) error {
	if err := hotcount.ValidateKey(key); err != nil {
		return err
	}
	if delta == 0 {
		return hotcount.ErrZeroDelta
	}
	if delta > hotcount.MaxDelta || delta < -hotcount.MaxDelta {
		return fmt.Errorf("%w: |by| %d passes the sub-counter bound %d", hotcount.ErrOverflow, delta, int64(hotcount.MaxDelta))
	}
	return nil
}

// openFailure reports a failure of cmd to open a backend: a bad
// configuration is a usage error, anything else a runtime failure.
func openFailure(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, hotcount.ErrConfig) {
		return usagef(stderr, "%s: %v", cmd, err)
	}
	return failf(stderr, "%s: %v", cmd, err)
}

// printJSON writes v as one line of JSON.
func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(v); err != nil {
		return failf(stderr, "writing JSON: %v", err)
	}
	return exitOK
}
