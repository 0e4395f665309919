package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes: every operation in openapi.json is served and
// every served route is documented.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("not OpenAPI 3: %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	s, _ := newTestServer(t, newFake(t), Config{})
	served := map[string]bool{}
	for _, pat := range s.Routes() {
		// "GET /{$}" is "/", "{file...}" is "{file}".
		pat = strings.ReplaceAll(strings.ReplaceAll(pat, "{$}", ""), "...}", "}")
		served[pat] = true
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("served but undocumented: %v; documented but not served: %v", missing, extra)
	}
	if r := call(t, s, "GET", "/v1/openapi.json", ""); r.status != 200 || r.raw != string(raw) {
		t.Fatalf("/v1/openapi.json does not serve the file in the repo")
	}
}

// openAPIDoc is the part of openapi.json the tests read.
type openAPIDoc struct {
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Paths map[string]map[string]struct {
		OperationID string                     `json:"operationId"`
		Security    *[]map[string][]string     `json:"security"`
		Scope       string                     `json:"x-hotcount-scope"`
		Responses   map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

// TestOpenAPIOperations: every operation has a unique operationId, a
// security requirement (bearer, or an explicit empty list when public)
// that matches the scope the server enforces, and a 4XX answer; the
// document names its servers.
func TestOpenAPIOperations(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) == 0 || doc.Servers[0].URL == "" {
		t.Error("no servers")
	}
	s, _ := newTestServer(t, newFake(t), Config{})
	scopes := map[string]Scope{}
	for _, rt := range s.table() {
		p := strings.ReplaceAll(strings.ReplaceAll(rt.pattern, "{$}", ""), "...}", "}")
		scopes[p] = rt.scope
	}
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			name := strings.ToUpper(method) + " " + path
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s: operationId %q missing or used twice", name, op.OperationID)
			}
			ids[op.OperationID] = true
			want := scopes[name]
			switch {
			case op.Security == nil:
				t.Errorf("%s: no security", name)
			case want == "" && len(*op.Security) != 0:
				t.Errorf("%s: public on the server, but the document asks for %v", name, *op.Security)
			case want != "" && (len(*op.Security) != 1 || (*op.Security)[0]["bearer"] == nil):
				t.Errorf("%s: needs a token on the server, but the document says %v", name, *op.Security)
			}
			if Scope(op.Scope) != want {
				t.Errorf("%s: x-hotcount-scope %q, the server enforces %q", name, op.Scope, want)
			}
			has4xx := false
			for code := range op.Responses {
				has4xx = has4xx || strings.HasPrefix(code, "4")
			}
			if !has4xx {
				t.Errorf("%s: no 4XX response", name)
			}
			if want != "" && (op.Responses["401"] == nil || op.Responses["403"] == nil) {
				t.Errorf("%s: needs a token but documents no 401 and 403", name)
			}
		}
	}
}

