package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hotcount/hotcount"
)

// TestCommandsAgainstServer runs incr, get, shards and resize with
// --server against a real `hotcount serve` process on the embedded default.
func TestCommandsAgainstServer(t *testing.T) {
	bin := buildBinary(t)
	cmd, base, _ := startBinary(t, bin, "--data", filepath.Join(t.TempDir(), "data"), "--token", "s3cret")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	srv := []string{"--server", base, "--token", "s3cret"}
	for range 4 {
		if code, _, stderr := runCLI(append([]string{"incr", "--key", "likes:post:9", "--by", "5"}, srv...)...); code != exitOK {
			t.Fatalf("incr: exit %d: %s", code, stderr)
		}
	}
	// The single token carries every scope: reads need it too.
	if code, _, stderr := runCLI("get", "--key", "likes:post:9", "--server", base); code != exitUsage || !strings.Contains(stderr, "401") {
		t.Fatalf("get without the token: exit %d %q", code, stderr)
	}
	// $HOTCOUNT_SERVER and $HOTCOUNT_CLIENT_TOKEN stand for --server and --token.
	t.Setenv(envServer, base)
	t.Setenv(envClientToken, "s3cret")
	code, out, stderr := runCLI("get", "--key", "likes:post:9", "--json")
	var got struct {
		Value int64 `json:"value"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Value != 20 {
		t.Fatalf("get: exit %d, %q %s", code, out, stderr)
	}
	if code, _, stderr := runCLI(append([]string{"resize", "--key", "likes:post:9", "--n", "3"}, srv...)...); code != exitOK {
		t.Fatalf("resize: exit %d: %s", code, stderr)
	}
	code, out, stderr = runCLI("shards", "--key", "likes:post:9", "--json")
	var rep hotcount.ShardReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.N != 3 || len(rep.Shards) != 3 || rep.Value != 20 {
		t.Fatalf("shards: exit %d, %q %s", code, out, stderr)
	}
	for _, s := range rep.Shards {
		if !strings.HasPrefix(s.Key, "{likes:post:9#") || s.Node == "" {
			t.Errorf("shard %+v", s)
		}
	}
	// A token from a file; a wrong one is refused by the server: exit 2.
	tf := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tf, []byte("s3cret\n"), 0o600)
	if code, out, stderr := runCLI("get", "--key", "likes:post:9", "--token-file", tf); code != exitOK || strings.TrimSpace(out) != "20" {
		t.Fatalf("--token-file: exit %d %q %s", code, out, stderr)
	}
	t.Setenv(envClientToken, "wrong")
	if code, _, stderr := runCLI("incr", "--key", "likes:post:9", "--server", base); code != exitUsage || !strings.Contains(stderr, "401") {
		t.Fatalf("incr without token: exit %d %q", code, stderr)
	}
	if code, _, _ := runCLI("get", "--key", "k", "--server", "not a url"); code != exitUsage {
		t.Fatalf("bad --server: exit %d", code)
	}
	if code, _, _ := runCLI("get", "--key", "k", "--server", base, "--redis", "127.0.0.1:1"); code != exitUsage {
		t.Fatalf("--server with --redis: exit %d", code)
	}
}
