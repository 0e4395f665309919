package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

func TestSoakBadFlags(t *testing.T) {
	cases := [][]string{
		{"--duration", "0s"},
		{"--duration", "1s", "--interval", "2s"},
		{"--interval", "-1s"},
		{"--keys", "1"},
		{"--bogus"},
		{"extra"},
	}
	for _, args := range cases {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"soak"}, args...), &out, &errb); code != exitUsage {
			t.Errorf("soak %v: exit %d, want %d (stderr %q)", args, code, exitUsage, errb.String())
		}
		if lines := strings.Count(strings.TrimSpace(errb.String()), "\n"); lines != 0 {
			t.Errorf("soak %v: %d stderr lines, want one: %q", args, lines+1, errb.String())
		}
	}
}

func TestSoakEmbeddedJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"soak", "--duration", "2s", "--interval", "500ms", "--keys", "20", "--json"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errb.String(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d lines, want samples and a verdict:\n%s", len(lines), out.String())
	}
	var prev soakSample
	for i, l := range lines[:len(lines)-1] {
		var s soakSample
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		if s.Goroutines == 0 || s.HeapInuse == 0 || s.Sys == 0 || s.ElapsedMS <= prev.ElapsedMS || s.Incrs <= prev.Incrs {
			t.Fatalf("line %d does not move on from the one before: %+v after %+v", i, s, prev)
		}
		prev = s
	}
	var v soakVerdict
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		t.Fatal(err)
	}
	if v.Verdict != "stable" || !v.CheckExact || v.Resize != "on" || v.Errors != 0 || v.Gets == 0 || v.Incrs == 0 {
		t.Fatalf("verdict %+v", v)
	}
	if v.GoroutineAfterClose > v.GoroutineBefore+soakGoroutineSlack {
		t.Fatalf("goroutines: %d before open, %d after close", v.GoroutineBefore, v.GoroutineAfterClose)
	}
	t.Logf("verdict %+v", v)
}

func TestSoakRedisStandalone(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"soak", "--redis", n.Addr, "--duration", "2s", "--interval", "1s", "--keys", "50"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errb.String(), out.String())
	}
	text := out.String()
	for _, want := range []string{"heap_inuse", "goroutines", "verdict: stable", "check counter exact: true", "errors 0", "removed the 51 counters"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if left := soakValueKeys(ctx, t, n.Addr); len(left) > 0 {
		t.Errorf("soak left %d sub-counters or marks behind, e.g. %s", len(left), left[0])
	}
	// --keep leaves them.
	out.Reset()
	if code := run(ctx, []string{"soak", "--redis", n.Addr, "--duration", "1s", "--interval", "500ms", "--keys", "10", "--keep"}, &out, &errb); code != exitOK {
		t.Fatalf("--keep: exit %d; stderr %q; stdout:\n%s", code, errb.String(), out.String())
	}
	if left := soakValueKeys(ctx, t, n.Addr); len(left) == 0 || !strings.Contains(out.String(), "kept the counters under soak:") {
		t.Errorf("--keep: %d sub-counters left; output:\n%s", len(left), out.String())
	}
}

// soakValueKeys lists the sub-counters and record marks (not metadata,
// flush tokens or sequences) of soak counters on a Redis node. A mark
// counts: after the clear no counter has a record, so a mark left is one
// that outlived its record, which nothing removes.
func soakValueKeys(ctx context.Context, t *testing.T, addr string) []string {
	t.Helper()
	all, err := testenv.Do(ctx, addr, "KEYS", "{soak:*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range strings.Fields(all) {
		if !strings.Contains(k, ":tok:") && !strings.HasSuffix(k, "}:seq") && !strings.HasSuffix(k, "#meta}") {
			out = append(out, k)
		}
	}
	return out
}

func TestSoakJudge(t *testing.T) {
	var counts soakCounts
	base := soakSample{Elapsed: "1s", HeapInuse: 10 << 20, Goroutines: 20}
	cases := []struct {
		name string
		last soakSample
		want string
	}{
		{"same", base, "stable"},
		{"heap doubled plus slack", soakSample{HeapInuse: 20<<20 + soakHeapSlack, Goroutines: 20}, "stable"},
		{"heap past the slack", soakSample{HeapInuse: 20<<20 + soakHeapSlack + 1, Goroutines: 20}, "growth"},
		{"goroutines within slack", soakSample{HeapInuse: 10 << 20, Goroutines: 20 + soakGoroutineSlack}, "stable"},
		{"goroutines past slack", soakSample{HeapInuse: 10 << 20, Goroutines: 21 + soakGoroutineSlack}, "growth"},
	}
	for _, tc := range cases {
		if v := soakJudge(base, tc.last, time.Second, &counts); v.Verdict != tc.want {
			t.Errorf("%s: verdict %q (%s), want %q", tc.name, v.Verdict, v.Reason, tc.want)
		}
	}
}
