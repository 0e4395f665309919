package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// referencePath is the configuration reference the schema generates.
const referencePath = "../../docs/configuration.md"

// TestConfigReference fails when docs/configuration.md is not what the
// schema generates. HOTCOUNT_UPDATE_DOCS=1 writes it.
func TestConfigReference(t *testing.T) {
	want := configReference()
	if os.Getenv("HOTCOUNT_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("docs/configuration.md is stale: write it again with HOTCOUNT_UPDATE_DOCS=1 go test -run TestConfigReference ./cmd/hotcount")
	}
	for _, s := range settings {
		if !strings.Contains(want, "`"+s.name+"`") && !s.noFile {
			t.Errorf("setting %s has no line in the reference", s.name)
		}
	}
}

// libPaths are the library fields the schema claims: settings' lib paths
// (Defaults.X for the top-level namespace settings), the namespace fields
// (Namespace.X) and the peer fields (PeerConfig.X).
func libPaths() map[string]bool {
	claimed := map[string]bool{}
	for _, s := range settings {
		if s.lib != "" {
			claimed["Config."+s.lib] = true
		}
	}
	for _, f := range nsFields {
		if f.lib != "" {
			claimed["Namespace."+f.lib] = true
		}
	}
	for _, f := range peerFields {
		if f.lib != "" {
			claimed["PeerConfig."+f.lib] = true
		}
	}
	return claimed
}

// TestLibraryFieldsReachable walks hotcount.Config, hotcount.Namespace and
// hotcount.PeerConfig:
// every field has a setting of the file, or the code-only marker. A new
// field of the library fails it until it gets one of them.
func TestLibraryFieldsReachable(t *testing.T) {
	claimed := libPaths()
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() || codeOnly(f) {
				continue
			}
			p := path + f.Name
			if claimed[p] || notSettings[p] != "" {
				continue
			}
			if f.Type.Kind() == reflect.Struct && strings.HasPrefix(f.Type.PkgPath(), "github.com/hotcount/hotcount") {
				walk(f.Type, p+".")
				continue
			}
			t.Errorf("%s has no setting in cmd/hotcount/schema.go and no `config:\"code\"` marker", p)
		}
	}
	walk(reflect.TypeOf(hotcount.Config{}), "Config.")
	walk(reflect.TypeOf(hotcount.Namespace{}), "Namespace.")
	walk(reflect.TypeOf(hotcount.PeerConfig{}), "PeerConfig.") // the elements of Config.Peers
	ref := configReference()
	for _, p := range codeOnlyFields() {
		if !strings.Contains(ref, "`"+p+"`") {
			t.Errorf("the reference does not list the code-only field %s", p)
		}
	}
}

// TestEverySettingReachesTheLibrary sets each setting that claims a field
// of the library through its environment variable and checks that the
// field of the Client's Config changed: a claim without an effect fails.
func TestEverySettingReachesTheLibrary(t *testing.T) {
	samples := map[string]string{"int": "7", "float": "123.5", "duration": "3s", "bool": "true", "fast or durable": "durable", "string": "x"}
	for _, s := range settings {
		if s.lib == "" || s.fileOnly || strings.HasPrefix(s.lib, "Redis.") {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			v, ok := samples[s.typ]
			for _, c := range s.choices {
				if !ok && c != s.def { // a choice other than the default
					v, ok = c, true
				}
			}
			if !ok {
				t.Fatalf("no sample value for type %q", s.typ)
			}
			if s.invert || s.def == "true" {
				v = "false"
			}
			e := map[string]string{s.env(): v}
			if s.lib == "Durability.RollupAge" {
				e[s.env()] = "20m" // past the library's lower bound
			}
			if s.lib == "Region" || s.lib == "ShipInterval" || s.lib == "RegionRetention" {
				// Regions need Redis, and ship_interval and
				// region_retention a region.
				e[envName(setRedis)] = "10.0.0.1:7000"
				if s.lib == "Region" {
					e[s.env()] = "eu"
				} else {
					e[envName(setRegion)] = "eu"
				}
			}
			cfg, err := loadConfig(nil, env(e))
			if err != nil {
				t.Fatal(err)
			}
			hc := clientConfig(cfg, plannedStore{})
			f := libField(reflect.ValueOf(hc), s.lib)
			if f.IsZero() {
				t.Fatalf("%s=%s left Config.%s at its zero value", s.env(), v, s.lib)
			}
		})
	}
}