// TestOpenAPILint lints openapi.json with Redocly CLI's recommended-strict
// rules (operationIds, security, servers, 4XX responses, valid 3.0.3 ...).
// scripts/test installs the pinned linter and sets HOTCOUNT_REDOCLY; the
// test fails without it.
func TestOpenAPILint(t *testing.T) {
	bin := os.Getenv("HOTCOUNT_REDOCLY")
	if bin == "" {
		if p, err := exec.LookPath("redocly"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		t.Fatal("redocly not found: run scripts/test (it installs @redocly/cli with npm and sets HOTCOUNT_REDOCLY)")
	}
	cmd := exec.Command(bin, "lint", "--extends", "recommended-strict", "--format", "stylish", "openapi.json")
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}

// TestHTTPAPIDocMatchesOpenAPI: docs/http-api.md names every API route of
// openapi.json and every member of its schemas' objects (`"epoch"`,
// `cleared`), so that a field the server adds is not left out of the
// guide.
func TestHTTPAPIDocMatchesOpenAPI(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	b, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for p, ops := range spec.Paths {
		if !strings.HasPrefix(p, "/v1/") && p != "/metrics" && p != "/healthz" && p != "/readyz" {
			continue // the dashboard's files
		}
		for m := range ops {
			if m == "parameters" {
				continue
			}
			op := strings.ToUpper(m) + " " + p
			if !strings.Contains(doc, "`"+op) && !(m == "get" && strings.Contains(doc, "`"+p+"`")) {
				t.Errorf("docs/http-api.md does not name %s", op)
			}
		}
	}
	var names []string
	for schema, s := range spec.Components.Schemas {
		for prop := range s.Properties {
			names = append(names, schema+"."+prop)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		_, prop, _ := strings.Cut(n, ".")
		member := regexp.MustCompile("(\"" + prop + "\"|`[a-z_.]*\\b" + prop + "\\b[a-z_.]*`)")
		if !member.MatchString(doc) {
			t.Errorf("docs/http-api.md does not name the member %q of the schema %s", prop, n)
		}
	}
}

// TestHTTPAPIDocQueryAndStatus: docs/http-api.md names, for every query
// parameter of openapi.json, each value of its enum (`consistency=cached|exact`)
// and its range (`n`: 1..100), and every status code an operation
// answers.
func TestHTTPAPIDocQueryAndStatus(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	type param struct {
		Name   string `json:"name"`
		In     string `json:"in"`
		Schema struct {
			Enum    []string `json:"enum"`
			Minimum *int     `json:"minimum"`
			Maximum *int     `json:"maximum"`
		} `json:"schema"`
	}
	var spec struct {
		Paths map[string]map[string]struct {
			Parameters []param                    `json:"parameters"`
			Responses  map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	b, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(string(b), `\|`, "|")
	checked := 0
	for p, ops := range spec.Paths {
		for m, op := range ops {
			if m == "parameters" {
				continue
			}
			for _, prm := range op.Parameters {
				if prm.In != "query" {
					continue
				}
				checked++
				for _, v := range prm.Schema.Enum {
					re := regexp.MustCompile(regexp.QuoteMeta(prm.Name) + `=([a-z]+\|)*` + regexp.QuoteMeta(v) + `\b`)
					if !re.MatchString(doc) {
						t.Errorf("docs/http-api.md does not name %s=%s of %s %s", prm.Name, v, strings.ToUpper(m), p)
					}
				}
				if prm.Schema.Minimum != nil && prm.Schema.Maximum != nil {
					want := fmt.Sprintf("`%s`: %d..%d", prm.Name, *prm.Schema.Minimum, *prm.Schema.Maximum)
					if !strings.Contains(doc, want) {
						t.Errorf("docs/http-api.md does not give the range of ?%s= of %s %s (%s)", prm.Name, strings.ToUpper(m), p, want)
					}
				}
			}
			for code := range op.Responses {
				if code == "200" {
					continue
				}
				checked++
				if !regexp.MustCompile(`\b` + code + `\b`).MatchString(doc) {
					t.Errorf("docs/http-api.md does not name the status %s of %s %s", code, strings.ToUpper(m), p)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d parameters and statuses", checked)
	}
}

// TestHTTPAPIDocScopes: the scope column of docs/http-api.md's table is
// the scope the server enforces on each route the row names (the first
// scope of "`metrics` or `admin`"; "public" is none), and every route
// the server serves has a row.
func TestHTTPAPIDocScopes(t *testing.T) {
	b, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, newFake(t), Config{})
	scopes := map[string]Scope{}
	for _, rt := range s.table() {
		p := strings.ReplaceAll(strings.ReplaceAll(rt.pattern, "{$}", ""), "{file...}", "…")
		scopes[p] = rt.scope
	}
	routeSpan := regexp.MustCompile("`(?:(GET|POST|PUT|DELETE) )?(/[^`\\[ ]*)(?:\\[[^`]*\\])?`")
	firstScope := regexp.MustCompile("`([a-z]+)`")
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, `\|`, "¦"), "| "), "|")
		if len(cells) < 4 {
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		want := Scope("")
		if m := firstScope.FindStringSubmatch(cells[len(cells)-1]); m != nil {
			want = Scope(m[1])
		} else if cells[len(cells)-1] != "public" {
			t.Errorf("docs/http-api.md:%d: scope %q is neither a `scope` nor public", i+1, cells[len(cells)-1])
			continue
		}
		method := ""
		for _, m := range routeSpan.FindAllStringSubmatch(cells[0], -1) {
			if m[1] != "" {
				method = m[1]
			}
			route := method + " " + m[2]
			got, ok := scopes[route]
			if !ok {
				t.Errorf("docs/http-api.md:%d: the server has no route %s", i+1, route)
				continue
			}
			seen[route] = true
			if got != want {
				t.Errorf("docs/http-api.md:%d: %s has the scope %q in the doc; the server enforces %q", i+1, route, want, got)
			}
		}
	}
	for r := range scopes {
		if !seen[r] {
			t.Errorf("docs/http-api.md's table has no row for %s", r)
		}
	}
}
