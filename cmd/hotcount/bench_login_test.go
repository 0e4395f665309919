package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// passwordCluster starts a Redis Cluster of three primaries whose nodes
// ask for password (set once the cluster is up, as StartSecureNode sets
// it), and writes the password to a file; the cluster stops at the end of
// the test.
func passwordCluster(t *testing.T, ctx context.Context, password string) (*testenv.Cluster, string) {
	t.Helper()
	c, err := testenv.StartCluster(ctx, testenv.ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	for _, n := range c.Nodes() {
		if _, err := testenv.Do(ctx, n.Addr, "CONFIG", "SET", "requirepass", password); err != nil {
			t.Fatal(err)
		}
	}
	passFile := filepath.Join(t.TempDir(), "cluster-pass")
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, passFile
}

// TestBenchSoakRedisPassword runs bench, bench longtail and soak, briefly,
// against a cluster that asks for a password: with the password (from a
// file, or from the environment) each succeeds; without it each fails
// with Redis's NOAUTH in its message.
func TestBenchSoakRedisPassword(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	t.Setenv(envRedisPass, "")
	c, passFile := passwordCluster(t, ctx, "cluster-pass")
	seeds := strings.Join(c.Seeds(), ",")
	benchArgs := []string{"bench", "--redis", seeds, "--key", "login:bench", "--mode", "combined", "--n", "3",
		"--procs", "2", "--duration", "300ms", "--flush", "50ms", "--calibrate", "0s", "--json"}
	soakArgs := []string{"soak", "--redis", seeds, "--duration", "1s", "--interval", "500ms", "--keys", "10", "--json"}
	longArgs := []string{"bench", "longtail", "--redis", seeds, "--keys", "50", "--clients", "2", "--viral-clients", "2",
		"--requests", "200", "--duration", "200ms", "--workloads", "tail,mixed", "--json"}

	t.Run("bench", func(t *testing.T) {
		code, out, errOut := clusterCLI(t, ctx, append(benchArgs, "--redis-password-file", passFile)...)
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var rep benchJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, out)
		}
		if rep.Backend != "redis" || len(rep.Primaries) != 3 || len(rep.Runs) != 1 {
			t.Fatalf("report %+v", rep)
		}
		if r := rep.Runs[0]; r.Exact == nil || !*r.Exact || r.Sent == 0 || len(r.WritesByNode) == 0 {
			t.Fatalf("run %+v", r)
		}
	})
	t.Run("soak, password from the environment", func(t *testing.T) {
		t.Setenv(envRedisPass, "cluster-pass")
		code, out, errOut := clusterCLI(t, ctx, soakArgs...)
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var v soakVerdict
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
			t.Fatal(err)
		}
		if v.Verdict != "stable" || !v.CheckExact || v.Errors != 0 || v.Incrs == 0 || v.Removed != 11 {
			t.Fatalf("verdict %+v", v)
		}
	})
	t.Run("longtail", func(t *testing.T) {
		code, out, errOut := clusterCLI(t, ctx, append(longArgs, "--redis-password-file", passFile)...)
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var rep struct {
			Cases []struct {
				Workload, Path string
				Increments     int64
				Counters       int64
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, out)
		}
		// Each workload on the proxy pair (redis-benchmark straight to
		// the cluster, and through a proxy in the process) and on the
		// library pair.
		var paths []string
		for _, c := range rep.Cases {
			if c.Increments <= 0 || c.Counters <= 0 {
				t.Errorf("case %+v", c)
			}
			paths = append(paths, c.Workload+" "+c.Path)
		}
		want := []string{"tail direct", "tail proxy", "tail library direct", "tail library",
			"mixed direct", "mixed proxy", "mixed library direct", "mixed library"}
		if !slices.Equal(paths, want) {
			t.Fatalf("cases %q, want %q", paths, want)
		}
	})
	// Without the password every command fails, saying why.
	for name, args := range map[string][]string{
		"bench, no password":    benchArgs,
		"soak, no password":     soakArgs,
		"longtail, no password": longArgs,
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := clusterCLI(t, ctx, args...)
			if code != exitFailure || !strings.Contains(errOut, "NOAUTH") {
				t.Fatalf("exit %d, stderr %q; want %d and NOAUTH", code, errOut, exitFailure)
			}
		})
	}
	t.Run("longtail, wrong password for redis-benchmark", func(t *testing.T) {
		// The Go clients log in; redis-benchmark, given a password the
		// nodes refuse, fails, and the message says why without showing
		// the password it was given.
		code, _, errOut := clusterCLI(t, ctx, append(longArgs, "--redis-password-file", passFile, "--paths", "proxy", "--redis-benchmark", wrongPassBenchmark(t))...)
		if code != exitFailure || !strings.Contains(errOut, "WRONGPASS") || strings.Contains(errOut, "cluster-pass") {
			t.Fatalf("exit %d, stderr %q; want %d, WRONGPASS and no password", code, errOut, exitFailure)
		}
	})
}

