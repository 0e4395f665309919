package server

import (
	"encoding/json"
	"os"
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
