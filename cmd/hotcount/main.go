// Command hotcount is the command-line face of the hotcount library: a
// server, a planner, a load tool and helpers for a local Redis Cluster.
//
// Each subcommand lives in its own file as a function
// run<Name>(ctx, args, stdout, stderr) int and is listed in commands below.
// Exit status: 0 success, 1 runtime failure, 2 bad usage or input.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is the subcommand table; help lists it in order of name. It is
// filled by init, because the commands' help reads it.
var commands map[string]command

func init() {
	commands = map[string]command{
		"version":  {"print the version", runVersion},
		"cluster":  {"start, stop or inspect a local Redis Cluster (up, down, status)", runCluster},
		"plan":     {"size a hot counter: n, per-node load, collision odds, mode", runPlan},
		"simulate": {"model strategies on K nodes under Zipf traffic and a viral key", runSimulate},
		"incr":     {"add to a counter", runIncr},
		"get":      {"read a counter", runGet},
		"shards":   {"show where a counter's sub-counters live", runShards},
		"resize":   {"change a counter's number of sub-counters (grow, or fold to shrink)", runResize},
		"serve":    {"run the HTTP API, metrics and dashboard", runServe},
		"proxy":    {"serve the Redis protocol: INCR on counter keys absorbed, other keys passed through", runProxy},
		"bench":    {"drive one hot counter from many clients and measure the cache's writes", runBench},
		"soak":     {"run mixed load for a long time and watch memory and goroutines", runSoak},
		"rebuild":  {"recreate the cache view of counters from the durable store", runRebuild},
	}
}

// version and revision, when set at build time with -ldflags
// "-X main.version=... -X main.revision=...", replace the module version
// and the VCS revision of the build info; scripts/image sets both, so
// that a binary built without VCS stamping (-buildvcs=false, or outside a
// git checkout) still says what it is.
var (
	version  = ""
	revision = ""
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "hotcount: no command given (run 'hotcount help')")
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && !isHelp(args[1]) {
			if c, ok := commands[args[1]]; ok {
				// "help bench longtail", "help cluster up": the words
				// after the command name its subcommand.
				sub := append(append([]string{}, args[2:]...), "--help")
				return c.run(ctx, sub, stdout, stderr)
			}
			fmt.Fprintf(stderr, "hotcount: help: unknown command %q (run 'hotcount help')\n", args[1])
			return exitUsage
		}
		printHelp(stdout)
		return exitOK
	case "-v", "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "hotcount: unknown command %q (run 'hotcount help')\n", name)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// isHelp reports whether word asks for help: "help" or its flags.
