package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeKeepsAcknowledgedOnKill: `hotcount serve` on the embedded
// store, SIGKILLed, loses no unbuffered increment it acknowledged, and
// counts nothing twice after a restart (the store's sentinels come back
// with its values, so the checkpoints are not added again): fast counters
// before and after a checkpoint, a sharded one, and a durable one read
// exact.
func TestServeKeepsAcknowledgedOnKill(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	cfg := writeFile(t, "namespaces:\n  - {prefix: \"paid:\", mode: durable}\n")
	args := []string{"--data", data, "--config", cfg, "--checkpoint-interval", "200ms"}
	first, base, _ := startBinary(t, bin, args...)
	incr := func(base, key, body string) {
		t.Helper()
		if code, m := request(t, "POST", base+"/v1/counters/"+key+"/incr", body); code != 200 {
			t.Fatalf("incr %s: %d %v", key, code, m)
		}
	}
	incr(base, "quick:start", `{"by":42}`)
	if code, m := request(t, "PUT", base+"/v1/counters/sharded:1/shards", `{"n":3}`); code != 200 {
		t.Fatalf("resize: %d %v", code, m)
	}
	for range 9 {
		incr(base, "sharded:1", `{"by":1}`)
		incr(base, "paid:1", `{"by":2}`)
	}
	// Let checkpoints run (they would be added again by a restore), then
	// more increments that no checkpoint has.
	time.Sleep(time.Second)
	incr(base, "quick:start", `{"by":8}`)
	incr(base, "sharded:1", `{"by":1}`)
	first.Process.Kill()
	first.Wait()

	second, base, stderr := startBinary(t, bin, args...)
	for key, want := range map[string]int64{"quick:start": 50, "sharded:1": 10, "paid:1": 18} {
		code, m := request(t, "GET", base+"/v1/counters/"+key, "")
		if code != 200 || m["value"] != float64(want) {
			b, _ := json.Marshal(m)
			t.Errorf("%s after SIGKILL and restart: %d %s, want %d", key, code, b, want)
		}
	}
	if code, m := request(t, "GET", base+"/v1/counters/paid:1?consistency=exact", ""); code != 200 || m["value"] != float64(18) {
		t.Errorf("exact read of paid:1 after SIGKILL and restart: %d %v, want 18", code, m)
	}
	stopBinary(t, second, stderr)
}

// TestEmbeddedFsyncSetting: embedded_fsync takes everysec or always, and
// reaches the library.
func TestEmbeddedFsyncSetting(t *testing.T) {
	clearServeEnv(t)
	var out, errb bytes.Buffer
	if code := runServe(context.Background(), []string{"--embedded-fsync", "sometimes"}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "embedded_fsync (from flag --embedded-fsync): must be everysec or always") {
		t.Fatalf("--embedded-fsync sometimes: exit %d, stderr %q", code, errb.String())
	}
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		flags map[string]string
		want  string
	}{
		{map[string]string{"data": data}, ""}, // the library's default: everysec
		{map[string]string{"data": data, "embedded_fsync": "always"}, "always"},
	} {
		cfg, err := loadConfig(tc.flags, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		hc := clientConfig(cfg, nil)
		if hc.Embedded.AOFSync != tc.want || hc.Embedded.AOF != filepath.Join(data, embeddedAOF) {
			t.Errorf("%v: AOF %q, AOFSync %q; want %q", tc.flags, hc.Embedded.AOF, hc.Embedded.AOFSync, tc.want)
		}
	}
}
