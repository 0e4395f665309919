//go:build linux

package hotcount_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hotcount/hotcount"
)

// The kill test runs the test binary again as a child process
// (TestReliabilityChild, selected by childModeEnv) that increments one
// key in buffered mode. The child counts its increments in a file it maps
// shared: the count is raised before each Incr (and lowered again if the
// Incr fails), so it is never below what the child handed to the Client,
// and it survives SIGKILL, as the page is the kernel's. Every 50 ms the
// child also writes a line to a pipe: elapsed time, count, and its buffer
// gauges, from which the parent takes the rate.

const (
	childInterval = 100 * time.Millisecond // the child's FlushInterval
	childN        = 8
	childReport   = 50 * time.Millisecond
)

// childLine is one report of the child.
type childLine struct {
	at       time.Duration
	count    int64
	oldest   time.Duration
	flushes  uint64
	unflushd int64
}

// TestReliabilityKill kills a child mid-load. SIGKILL loses at most what
// the child received in its last flush interval plus one batch in flight:
// 0 ≤ loss ≤ 2 × peak rate × FlushInterval. SIGTERM makes the child Close
// its Client, which drains the buffer: loss 0.
func TestReliabilityKill(t *testing.T) {
	noLeak(t)
	for _, mode := range []string{"kill", "term"} {
		t.Run(mode, func(t *testing.T) {
			key := uniqueKey(t)
			counter := filepath.Join(t.TempDir(), "count")
			if err := os.WriteFile(counter, make([]byte, 8), 0o600); err != nil {
				t.Fatal(err)
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestReliabilityChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(),
				childModeEnv+"="+mode,
				"HOTCOUNT_CHILD_REDIS="+strings.Join(cluster.Seeds(), ","),
				"HOTCOUNT_CHILD_KEY="+key,
				"HOTCOUNT_CHILD_COUNTER="+counter,
			)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.ExtraFiles = []*os.File{pw}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			var (
				mu    sync.Mutex
				lines []childLine
			)
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				sc := bufio.NewScanner(pr)
				for sc.Scan() {
					var l childLine
					if _, err := fmt.Sscanf(sc.Text(), "at=%d count=%d oldest=%d flushes=%d unflushed=%d",
						&l.at, &l.count, &l.oldest, &l.flushes, &l.unflushd); err == nil {
						mu.Lock()
						lines = append(lines, l)
						mu.Unlock()
					}
				}
			}()
			// Let it run ~1.5 s of load (counted from its first report).
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				n := len(lines)
				mu.Unlock()
				if n > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(1500 * time.Millisecond)
			sig := syscall.SIGKILL
			if mode == "term" {
				sig = syscall.SIGTERM
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			werr := cmd.Wait()
			<-readDone
			pr.Close()
			raw, err := os.ReadFile(counter)
			if err != nil {
				t.Fatal(err)
			}
			sent := int64(binary.NativeEndian.Uint64(raw))
			if sent == 0 {
				t.Fatalf("the child sent nothing (exit %v); its output:\n%s", werr, out.String())
			}
			got := totals(t, cluster.Seeds(), childN, []string{key})[key]
			loss := sent - got
			var peak float64
			var oldest time.Duration
			for i := 1; i < len(lines); i++ {
				dt := (lines[i].at - lines[i-1].at).Seconds()
				if dt > 0 {
					peak = max(peak, float64(lines[i].count-lines[i-1].count)/dt)
				}
				oldest = max(oldest, lines[i].oldest)
			}
			if mode == "term" {
				t.Logf("SIGTERM: sent %d, cache %d, loss %d; exit %v", sent, got, loss, werr)
				if werr != nil {
					t.Errorf("child exit after SIGTERM: %v; output:\n%s", werr, out.String())
				}
				if loss != 0 {
					t.Fatalf("SIGTERM lost %d increments (sent %d, cache %d): Close must drain", loss, sent, got)
				}
				return
			}
			perInterval := peak * childInterval.Seconds()
			bound := int64(2*perInterval) + 1
			t.Logf("SIGKILL: sent %d, cache %d, loss %d; peak rate %.0f/s → %.0f per %v interval, bound %d (last interval + one batch); oldest unflushed seen %v; %d reports",
				sent, got, loss, peak, perInterval, childInterval, bound, oldest, len(lines))
			if loss < 0 {
				t.Fatalf("the cache holds %d more than was sent", -loss)
			}
			if loss > bound {
				t.Fatalf("SIGKILL lost %d increments, more than the last interval plus one batch (%d)", loss, bound)
			}
		})
	}
}

// TestReliabilityChild is the child process of TestReliabilityKill; it
// does nothing in a normal run.
func TestReliabilityChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("runs only as the child process of TestReliabilityKill")
	}
	report := os.NewFile(3, "report")
	f, err := os.OpenFile(os.Getenv("HOTCOUNT_CHILD_COUNTER"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	count := (*atomic.Int64)(unsafe.Pointer(&mem[0]))
	ctx := context.Background()
	c, err := hotcount.New(ctx, hotcount.Config{
		Redis:    hotcount.RedisConfig{Addrs: strings.Split(os.Getenv("HOTCOUNT_CHILD_REDIS"), ",")},
		Defaults: hotcount.Namespace{NoColdStart: true, N: childN, Buffered: true, FlushInterval: childInterval},
	})
	if err != nil {
		t.Fatal(err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	key := os.Getenv("HOTCOUNT_CHILD_KEY")
	start := time.Now()
	next := start
	for i := 0; ; i++ {
		select {
		case <-term:
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := c.Close(cctx)
			cancel()
			if err != nil {
				t.Fatalf("Close after SIGTERM: %v", err)
			}
			return
		default:
		}
		count.Add(1) // before the Incr: the count never lags the Client
		if err := c.Incr(ctx, key, 1); err != nil {
			count.Add(-1)
			t.Fatalf("Incr: %v", err)
		}
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // pace: ~50k/s, well below one core
		}
		if now := time.Now(); now.After(next) {
			s := c.Stats().Buffer
			fmt.Fprintf(report, "at=%d count=%d oldest=%d flushes=%d unflushed=%d\n",
				now.Sub(start), count.Load(), s.OldestUnflushed, s.Flushes, s.Unflushed)
			next = now.Add(childReport)
		}
	}
}