func isHelp(word string) bool {
	switch word {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "hotcount absorbs write-hot counters on a sharded cache.")
	fmt.Fprintln(w, "\nUsage: hotcount <command> [flags]   (hotcount help <command>, or hotcount <command> --help, for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, helpExamples)
	fmt.Fprint(w, helpEnvironment)
}

const helpExamples = `
Examples:
  hotcount serve                                   API, metrics and dashboard on 127.0.0.1:7070 (embedded store, ./hotcount-data)
  hotcount incr --server http://127.0.0.1:7070 --key likes:post:42 --by 5
  hotcount get --server http://127.0.0.1:7070 --key likes:post:42 --json
  hotcount plan --rate 40000 --node-capacity 10000 --nodes 20 --procs 100 --flush 500ms --json
  hotcount cluster up --dir /tmp/hc --port 7100    a local 3-primary Redis Cluster; prints its seeds
  hotcount bench --redis 127.0.0.1:7100 --key hot --compare single,sharded,buffered,combined --procs 20 --duration 2s --rounds 1
                                                   the four modes side by side, about 20 s (3 rounds of 10 s per mode without the last flags)
  hotcount shards --redis 127.0.0.1:7100 --key likes:post:42
  hotcount proxy --redis 127.0.0.1:7100             Redis clients on 127.0.0.1:6380; admin on 127.0.0.1:7071
  hotcount cluster down --dir /tmp/hc
  hotcount cluster up --dir /tmp/hc8 --port 7200 --primaries 8 --replicas 0 --node-cpu 1%
                                                   8 primaries, each under a 1% CPU quota (cgroup; root)
  hotcount bench --redis 127.0.0.1:7200 --key hot --compare single,sharded,combined --n 8 --rate 3x --procs 8
                                                   calibrate one node, offer 3x its ceiling open-loop
`

const helpEnvironment = `
Environment:
  HOTCOUNT_SERVER, HOTCOUNT_CLIENT_TOKEN   --server and --token of incr, get, shards and resize
                                           (with neither --server nor --redis: http://127.0.0.1:7070)
  HOTCOUNT_REDIS                           --redis of incr, get, shards and resize (and the redis setting of serve and proxy)
  HOTCOUNT_REDIS_PASSWORD                  the Redis password of incr, get, shards, resize, rebuild, bench and soak
                                           (and the redis_password setting of serve and proxy)
  HOTCOUNT_<SETTING>                       a setting of serve or proxy (hotcount help serve, docs/configuration.md)
`

// subcommandSummaries are the summaries of the commands of two words,
// whose help would otherwise show their group's.
var subcommandSummaries = map[string]string{
	"bench longtail": "many mostly cold counters and a viral key, through the proxy and the library, against plain INCR",
	"cluster up":     "start a local Redis Cluster of redis-server processes and print its seeds",
	"cluster down":   "stop the local Redis Cluster of --dir and remove its CPU groups",
	"cluster status": "show the nodes of the local Redis Cluster of --dir and their CPU quotas",
}

// commandExamples are the examples of each command's help.
var commandExamples = map[string]string{
	"serve": `  hotcount serve
  hotcount serve --config hotcount.yaml
  HOTCOUNT_TOKEN_FILE=/run/secrets/hotcount hotcount serve --listen 0.0.0.0:7070 --tls-cert cert.pem --tls-key key.pem \
    --redis 10.0.0.1:6379,10.0.0.2:6379 --redis-tls-ca ca.pem --redis-username hotcount --redis-password-file /run/secrets/redis \
    --postgres 'postgres://hotcount@db/hotcount?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem'
  hotcount serve --log-format json --access-log
`,
	"incr": `  hotcount incr --key likes:post:42 --by 5        to the server at $HOTCOUNT_SERVER, else http://127.0.0.1:7070
  hotcount incr --server http://127.0.0.1:7070 --key likes:post:42 --by 5
  HOTCOUNT_SERVER=http://127.0.0.1:7070 HOTCOUNT_CLIENT_TOKEN=$TOKEN hotcount incr --key likes:post:42
  hotcount incr --redis 127.0.0.1:7100 --key likes:post:42
`,
	"get": `  hotcount get --server http://127.0.0.1:7070 --key likes:post:42 --json
  hotcount get --redis 127.0.0.1:7100 --key likes:post:42
`,
	"shards": `  hotcount shards --server http://127.0.0.1:7070 --key likes:post:42
  hotcount shards --redis 127.0.0.1:7100 --key likes:post:42 --rebalance
`,
	"resize": `  hotcount resize --server http://127.0.0.1:7070 --key likes:post:42 --n 16
`,
	"plan": `  hotcount plan --rate 40000 --node-capacity 10000 --nodes 20
  hotcount plan --rate 40000 --node-capacity 10000 --nodes 20 --procs 100 --flush 500ms --loss-window 1s --json
`,
	"simulate": `  hotcount simulate --nodes 20 --n 8
  hotcount simulate --nodes 20 --keys 10000 --json
`,
	"proxy": `  hotcount proxy --redis 127.0.0.1:7100
  hotcount proxy --config hotcount.yaml --resp-listen 127.0.0.1:6380 --admin-listen off
`,
	"bench": `  hotcount bench --redis 127.0.0.1:7100 --key hot --compare single,sharded,buffered,combined --procs 20 --duration 2s --rounds 1
                                                   a quick look, about 20 s
  hotcount bench --redis 127.0.0.1:7100 --key hot --compare single,sharded,buffered,combined --procs 100 --duration 10s
                                                   3 rounds of 10 s per mode: about two minutes
  hotcount bench longtail --redis 127.0.0.1:7100 --json
                                                   the long tail and the mixed load against plain INCR (docs/performance.md)
  hotcount bench --redis 10.0.0.1:6379 --redis-tls-ca redis-ca.pem --redis-password-file /run/secrets/redis --key hot --mode combined
                                                   a cluster that asks for a password and serves TLS
`,
	"bench longtail": `  hotcount bench longtail --redis 127.0.0.1:7100 --json
                                                   200,000 cold counters and a viral key, proxy and library, a few minutes
  hotcount bench longtail --redis 127.0.0.1:7100 --paths library --workloads mixed --duration 10m
                                                   ten minutes of the mixed load through the library
  hotcount bench longtail --redis 10.0.0.1:6379 --redis-username bench --redis-password-file /run/secrets/redis --json
                                                   a cluster with an ACL user (redis-benchmark gets the password with -a)
`,
	"soak": `  hotcount soak --duration 1m --interval 10s
  hotcount soak --redis 127.0.0.1:7100 --duration 10m --keep
  HOTCOUNT_REDIS_PASSWORD=... hotcount soak --redis 10.0.0.1:6379 --redis-tls --duration 10m
`,
	"rebuild": `  hotcount rebuild --redis 127.0.0.1:7100 --data ./hotcount-data --prefix orders:
  hotcount rebuild --redis 127.0.0.1:7100 --postgres postgres://hotcount@db/hotcount --key orders:7 --json
  hotcount rebuild --redis 127.0.0.1:7100 --data ./hotcount-data --dry-run
`,
	"cluster up":     "  hotcount cluster up --dir /tmp/hc --port 7100 --primaries 3 --replicas 1\n",
	"cluster down":   "  hotcount cluster down --dir /tmp/hc\n",
	"cluster status": "  hotcount cluster status --dir /tmp/hc\n",
	"version":        "  hotcount version\n  hotcount --version\n",
}

// runVersion prints the module version and the VCS revision of the build.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stdout, stderr)
	if code, done := fs.parse(args); done {
		return code
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi, version, revision))
	return exitOK
}

// versionLine describes a build: "hotcount <version> (<revision>[, modified],
// <time>, <go version>)". The version is override when set, else the
// module's; the revision, its time and whether the tree was modified come
// from the VCS stamp of a build in a git checkout, unless rev (the stamped
// revision) is set: then the revision is rev, and the VCS stamp, which
// describes the same build, is not consulted.
func versionLine(bi *debug.BuildInfo, override, rev string) string {
	if bi == nil {
		v := override
		if v == "" {
			v = "(unknown)"
		}
		if rev != "" {
			return "hotcount " + v + " (revision " + rev + ", no build information)"
		}
		return "hotcount " + v + " (no build information)"
	}
	v := override
	if v == "" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	var at string
	modified := false
	stamped := rev != ""
	for _, s := range bi.Settings {
		if stamped {
			break
		}
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if rev == "" {
		parts = append(parts, "revision unknown: no VCS stamp (not built in a git checkout, or with -buildvcs=false)")
	} else {
		r := "revision " + rev
		if modified {
			r += " (modified)"
		}
		parts = append(parts, r)
	}
	if at != "" {
		parts = append(parts, at)
	}
	parts = append(parts, bi.GoVersion)
	return "hotcount " + v + " (" + strings.Join(parts, ", ") + ")"
}