// TestFileKeys: unknown keys get the nearest known one; a key of the other
// command is refused, naming it; the proxy refuses tokens.
func TestFileKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  cmdSet
		body string
		want string
	}{
		{"typo in a namespace", cmdServe, "namespaces:\n  - {prefix: \"a:\", bufferd: true}\n", `namespaces[0]: unknown key "bufferd" (did you mean "buffered"?)`},
		{"typo at the top", cmdServe, "lisen: 127.0.0.1:1\n", `unknown key "lisen" (did you mean "listen"?)`},
		{"typo in auto_n", cmdServe, "auto_n: {budgte: 5}\n", `auto_n: unknown key "budgte" (did you mean "budget"?)`},
		{"typo in a token", cmdServe, "tokens: [{name: a, token: b, scope: [read]}]\n", `did you mean "scopes"?`},
		{"nothing near", cmdServe, "zzzzzzzz: 1\n", `unknown key "zzzzzzzz"`},
		{"proxy key in serve", cmdServe, "resp_listen: 127.0.0.1:6380\n", "resp_listen is a setting of hotcount proxy"},
		{"reply in serve", cmdServe, "namespaces: [{prefix: a, reply: exact}]\n", "reply is a setting of hotcount proxy"},
		{"listen in proxy", cmdProxy, "listen: 127.0.0.1:7070\n", "listen is a setting of hotcount serve"},
		{"dashboard in proxy", cmdProxy, "dashboard: false\n", "dashboard is a setting of hotcount serve, not of hotcount proxy"},
		{"config in the file", cmdServe, "config: other.yaml\n", `unknown key "config"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := map[string]string{setFile: writeFile(t, tc.body)}
			if tc.cmd == cmdProxy {
				flags[setRedis] = "127.0.0.1:1"
			}
			_, err := loadConfigFor(tc.cmd, flags, env(nil))
			if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
		})
	}
	if near := nearest("bufferd", []string{"prefix", "buffered", "n"}); near != "buffered" {
		t.Fatalf("nearest(bufferd) = %q", near)
	}
}

// TestMessagesNameFlagsAsTyped runs serve with bad flags: the message
// names the flag with dashes, as the user typed it.
func TestMessagesNameFlagsAsTyped(t *testing.T) {
	clearServeEnv(t)
	dir := t.TempDir()
	pem := filepath.Join(dir, "x.pem")
	os.WriteFile(pem, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "xml"}, "(from flag --log-format)"},
		{[]string{"--tls-cert", pem, "--tls-key", pem}, "(from flag --tls-cert)"},
		{[]string{"--token-file", filepath.Join(dir, "none")}, "(from flag --token-file)"},
		{[]string{"--redis", "127.0.0.1:1", "--redis-password-file", filepath.Join(dir, "none")}, "redis_password_file from flag --redis-password-file"},
		{[]string{"--auto-n-budget", "many"}, "(from flag --auto-n-budget)"},
	} {
		var out, errb bytes.Buffer
		code := runServe(context.Background(), tc.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) || strings.Contains(errb.String(), "--log_format") {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestSettingsFromEverySource: a namespace's ttl from the file reaches the
// library; automatic N and the top-level namespace settings come from the
// environment and flags too.
func TestSettingsFromEverySource(t *testing.T) {
	file := writeFile(t, "namespaces:\n  - {prefix: \"session:\", ttl: 48h, cold_start: false, hot_rate: 50}\nauto_n: {max_n: 32}\n")
	cfg, err := loadConfig(map[string]string{setFile: file, "ttl": "1h"}, env(map[string]string{"HOTCOUNT_AUTO_N_BUDGET": "20000", "HOTCOUNT_N": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	hc := clientConfig(cfg, plannedStore{})
	ns := hc.Namespaces[0]
	if ns.TTL != 48*time.Hour || !ns.NoColdStart || ns.HotRate != 50 {
		t.Fatalf("namespace %+v", ns)
	}
	if hc.Defaults.TTL != time.Hour || hc.Defaults.N != 4 || cfg.Sources["ttl"] != "flag --ttl" || cfg.Sources["n"] != "env HOTCOUNT_N" {
		t.Fatalf("defaults %+v, sources %v", hc.Defaults, cfg.Sources)
	}
	if !hc.AutoN.Enabled || hc.AutoN.Budget != 20000 || hc.AutoN.MaxN != 32 {
		t.Fatalf("auto_n %+v", hc.AutoN)
	}
	off, err := loadConfig(nil, env(map[string]string{"HOTCOUNT_AUTO_N_BUDGET": "20000", "HOTCOUNT_AUTO_N_ENABLED": "false"}))
	if err != nil {
		t.Fatal(err)
	}
	if clientConfig(off, plannedStore{}).AutoN.Enabled {
		t.Fatal("auto_n.enabled false left automatic N on")
	}
}

// TestReferenceExample: the example file of the reference uses only keys
// of serve.
func TestReferenceExample(t *testing.T) {
	ref := configReference()
	start := strings.Index(ref, "```yaml\n")
	end := strings.Index(ref[start:], "```\n\n")
	if start < 0 || end < 0 {
		t.Fatal("no example in the reference")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(ref[start+len("```yaml\n"):start+end]), &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := checkFileKeys(&doc, cmdServe); err != nil {
		t.Fatal(err)
	}
}

// TestProxyAdminTokens: the tokens of the proxy's file guard its admin
// port as they guard serve: /metrics needs the metrics (or admin) scope,
// the dashboard's routes their scopes; /healthz stays open. (The proxy
// accepted tokens and ignored them: every route answered anyone.)
func TestProxyAdminTokens(t *testing.T) {
	clearServeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	conf := writeFile(t, `namespaces: [{prefix: "px:"}]
tokens:
  - {name: scrape, token: scrape-secret, scopes: [metrics]}
  - {name: ops, token: ops-secret, scopes: [read, admin]}
`)
	_, admin, stop := inProcessProxy(t, "--redis", n.Addr, "--config", conf, "--admin-listen", "127.0.0.1:0")
	defer stop()
	if admin == "" {
		t.Fatal("the proxy did not say where its admin port is")
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "wrong", http.StatusUnauthorized},
		{"/metrics", "scrape-secret", http.StatusOK},
		{"/metrics", "ops-secret", http.StatusOK},
		{"/v1/stats", "", http.StatusUnauthorized},
		{"/v1/stats", "scrape-secret", http.StatusForbidden},
		{"/v1/stats", "ops-secret", http.StatusOK},
		{"/v1/hotkeys", "", http.StatusUnauthorized},
		{"/healthz", "", http.StatusOK},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", admin+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with token %q: %d %s, want %d", tc.path, tc.token, resp.StatusCode, body, tc.want)
		}
		if tc.path == "/metrics" && resp.StatusCode == http.StatusOK && !strings.Contains(string(body), "hotcount_proxy_") {
			t.Errorf("GET /metrics: no hotcount_proxy_ series")
		}
	}
}