// wrongPassBenchmark writes a script that runs redis-benchmark with the
// password after -a replaced by a wrong one.
func wrongPassBenchmark(t *testing.T) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "redis-benchmark")
	body := `#!/bin/sh
for a; do
  shift
  if [ "$prev" = "-a" ]; then a=wrong; fi
  set -- "$@" "$a"
  prev=$a
done
exec redis-benchmark "$@"
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestBenchSoakRedisACLAndTLS runs bench and soak, briefly, against a
// standalone Redis that has an ACL user and serves TLS with a CA made for
// the test: with the CA, and with a client certificate, both succeed;
// over TLS without the CA both fail.
func TestBenchSoakRedisACLAndTLS(t *testing.T) {
	ctx, n, passFile := secureNode(t)
	t.Setenv(envRedisPass, "")
	userPass := filepath.Join(t.TempDir(), "user-pass")
	if err := os.WriteFile(userPass, []byte("user-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsCA := []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-password-file", passFile}
	mTLS := []string{"--redis", n.TLSAddr, "--redis-tls-ca", n.Files.CA, "--redis-tls-cert", n.Files.ClientCert,
		"--redis-tls-key", n.Files.ClientKey, "--redis-username", "hc", "--redis-password-file", userPass}
	bench := []string{"bench", "--key", "login:tls", "--mode", "buffered", "--procs", "2", "--duration", "300ms", "--flush", "50ms", "--calibrate", "0s"}
	soak := []string{"soak", "--duration", "1s", "--interval", "500ms", "--keys", "10"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"bench, TLS with the test CA", append(slices.Clone(bench), tlsCA...)},
		{"bench, ACL user and client certificate", append(slices.Clone(bench), mTLS...)},
		{"soak, TLS with the test CA", append(slices.Clone(soak), tlsCA...)},
		{"soak, ACL user and client certificate", append(slices.Clone(soak), mTLS...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := clusterCLI(t, ctx, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
			}
		})
	}
	for _, args := range [][]string{bench, soak} {
		t.Run(args[0]+", TLS without the CA", func(t *testing.T) {
			code, _, errOut := clusterCLI(t, ctx, append(slices.Clone(args), "--redis", n.TLSAddr, "--redis-tls", "--redis-password-file", passFile)...)
			if code != exitFailure || !strings.Contains(errOut, "certificate") {
				t.Fatalf("exit %d, stderr %q; want %d and a certificate error", code, errOut, exitFailure)
			}
		})
	}
}

// TestBenchSoakLoginBadFlags: the login and TLS flags of bench, bench
// longtail and soak refuse what serve and the counter commands refuse,
// with one line and exit code 2, before anything connects.
func TestBenchSoakLoginBadFlags(t *testing.T) {
	dir := t.TempDir()
	passFile := filepath.Join(dir, "pass")
	if err := os.WriteFile(passFile, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envRedisPass, "")
	bench := []string{"bench", "--key", "k", "--mode", "single"}
	longtail := []string{"bench", "longtail"}
	soak := []string{"soak", "--duration", "1s", "--interval", "1s"}
	at := []string{"--redis", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(slices.Clone(bench), "--redis-password-file", passFile), "need --redis"},
		{append(slices.Clone(longtail), "--redis-tls"), "need --redis"},
		{append(slices.Clone(soak), "--redis-username", "hc"), "need --redis"},
		{append(slices.Concat(bench, at), "--redis-username", "hc"), "needs a password"},
		{append(slices.Concat(soak, at), "--redis-password-file", empty), "is empty"},
		{append(slices.Concat(longtail, at), "--redis-tls-cert", passFile), "go together"},
		{append(slices.Concat(bench, at), "--redis-tls-ca", passFile), "no PEM certificate"},
		{append(slices.Concat(soak, at), "--redis-password-file", filepath.Join(dir, "missing")), "no such file"},
		// redis-benchmark drives the proxy path: over TLS it must speak TLS.
		{append(slices.Concat(longtail, at), "--redis-tls", "--redis-benchmark", "true"), "built without TLS"},
	} {
		code, out, errOut := clusterCLI(t, t.Context(), tc.args...)
		lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// The password in the environment does not matter without --redis.
	t.Setenv(envRedisPass, "pw")
	if code, _, errOut := clusterCLI(t, t.Context(), "soak", "--duration", "500ms", "--interval", "500ms", "--keys", "4"); code != exitOK {
		t.Errorf("soak on the embedded store with %s set: exit %d, stderr %q", envRedisPass, code, errOut)
	}
}

// TestBenchmarkTLSArgs: the TLS flags become redis-benchmark's TLS
// arguments, with the same files.
func TestBenchmarkTLSArgs(t *testing.T) {
	for _, tc := range []struct {
		sec  redisSecurity
		want []string
	}{
		{redisSecurity{}, nil},
		{redisSecurity{Username: "u", PasswordFile: "p"}, nil},
		{redisSecurity{TLS: true}, []string{"--tls"}},
		{redisSecurity{CA: "ca.pem"}, []string{"--tls", "--cacert", "ca.pem"}},
		{redisSecurity{CA: "ca.pem", Cert: "c.pem", Key: "k.pem", ServerName: "redis.internal"},
			[]string{"--tls", "--cacert", "ca.pem", "--cert", "c.pem", "--key", "k.pem", "--sni", "redis.internal"}},
	} {
		if got := tc.sec.benchmarkTLS(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.sec, got, tc.want)
		}
	}
}
