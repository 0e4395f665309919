package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// runCLI runs the command line in-process and returns its exit status and
// output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCounterCommandsUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no command", nil, exitUsage},
		{"unknown command", []string{"frobnicate"}, exitUsage},
		{"incr without key", []string{"incr"}, exitUsage},
		{"incr zero", []string{"incr", "--key", "a", "--by", "0"}, exitUsage},
		{"incr bad by", []string{"incr", "--key", "a", "--by", "x"}, exitUsage},
		{"incr overflowing by", []string{"incr", "--key", "a", "--by", "9223372036854775808"}, exitUsage},
		{"incr brace key", []string{"incr", "--key", "a{b}"}, exitUsage},
		{"incr control key", []string{"incr", "--key", "a\tb"}, exitUsage},
		{"incr long key", []string{"incr", "--key", strings.Repeat("x", 513)}, exitUsage},
		{"incr bad n", []string{"incr", "--key", "a", "--n", "0"}, exitUsage},
		{"incr unknown flag", []string{"incr", "--key", "a", "--nope"}, exitUsage},
		{"incr stray argument", []string{"incr", "--key", "a", "extra"}, exitUsage},
		{"get without key", []string{"get"}, exitUsage},
		{"get bad redis", []string{"get", "--key", "a", "--redis", "nohost"}, exitUsage},
		{"incr empty redis", []string{"incr", "--key", "a", "--redis", ""}, exitUsage},
		{"get empty server", []string{"get", "--key", "a", "--server", ""}, exitUsage},
		{"resize empty redis", []string{"resize", "--key", "a", "--n", "2", "--redis", ","}, exitUsage},
		{"shards rebalance through a server", []string{"shards", "--key", "a", "--server", "http://127.0.0.1:1", "--rebalance"}, exitUsage},
		{"shards rebalance through the default server", []string{"shards", "--key", "a", "--rebalance"}, exitUsage},
		{"get --redis-tls without --redis", []string{"get", "--key", "a", "--redis-tls"}, exitUsage},
		{"incr ok", []string{"incr", "--key", "a", "--by", "3"}, exitOK},
		{"get ok", []string{"get", "--key", "a"}, exitOK},
		{"help", []string{"help"}, exitOK},
		{"incr help", []string{"incr", "--help"}, exitOK},
		{"version", []string{"version"}, exitOK},
	}
	clearBackendEnv(t)
	t.Setenv(envServer, startTestServer(t))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			if code == exitUsage && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("usage error is not one line: %q", stderr)
			}
		})
	}
}

// TestIncrPastTheBoundRefusedFirst: an increment past the sub-counter
// bound is a usage error found before anything is reached (exit 2, no
// server asked), so that with --n it does not create the counter it would
// then fail to increment.
func TestIncrPastTheBoundRefusedFirst(t *testing.T) {
	clearBackendEnv(t)
	for _, by := range []string{"9007199254740992", "-9007199254740992"} {
		code, out, errOut := runCLI("incr", "--server", "http://127.0.0.1:1", "--key", "fresh", "--by", by, "--n", "4")
		if code != exitUsage || out != "" || !strings.Contains(errOut, "sub-counter bound") || strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("incr --by %s: exit %d, stdout %q, stderr %q; want exit 2 naming the sub-counter bound, no server reached", by, code, out, errOut)
		}
	}
	if code, _, errOut := runCLI("incr", "--server", "http://127.0.0.1:1", "--key", "fresh", "--by", "9007199254740991"); code != exitFailure {
		t.Errorf("incr --by 2^53-1: exit %d (%q), want 1: the bound itself is allowed, and no server answers", code, errOut)
	}
}

func TestGetJSON(t *testing.T) {
	clearBackendEnv(t)
	t.Setenv(envServer, startTestServer(t))
	code, out, stderr := runCLI("get", "--key", "likes:post:1", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v struct {
		Key     string `json:"key"`
		Value   *int64 `json:"value"`
		StaleMS *int64 `json:"stale_ms"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Key != "likes:post:1" || v.Value == nil || v.StaleMS == nil {
		t.Fatalf("JSON %q: %+v %v", out, v, err)
	}
}
