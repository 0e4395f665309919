package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenSettings: tokens come from the file (inline, from a file, from
// the environment), token_file, or the single token; bad ones are named
// in the error.
func TestTokenSettings(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "writer")
	os.WriteFile(secret, []byte("w-secret\n"), 0o600)
	single := filepath.Join(dir, "single")
	os.WriteFile(single, []byte("s-secret\n"), 0o600)
	file := writeFile(t, `
tokens:
  - {name: reader, token: r-secret, scopes: [read]}
  - {name: writer, token_file: `+secret+`, scopes: [write], prefixes: ["likes:"]}
  - {name: ops, token_env: HC_TEST_OPS, scopes: [admin, metrics]}
`)
	c, err := loadConfig(map[string]string{"config": file, "token_file": single}, env(map[string]string{}))
	if err == nil {
		t.Fatalf("token_env of an unset variable accepted: %+v", c.tokens)
	}
	t.Setenv("HC_TEST_OPS", "o-secret")
	c, err = loadConfig(map[string]string{"config": file, "token_file": single}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != "s-secret" || len(c.tokens) != 3 || c.tokens[1].Secret != "w-secret" || c.tokens[1].Prefixes[0] != "likes:" || c.tokens[2].Secret != "o-secret" {
		t.Fatalf("tokens %+v, single %q", c.tokens, c.Token)
	}
	for _, tc := range []struct {
		name  string
		flags map[string]string
		file  string
		want  string
	}{
		{"token and token_file", map[string]string{"token": "a", "token_file": single}, "", "exclude each other"},
		{"missing token_file", map[string]string{"token_file": filepath.Join(dir, "nope")}, "", "token_file"},
		{"two secrets", nil, "tokens: [{name: a, token: x, token_file: " + secret + ", scopes: [read]}]", "exactly one"},
		{"no secret", nil, "tokens: [{name: a, scopes: [read]}]", "exactly one"},
		{"unknown scope", nil, "tokens: [{name: a, token: x, scopes: [root]}]", "unknown scope"},
		{"no scopes", nil, "tokens: [{name: a, token: x}]", "no scopes"},
		{"same secret twice", nil, "tokens: [{name: a, token: x, scopes: [read]}, {name: b, token: x, scopes: [write]}]", "same secret"},
		{"unknown token field", nil, "tokens: [{name: a, token: x, scopes: [read], scope: admin}]", "scope"},
		{"bad log format", map[string]string{"log_format": "xml"}, "", "log_format"},
		{"bad bool", map[string]string{"access_log": "yes please"}, "", "access_log"},
		{"cert without key", map[string]string{"tls_cert": secret}, "", "tls_key"},
		{"bad cert", map[string]string{"tls_cert": secret, "tls_key": secret}, "", "tls_cert"},
		{"redis login without redis", map[string]string{"redis_username": "u", "redis_password": "p"}, "", "need redis"},
		{"user without password", map[string]string{"redis": "127.0.0.1:6379", "redis_username": "u"}, "", "needs a password"},
		{"bad CA", map[string]string{"redis": "127.0.0.1:6379", "redis_tls_ca": secret}, "", "no PEM certificate"},
		{"password twice", map[string]string{"redis": "127.0.0.1:6379", "redis_password": "p", "redis_password_file": secret}, "", "exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := map[string]string{}
			for k, v := range tc.flags {
				flags[k] = v
			}
			if tc.file != "" {
				flags["config"] = writeFile(t, tc.file)
			}
			_, err := loadConfig(flags, env(nil))
			if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want errInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}

// TestServeScopedTokensAndLogs runs serve with scoped tokens from its file,
// a JSON log and the access log: each token does what its scopes allow,
// every request is logged as one JSON line naming the token but never its
// secret, and the shutdown line says what was drained.
func TestServeScopedTokensAndLogs(t *testing.T) {
	clearServeEnv(t)
	file := writeFile(t, `
tokens:
  - {name: reader, token: r-secret, scopes: [read]}
  - {name: writer, token: w-secret, scopes: [write], prefixes: ["likes:"]}
namespaces:
  - {prefix: "likes:", buffered: true, flush_interval: 1h}
`)
	base, stop := inProcessServe(t, "--config", file, "--log-format", "json", "--access-log")
	do := func(method, path, body, token string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"POST", "/v1/counters/likes:1/incr", `{"by":3}`, "w-secret", 200},
		{"POST", "/v1/counters/views:1/incr", `{"by":3}`, "w-secret", 403},
		{"POST", "/v1/counters/likes:1/incr", `{"by":3}`, "r-secret", 403},
		{"GET", "/v1/counters/likes:1", "", "r-secret", 200},
		{"GET", "/v1/counters/likes:1", "", "", 401},
		{"GET", "/metrics", "", "r-secret", 403},
		{"GET", "/healthz", "", "", 200},
	} {
		if got := do(tc.method, tc.path, tc.body, tc.token); got != tc.want {
			t.Errorf("%s %s with %q: %d, want %d", tc.method, tc.path, tc.token, got, tc.want)
		}
	}
	code, stderr := stop()
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "r-secret") || strings.Contains(stderr, "w-secret") {
		t.Fatalf("a secret is in the log:\n%s", stderr)
	}
	requests := 0
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(line, "hotcount: stopped cleanly") {
			if !strings.Contains(line, "drained 3 buffered increments of 1 keys in 1 cache writes") || !strings.Contains(line, "checkpoint") {
				t.Errorf("shutdown line %q", line)
			}
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		if rec["msg"] == "request" {
			requests++
			if rec["route"] == "POST /v1/counters/{key}/incr" && rec["status"] == float64(200) && rec["token"] != "writer" {
				t.Errorf("access log line %v", rec)
			}
		}
	}
	if requests != 7 || !strings.Contains(stderr, "hotcount: stopped cleanly") {
		t.Fatalf("%d access log lines, want 7:\n%s", requests, stderr)
	}
}
