package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hotcount.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := loadConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != defaultListen || c.Data != defaultData || c.Mode != defaultMode || c.Postgres != "" || len(c.Redis) != 0 || c.Token != "" {
		t.Fatalf("defaults: %+v", c)
	}
	if !c.Loopback() {
		t.Fatal("default listen is not loopback")
	}
}

// TestPrecedence: flag > env > file > default, setting by setting.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
listen: 127.0.0.1:7001
redis: [10.0.0.1:7000, 10.0.0.2:7000]
mode: durable
token: from-file
namespaces:
  - {prefix: "likes:", mode: durable, n: 16, buffered: true, flush_interval: 250ms, read_cache_ttl: 2s}
  - {prefix: "likes:post:", n: 4}
  - {prefix: "views:", mode: fast}
`)
	e := env(map[string]string{"HOTCOUNT_CONFIG": file, "HOTCOUNT_LISTEN": "127.0.0.1:7002", "HOTCOUNT_TOKEN": "from-env"})
	c, err := loadConfig(map[string]string{"listen": "127.0.0.1:7003"}, e)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7003" || c.Sources[setListen] != "flag --listen" {
		t.Errorf("listen %q from %q", c.Listen, c.Sources[setListen])
	}
	if c.Token != "from-env" || c.Sources[setToken] != "env HOTCOUNT_TOKEN" {
		t.Errorf("token %q from %q", c.Token, c.Sources[setToken])
	}
	if c.Mode != "durable" || !strings.HasPrefix(c.Sources[setMode], "file ") {
		t.Errorf("mode %q from %q", c.Mode, c.Sources[setMode])
	}
	if len(c.Redis) != 2 || c.Redis[1] != "10.0.0.2:7000" {
		t.Errorf("redis %v", c.Redis)
	}
	if c.Data != defaultData || c.Sources[setData] != "default" {
		t.Errorf("data %q from %q", c.Data, c.Sources[setData])
	}
	ns := c.Namespaces[0]
	if len(c.Namespaces) != 3 || ns.N != 16 || ns.Buffered == nil || !*ns.Buffered || ns.FlushInterval != 250*time.Millisecond || ns.ReadCacheTTL != 2*time.Second {
		t.Errorf("namespaces %+v", c.Namespaces)
	}
	for key, want := range map[string]string{"likes:x": "durable", "likes:post:1": "durable", "views:1": "fast", "other": "durable"} {
		if got := c.ModeOf(key); got != want {
			t.Errorf("ModeOf(%q) = %q, want %q", key, got, want)
		}
	}
	// The flag names the file too, and beats the environment's.
	other := writeFile(t, "mode: fast\n")
	c, err = loadConfig(map[string]string{"config": other}, e)
	if err != nil || c.Mode != "fast" || c.Listen != "127.0.0.1:7002" {
		t.Fatalf("--config: %+v %v", c, err)
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags map[string]string
		env   map[string]string
		file  string
		want  string // in the message
	}{
		{"bad mode flag", map[string]string{"mode": "safe"}, nil, "", "mode (from flag --mode)"},
		{"bad mode env", nil, map[string]string{"HOTCOUNT_MODE": "x"}, "", "env HOTCOUNT_MODE"},
		{"listen without port", map[string]string{"listen": "127.0.0.1"}, nil, "", "listen"},
		{"listen port range", map[string]string{"listen": "127.0.0.1:70000"}, nil, "", "port must be"},
		{"bad redis", map[string]string{"redis": "a:1,nohost"}, nil, "", "redis"},
		{"postgres scheme", map[string]string{"postgres": "mysql://x/y"}, nil, "", "postgres"},
		{"postgres and data", map[string]string{"postgres": "postgres://u@h:5432/d", "data": "/tmp/x"}, nil, "", "exclude each other"},
		{"token with space", map[string]string{"token": "a b"}, nil, "", "token"},
		{"unknown field", nil, nil, "listen: 127.0.0.1:1\nlisten_addr: x\n", "listen_addr"},
		{"unknown namespace field", nil, nil, "namespaces:\n  - {prefix: a, size: 3}\n", "size"},
		{"namespace without prefix", nil, nil, "namespaces:\n  - {n: 3}\n", "prefix is required"},
		{"duplicate prefix", nil, nil, "namespaces:\n  - {prefix: a}\n  - {prefix: a}\n", "twice"},
		{"namespace n", nil, nil, "namespaces:\n  - {prefix: a, n: 5000}\n", "N must be"},
		{"namespace mode", nil, nil, "namespaces:\n  - {prefix: a, mode: slow}\n", "mode must be"},
		{"bad duration", nil, nil, "namespaces:\n  - {prefix: a, flush_interval: soon}\n", "soon"},
		{"negative duration", nil, nil, "namespaces:\n  - {prefix: a, read_cache_ttl: -1s}\n", "negative"},
		{"not YAML", nil, nil, "listen: [\n", "hotcount.yaml"},
		{"two documents", nil, nil, "mode: fast\n---\nmode: durable\n", "more than one"},
		{"missing file", map[string]string{"config": "/nonexistent/hc.yaml"}, nil, "", "nonexistent"},
		{"data is a file", map[string]string{"data": "config_test.go"}, nil, "", `data (from flag --data): "config_test.go" is not a folder`},
		{"unknown flag name", map[string]string{"port": "1"}, nil, "", "unknown setting"},
		{"tls_key alone", map[string]string{"tls_key": "/x.pem"}, nil, "", "tls_key (from flag --tls-key): needs tls_cert"},
		{"tls_cert alone", nil, map[string]string{"HOTCOUNT_TLS_CERT": "/x.pem"}, "", "tls_cert (from env HOTCOUNT_TLS_CERT): needs tls_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := map[string]string{}
			for k, v := range tc.flags {
				flags[k] = v
			}
			if tc.file != "" {
				flags["config"] = writeFile(t, tc.file)
			}
			_, err := loadConfig(flags, env(tc.env))
			if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want errInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}

func TestEmptyFileAndLoopback(t *testing.T) {
	c, err := loadConfig(map[string]string{"config": writeFile(t, ""), "listen": "0.0.0.0:0"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Loopback() {
		t.Fatal("0.0.0.0 reported as loopback")
	}
	c.Listen = "[::1]:0"
	if !c.Loopback() {
		t.Fatal("::1 not loopback")
	}
}

// TestProxyKeys: the proxy's own settings, from every source, and the
// per-namespace reply.
func TestProxyKeys(t *testing.T) {
	c, err := loadConfigFor(cmdProxy, nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.RESPListen != defaultRESPListen || c.AdminListen != defaultAdminListen || c.RESPPassword != "" || *c.RESPProcs != defaultRESPProcs {
		t.Fatalf("defaults: %q %q %q %d", c.RESPListen, c.AdminListen, c.RESPPassword, *c.RESPProcs)
	}
	file := writeFile(t, `
