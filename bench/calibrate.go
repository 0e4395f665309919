package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// Calibration is one node's single-key INCR ceiling, measured with the
// bench's own client (see the package documentation).
type Calibration struct {
	// Node is the node that holds the calibration key.
	Node string `json:"node"`
	// Key is the counter driven (cleared afterwards).
	Key string `json:"key"`
	// Procs and Workers describe the load: Procs instances of Workers
	// goroutines each, unpaced.
	Procs   int `json:"procs"`
	Workers int `json:"workers"`
	// Seconds is how long the node was driven.
	Seconds float64 `json:"seconds"`
	// IncrPerSec is the ceiling: increments acknowledged per second.
	IncrPerSec float64 `json:"incr_per_sec"`
	// NodeWritesPerSec is the node's INCRBY rate over the same time
	// (INFO commandstats); it matches IncrPerSec unless other clients
	// wrote to the node.
	NodeWritesPerSec float64 `json:"node_writes_per_sec"`
	// NodeCPU is the part of one CPU the node's process used meanwhile
	// (INFO cpu): near its quota when the node was the limit, below it
	// when the generator was.
	NodeCPU float64 `json:"node_cpu"`
	// Latency is that of the calibration's increments.
	Latency Latency `json:"latency"`
	// Errors counts failed increments.
	Errors int64 `json:"errors"`
}

// calibrate measures the single-key ceiling of the node that holds the
// calibration key.
func calibrate(ctx context.Context, s *settings, b backend) (*Calibration, error) {
	key := s.calibrationKey()
	cfg := hotcount.Config{Defaults: hotcount.Namespace{N: 1, NoColdStart: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}}
	checker, err := b.open(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: 1, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout})
	if err != nil {
		return nil, err
	}
	defer checker.Close(context.Background())
	for _, d := range []int64{1, -1} { // settles the label, as runRound does
		if err := checker.Incr(ctx, key, d); err != nil {
			return nil, fmt.Errorf("calibration: %w", err)
		}
	}
	subs, err := checker.SubKeys(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	topo, err := checker.Store().Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	node := topo.NodeOf(subs[0])
	cal := &Calibration{Node: node, Key: key, Procs: s.Procs, Workers: s.openWorkers()}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		if err := checker.Clear(cctx, key); err == nil {
			_ = checker.Store().Del(cctx, []string{keyspace.MetaKey(key)})
		}
	}()

	ins, err := openInstances(ctx, b, cfg, s.Procs)
	if err != nil {
		return nil, fmt.Errorf("calibration: opening %d instances: %w", s.Procs, err)
	}
	defer closeInstances(ins)
	before, err := b.calls(ctx, []string{node})
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	cpu0, cpuErr := b.cpuSeconds(ctx, node)
	elapsed := drive(ctx, ins, key, 0, s.Calibrate, cal.Workers)
	cctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	cpu1, err := b.cpuSeconds(cctx, node)
	cpuErr = errors.Join(cpuErr, err)
	after, err := b.calls(cctx, []string{node})
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	t := sum(ins)
	cal.Seconds = elapsed.Seconds()
	cal.Errors = t.failed
	cal.Latency = latencies(ins).latency()
	if cal.Seconds > 0 {
		cal.IncrPerSec = float64(t.sent) / cal.Seconds
		cal.NodeWritesPerSec = float64(b.writes(after[node].minus(before[node]))) / cal.Seconds
		if cpuErr == nil {
			cal.NodeCPU = (cpu1 - cpu0) / cal.Seconds
		}
	}
	if t.sent == 0 {
		if t.lastErr != nil {
			return cal, fmt.Errorf("calibration: no increment succeeded: %w", t.lastErr)
		}
		return cal, fmt.Errorf("calibration: no increment succeeded in %v", time.Duration(cal.Seconds*float64(time.Second)))
	}
	return cal, nil
}
