package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hotcount/hotcount/plan"
)

// runPlan sizes one hot counter: hotcount plan --rate R --node-capacity C
// --nodes K [...]. It prints plan.Explain, or the plan.Result as JSON.
func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", stdout, stderr)
	var in plan.Input
	var asJSON bool
	fs.Float64Var(&in.Rate, "rate", 0, "increments per second on the hot key (required)")
	fs.Float64Var(&in.NodeCapacity, "node-capacity", 0, "writes per second one node can take for this counter (required)")
	fs.IntVar(&in.Nodes, "nodes", 0, "number of primaries (required)")
	fs.IntVar(&in.N, "n", 0, "sub-counter count to evaluate (0 = derive)")
	fs.Float64Var(&in.Headroom, "headroom", 0, "headroom factor when deriving n, e.g. 1.5 (0 = none)")
	fs.IntVar(&in.Procs, "procs", 0, "processes writing the counter (0 = not given: buffering not evaluated)")
	fs.DurationVar(&in.Flush, "flush", 0, "buffer flush interval, with --procs (0 = "+plan.DefaultFlush.String()+")")
	fs.Float64Var(&in.ReadRate, "read-rate", 0, "reads per second of the counter, over all processes")
	fs.DurationVar(&in.ReadCacheTTL, "read-cache-ttl", 0, "summed-read cache TTL (0 = "+plan.DefaultReadCacheTTL.String()+")")
	fs.DurationVar(&in.LossWindow, "loss-window", 0, "acceptable loss window; 0 asks for durable mode (unset = no limit)")
	fs.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	if code, done := fs.parse(args); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var missing []string
	for _, name := range []string{"rate", "node-capacity", "nodes"} {
		if !set[name] {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return usagef(stderr, "plan: %s required", strings.Join(missing, ", "))
	}
	if set["flush"] && in.Procs == 0 {
		// The flush interval sizes buffering, which is evaluated only for
		// a number of writing processes: alone it would be ignored.
		return usagef(stderr, "plan: --flush needs --procs P > 0 (buffering is evaluated only with --procs)")
	}
	in.LossWindowSet = set["loss-window"]
	res, err := plan.Compute(in)
	if err != nil {
		return usagef(stderr, "%v", err) // the error names the command
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return failf(stderr, "plan: %v", err)
		}
		return exitOK
	}
	if _, err := fmt.Fprint(stdout, plan.Explain(res)); err != nil {
		return failf(stderr, "plan: %v", err)
	}
	return exitOK
}
