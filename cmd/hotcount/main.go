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
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is the subcommand table; help lists it in order of name.
var commands = map[string]command{
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

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
	if name == "help" || name == "-h" || name == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, []string{"--help"}, stdout, stderr)
			}
		}
		printHelp(stdout)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "hotcount: unknown command %q (run 'hotcount help')\n", name)
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "hotcount absorbs write-hot counters on a sharded cache.")
	fmt.Fprintln(w, "\nUsage: hotcount <command> [flags]   (hotcount help <command> for its flags)")
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
}

const helpExamples = `
Examples:
  hotcount serve                                   API, metrics and dashboard on 127.0.0.1:7070 (embedded store, ./hotcount-data)
  hotcount incr --server http://127.0.0.1:7070 --key likes:post:42 --by 5
  hotcount get --server http://127.0.0.1:7070 --key likes:post:42 --json
  hotcount plan --rate 40000 --node-capacity 10000 --nodes 20 --procs 100 --flush 500ms --json
  hotcount cluster up --dir /tmp/hc --port 7100    a local 3-primary Redis Cluster; prints its seeds
  hotcount bench --redis 127.0.0.1:7100 --key hot --compare single,sharded,buffered,combined
  hotcount shards --redis 127.0.0.1:7100 --key likes:post:42
  hotcount proxy --redis 127.0.0.1:7100 --config proxy.yaml   Redis clients on 127.0.0.1:6380; admin on 127.0.0.1:7071
  hotcount cluster down --dir /tmp/hc
  hotcount cluster up --dir /tmp/hc8 --port 7200 --primaries 8 --replicas 0 --node-cpu 1%
                                                   8 primaries, each under a 1% CPU quota (cgroup; root)
  hotcount bench --redis 127.0.0.1:7200 --key hot --compare single,sharded,combined --n 8 --rate 3x --procs 8
                                                   calibrate one node, offer 3x its ceiling open-loop
`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	if code, done := fs.parse(args); done {
		return code
	}
	fmt.Fprintln(stdout, "hotcount", version)
	return exitOK
}