resp_listen: 127.0.0.1:6390
admin_listen: "off"
resp_password: from-file
resp_procs: 2
namespaces:
  - {prefix: "likes:", buffered: true, reply: exact}
  - {prefix: "views:", reply: estimate}
`)
	c, err = loadConfigFor(cmdProxy, map[string]string{setFile: file, setRESPListen: "127.0.0.1:6391"}, env(map[string]string{"HOTCOUNT_RESP_PASSWORD": "from-env"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RESPListen != "127.0.0.1:6391" || c.AdminListen != "off" || c.RESPPassword != "from-env" {
		t.Fatalf("got %q %q %q", c.RESPListen, c.AdminListen, c.RESPPassword)
	}
	if *c.RESPProcs != 2 || c.Sources[setRESPProcs] != "file "+file {
		t.Fatalf("resp_procs %d from %q", *c.RESPProcs, c.Sources[setRESPProcs])
	}
	if c2, err := loadConfigFor(cmdProxy, map[string]string{setFile: file}, env(map[string]string{"HOTCOUNT_RESP_PROCS": "0"})); err != nil || *c2.RESPProcs != 0 {
		t.Fatalf("HOTCOUNT_RESP_PROCS=0: %v", err)
	}
	if c.Sources[setAdminListen] != "file "+file || c.Listen != defaultListen {
		t.Fatalf("sources %v, listen %q", c.Sources, c.Listen)
	}
	if c.Namespaces[0].Reply != "exact" || c.Namespaces[1].Reply != "estimate" {
		t.Fatalf("namespaces %+v", c.Namespaces)
	}
	for _, bad := range []struct {
		flags      map[string]string
		body, want string
	}{
		{map[string]string{setRESPListen: "nowhere"}, "", "resp_listen"},
		{map[string]string{setAdminListen: "on"}, "", "admin_listen"},
		{map[string]string{setRESPProcs: "two"}, "", "resp_procs"},
		{map[string]string{setRESPProcs: "-1"}, "", "resp_procs"},
		{nil, "resp_procs: -2", "resp_procs"},
		{nil, "namespaces: [{prefix: a, reply: fresh}]", "reply must be estimate or exact"},
		{nil, "namespaces: [{prefix: a, reply: exact, read_cache_ttl: 1s}]", "read_cache_ttl does not apply"},
	} {
		flags := bad.flags
		if bad.body != "" {
			flags = map[string]string{setFile: writeFile(t, bad.body)}
		}
		_, err := loadConfigFor(cmdProxy, flags, env(nil))
		if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v %q: error %v, want one naming %q", bad.flags, bad.body, err, bad.want)
		}
	}
}

// TestProxyInputBoundsNest: the proxy's input bounds must nest (a bulk
// argument fits one connection's buffer, which fits the budget of all of
// them); a setting that breaks it is a configuration error naming the
// setting and its source, found before anything is reached (it was found
// by the proxy only after connecting to Redis: exit 1, in the library's
// field names).
func TestProxyInputBoundsNest(t *testing.T) {
	for _, tc := range []struct {
		flags map[string]string
		want  string // the setting blamed, "" for none
	}{
		{map[string]string{setRESPQueryBuf: "10"}, "resp_query_buffer_limit (from flag --resp-query-buffer-limit): must be at least resp_max_bulk_len (67108864)"},
		{map[string]string{setRESPQueryBuf: "1048576", setRESPMaxBulk: "1048577"}, "resp_query_buffer_limit (from flag --resp-query-buffer-limit): must be at least resp_max_bulk_len (1048577)"},
		{map[string]string{setRESPBudget: "1000"}, "resp_memory_budget (from flag --resp-memory-budget): must be at least resp_query_buffer_limit (134217728)"},
		{map[string]string{setRESPMaxBulk: "4294967296", setRESPBudget: "8589934592"}, "resp_max_bulk_len (from flag --resp-max-bulk-len): must be at most resp_query_buffer_limit (2147549183)"},
		{map[string]string{setRESPMaxBulk: "1073741824"}, "resp_max_bulk_len (from flag --resp-max-bulk-len): makes the default resp_query_buffer_limit 1073807360"},
		{map[string]string{setRESPQueryBuf: "2000000000"}, "resp_query_buffer_limit (from flag --resp-query-buffer-limit): must be at most resp_memory_budget (1073741824)"},
		{map[string]string{setRESPQueryBuf: "1048576", setRESPMaxBulk: "1048576", setRESPBudget: "1048576"}, ""},
		{map[string]string{setRESPMaxBulk: "200000000"}, ""}, // the buffer's default grows with it
		{map[string]string{}, ""},
	} {
		flags := map[string]string{setRedis: "127.0.0.1:1"}
		for k, v := range tc.flags {
			flags[k] = v
		}
		_, err := loadConfigFor(cmdProxy, flags, env(nil))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want no error", tc.flags, err)
		case tc.want != "" && (!errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want an invalid configuration naming %q", tc.flags, err, tc.want)
		}
	}
}

// TestRESPMaxBulkLenFloor: resp_max_bulk_len below 1 MiB (Redis refuses a
// proto-max-bulk-len below 1mb) made the proxy refuse every command with
// an argument longer than it; it is an invalid configuration from every
// source, naming the source. 0 still takes the default.
func TestRESPMaxBulkLenFloor(t *testing.T) {
	const want = "resp_max_bulk_len (from %s): must be at least 1 MiB (1048576), got %s"
	for _, v := range []string{"1", "1048575"} {
		for _, src := range []struct {
			name        string
			flags, vars map[string]string
		}{
			{"flag --resp-max-bulk-len", map[string]string{setRESPMaxBulk: v}, nil},
			{"env HOTCOUNT_RESP_MAX_BULK_LEN", nil, map[string]string{"HOTCOUNT_RESP_MAX_BULK_LEN": v}},
			{"file", map[string]string{setFile: writeFile(t, "resp_max_bulk_len: "+v+"\n")}, nil},
		} {
			flags := map[string]string{setRedis: "127.0.0.1:1"}
			for k, x := range src.flags {
				flags[k] = x
			}
			_, err := loadConfigFor(cmdProxy, flags, env(src.vars))
			w := fmt.Sprintf(want, src.name, v)
			if src.name == "file" {
				w = fmt.Sprintf(want, "file "+flags[setFile], v)
			}
			if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %v, want an invalid configuration containing %q", src.name, v, err, w)
			}
		}
	}
	for _, v := range []string{"0", "1048576"} {
		if _, err := loadConfigFor(cmdProxy, map[string]string{setRedis: "127.0.0.1:1", setRESPMaxBulk: v}, env(nil)); err != nil {
			t.Errorf("resp_max_bulk_len %s: %v, want no error", v, err)
		}
	}
}
