package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/hotcount/hotcount/simulate"
)

// runSimulate runs the cluster model: hotcount simulate [flags]. It prints
// a table, JSON (--json) or CSV (--csv), and with --svg FILE also writes a
// bar chart of peak utilisation per strategy.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("simulate", stdout, stderr)
	var c simulate.Config
	var asJSON, asCSV bool
	var svgPath string
	fs.IntVar(&c.Nodes, "nodes", simulate.DefaultNodes, "number of primaries")
	fs.IntVar(&c.Keys, "keys", simulate.DefaultKeys, "number of Zipf-distributed background keys")
	fs.IntVar(&c.N, "n", simulate.DefaultN, "sub-counters of the viral key (sharded and combined)")
	fs.Float64Var(&c.Capacity, "capacity", simulate.DefaultCapacity, "writes per second one node takes")
	fs.Float64Var(&c.ViralRate, "viral-rate", simulate.DefaultViralRate, "increments per second on the viral key")
	fs.IntVar(&c.RampSeconds, "ramp", simulate.DefaultRampSeconds, "seconds the viral key takes to reach its rate (1 = a step)")
	fs.Float64Var(&c.BackgroundLoad, "background-load", simulate.DefaultBackgroundLoad, "background traffic as a fraction of total capacity")
	fs.Float64Var(&c.ZipfS, "zipf-s", simulate.DefaultZipfS, "Zipf exponent of the background keys")
	fs.IntVar(&c.Seconds, "seconds", simulate.DefaultSeconds, "simulated seconds")
	fs.IntVar(&c.Procs, "procs", simulate.DefaultProcs, "writer processes (buffered strategies)")
	fs.DurationVar(&c.Flush, "flush", simulate.DefaultFlush, "buffer flush interval")
	fs.Float64Var(&c.KeyBudget, "key-budget", simulate.DefaultKeyBudget, "auto: fraction of a node's capacity one sub-counter may take")
	fs.IntVar(&c.Trials, "trials", simulate.DefaultTrials, "Monte Carlo trials for the placement odds")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&asCSV, "csv", false, "print one CSV row per strategy")
	fs.StringVar(&svgPath, "svg", "", "also write a peak-utilisation bar chart to this SVG file")
	if code, done := fs.parse(args); done {
		return code
	}
	if asJSON && asCSV {
		return usagef(stderr, "simulate: --json and --csv are exclusive")
	}
	// A flag given as 0 must not silently become the default.
	zero := ""
	fs.Visit(func(f *flag.Flag) {
		if v := f.Value.String(); zero == "" && f.Name != "seed" && (v == "0" || v == "0s") {
			zero = f.Name
		}
	})
	if zero != "" {
		return usagef(stderr, "simulate: --%s must not be 0", zero)
	}
	if svgPath != "" {
		if err := checkOutputFile(svgPath); err != nil {
			return usagef(stderr, "simulate: --svg: %v", err)
		}
	}
	res, err := simulate.Run(ctx, c)
	switch {
	case errors.Is(err, simulate.ErrInvalidConfig):
		return usagef(stderr, "%v", err) // the error names the command
	case err != nil:
		return failf(stderr, "simulate: %v", err)
	}
	if svgPath != "" {
		if err := writeSVGFile(svgPath, res); err != nil {
			return failf(stderr, "simulate: --svg: %v", err)
		}
	}
	switch {
	case asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	case asCSV:
		err = simulate.WriteCSV(stdout, res)
	default:
		err = simulate.WriteText(stdout, res)
	}
	if err != nil {
		return failf(stderr, "simulate: %v", err)
	}
	return exitOK
}

func writeSVGFile(path string, res *simulate.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := simulate.WriteSVG(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