// TestFlagsOfTheOtherCommand: a flag of the proxy given to serve names the
// proxy, a typo names the nearest flag, a negative value is a value.
func TestFlagsOfTheOtherCommand(t *testing.T) {
	clearServeEnv(t)
	for _, tc := range []struct {
		proxy bool
		args  []string
		want  string
	}{
		{false, []string{"--resp-listen", "127.0.0.1:6380"}, "--resp-listen is a setting of hotcount proxy, not of hotcount serve"},
		{true, []string{"--redis", "127.0.0.1:1", "--listen=127.0.0.1:1"}, "--listen is a setting of hotcount serve, not of hotcount proxy"},
		{false, []string{"--log-formt", "json"}, "unknown flag --log-formt (did you mean --log-format?)"},
		{false, []string{"--heal-interval", "-1s", "--mode", "slow"}, "mode (from flag --mode): must be fast or durable"},
	} {
		var out, errb bytes.Buffer
		run := runServe
		if tc.proxy {
			run = runProxy
		}
		if code := run(context.Background(), tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestEnvTypos: a HOTCOUNT_* variable one typo away from a setting's is
// named with the setting's, one of a setting only the file holds is said
// to be ignored; the others (the counter commands' own, the tests') and
// empty ones are not named.
func TestEnvTypos(t *testing.T) {
	got := envTypos([]string{
		"HOTCOUNT_BUFFERD=true", "HOTCOUNT_LOG_FORMT=json", "HOTCOUNT_LISTEN=x", "HOTCOUNT_AUTO_N_BUDGT=5",
		"HOTCOUNT_SERVER=http://x", "HOTCOUNT_CLIENT_TOKEN=t", "HOTCOUNT_TEST_POSTGRES=u", "HOTCOUNT_UPDATE_DOCS=1",
		"HOTCOUNT_REDOCLY=r", "HOTCOUNT_BENCH_PROXY_PROCS=1", "HOTCOUNT_SOAK_EXPIRE=1", "HOTCOUNT_REGIONS_MEASURE=1",
		"HOTCOUNT_TEST_FULL=1", "PATH=/bin", "HOTCOUNT_PEERS=x",
		// Set but empty, as a script clearing the settings leaves them.
		"HOTCOUNT_NAMESPACES=", "HOTCOUNT_BUFERED=",
	})
	want := []string{
		"HOTCOUNT_AUTO_N_BUDGT is not a setting and is ignored (did you mean HOTCOUNT_AUTO_N_BUDGET?)",
		"HOTCOUNT_BUFFERD is not a setting and is ignored (did you mean HOTCOUNT_BUFFERED?)",
		"HOTCOUNT_LOG_FORMT is not a setting and is ignored (did you mean HOTCOUNT_LOG_FORMAT?)",
		"HOTCOUNT_PEERS is ignored: peers is set only in the config file",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSchemaDefaultsApplied: a setting of the command itself (not a field
// of the library's Config, whose defaults the library applies) left out
// of every source loads as the default the schema shows in the reference
// and the flag help; a default written twice, once in the schema and once
// where the loader applies it, cannot drift apart.
func TestSchemaDefaultsApplied(t *testing.T) {
	// The proxy's input limits load as 0 and the proxy applies its
	// defaults, the constants the schema shows.
	appliedByProxy := map[string]bool{setRESPMaxBulk: true, setRESPQueryBuf: true, setRESPBudget: true}
	checked := 0
	for _, s := range settings {
		if s.lib != "" || s.def == "" || s.fileOnly || appliedByProxy[s.name] {
			continue
		}
		for _, cmd := range []cmdSet{cmdServe, cmdProxy} {
			if s.cmds&cmd == 0 || (cmd == cmdProxy && s.name == setData) {
				continue // the proxy has no data folder unless given one
			}
			flags := map[string]string{}
			if cmd == cmdProxy {
				flags[setRedis] = "127.0.0.1:1"
			}
			c, err := loadConfigFor(cmd, flags, env(nil))
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			var got string
			switch p := s.ptr(&c).(type) {
			case *string:
				got = *p
			case *bool:
				got = strconv.FormatBool(*p)
			case **bool:
				got = "<unset>"
				if *p != nil {
					got = strconv.FormatBool(**p)
				}
			case *int:
				got = strconv.Itoa(*p)
			case **int:
				got = "<unset>"
				if *p != nil {
					got = strconv.Itoa(**p)
				}
			case *int64:
				got = strconv.FormatInt(*p, 10)
			default:
				t.Errorf("%s: no comparison for %T", s.name, p)
				continue
			}
			checked++
			if got != s.def && !(got == "<unset>" && (s.def == "false" || s.def == "true")) {
				t.Errorf("hotcount %s: %s loads as %s with nothing given; the schema shows the default %s", cmd, s.name, got, s.def)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d defaults", checked)
	}
}
