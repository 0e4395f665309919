package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
)

// apiSchema is the part of an OpenAPI 3.0 schema object the body check
// reads.
type apiSchema struct {
	Ref        string                `json:"$ref"`
	Type       string                `json:"type"`
	Nullable   bool                  `json:"nullable"`
	Enum       []any                 `json:"enum"`
	Properties map[string]*apiSchema `json:"properties"`
	Required   []string              `json:"required"`
	Items      *apiSchema            `json:"items"`
	// AdditionalProperties is a schema, true, false or absent.
	AdditionalProperties json.RawMessage `json:"additionalProperties"`
}

// apiSpec is the part of openapi.json the body check reads.
type apiSpec struct {
	Paths map[string]map[string]struct {
		Responses map[string]apiResponse `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas   map[string]*apiSchema  `json:"schemas"`
		Responses map[string]apiResponse `json:"responses"`
	} `json:"components"`
}

type apiResponse struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema *apiSchema `json:"schema"`
	} `json:"content"`
}

// check returns what in v the schema s does not allow, at path: a member
// the schema does not have (an object with properties and no
// additionalProperties takes no others), a required member missing, a
// value of another type, null where it is not nullable, a value outside
// an enum.
func (sp *apiSpec) check(s *apiSchema, v any, path string) []string {
	if s.Ref != "" {
		return sp.check(sp.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")], v, path)
	}
	if v == nil {
		if s.Nullable || s.Type == "" {
			return nil
		}
		return []string{path + ": null, not nullable"}
	}
	var bad []string
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		bad = append(bad, fmt.Sprintf("%s: %v is not one of %v", path, v, s.Enum))
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(bad, fmt.Sprintf("%s: %T, want an object", path, v))
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				bad = append(bad, path+": required member "+r+" missing")
			}
		}
		var extra *apiSchema
		closed := len(s.Properties) > 0
		switch a := strings.TrimSpace(string(s.AdditionalProperties)); a {
		case "":
		case "false":
			closed = true
		case "true":
			closed = false
		default:
			closed = false
			if err := json.Unmarshal([]byte(a), &extra); err != nil {
				return append(bad, path+": additionalProperties: "+err.Error())
			}
		}
		for k, mv := range obj {
			switch p := s.Properties[k]; {
			case p != nil:
				bad = append(bad, sp.check(p, mv, path+"."+k)...)
			case extra != nil:
				bad = append(bad, sp.check(extra, mv, path+"."+k)...)
			case closed:
				bad = append(bad, path+": member "+k+" is not in the schema")
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return append(bad, fmt.Sprintf("%s: %T, want an array", path, v))
		}
		for i, e := range arr {
			if s.Items != nil {
				bad = append(bad, sp.check(s.Items, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			bad = append(bad, fmt.Sprintf("%s: %T, want a string", path, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad = append(bad, fmt.Sprintf("%s: %T, want a boolean", path, v))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return append(bad, fmt.Sprintf("%s: %T, want a number", path, v))
		}
		if _, err := n.Int64(); err != nil && s.Type == "integer" {
			bad = append(bad, fmt.Sprintf("%s: %s, want an integer", path, n))
		}
	}
	return bad
}

// apiClient is a Client with a fast and a durable namespace on a SQLite
// store, so that exact reads and idempotency ids answer.
func apiClient(t *testing.T) *hotcount.Client {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, err := hotcount.New(ctx, hotcount.Config{
		Namespaces: []hotcount.Namespace{{Prefix: "paid:", Mode: hotcount.ModeDurable}, {Prefix: "views:", Buffered: true}},
		Meta:       hotcount.MetaConfig{TTL: 10 * time.Millisecond},
		Durability: hotcount.DurabilityConfig{Store: db},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return c
}

// TestResponsesMatchOpenAPI sends requests, good and bad, to every API
// route of a server over a real Client and checks each answer against
// openapi.json: the status is one the operation documents, and the JSON
// body has the members of the schema of that status, each of its type,
// and no member the schema leaves out. The documents's routes are checked
// against the server's by TestOpenAPIMatchesRoutes; this checks what they
// answer.
func TestResponsesMatchOpenAPI(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec apiSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, inRegion{apiClient(t)}, Config{Tokens: []Token{
		{Name: "all", Secret: "tok", Scopes: []Scope{ScopeRead, ScopeWrite, ScopeAdmin, ScopeMetrics}},
		{Name: "reader", Secret: "rd", Scopes: []Scope{ScopeRead}, Prefixes: []string{"likes:"}},
	}})
	auth := []string{"Authorization", "Bearer tok"}
	type request struct {
		method, route, target, body string
		noToken                     bool
	}
	// A token that lacks the scope, or a counter outside its prefixes.
	for _, tc := range []request{
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":1}`, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/paid:1", ``, false},
		{"GET", "/v1/stats", "/v1/stats", ``, false},
		{"GET", "/metrics", "/metrics", ``, false},
	} {
		r := call(t, s, tc.method, tc.target, tc.body, "Authorization", "Bearer rd")
		spec.checkAnswer(t, tc.method, tc.route, tc.target+" (reader)", r)
	}
	for _, tc := range []request{
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":3}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", ``, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/views:1/incr", `{"by":2}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"BY":3}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":9007199254740992}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":1,"id":"x"}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/paid:1/incr", `{"by":5,"id":"a1"}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/paid:1/incr", `{"by":6,"id":"a1"}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/made:1/incr", `{"n":3}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/made:1/incr", `{"n":4}`, false},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":1}`, true},
		{"POST", "/v1/counters/{key}/incr", "/v1/counters/likes:1/incr", `{"by":1` + strings.Repeat(" ", 70<<10) + `}`, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/likes:1", ``, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/paid:1?consistency=exact", ``, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/likes:1?consistency=exact", ``, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/likes:1?x=1", ``, false},
		{"GET", "/v1/counters/{key}", "/v1/counters/%2e%2e", ``, false},
		{"POST", "/v1/counters:get", "/v1/counters:get", `{"keys":["likes:1","paid:1","none:1"]}`, false},
		{"POST", "/v1/counters:get", "/v1/counters:get", `{"keys":[]}`, false},
		{"DELETE", "/v1/counters/{key}", "/v1/counters/likes:2", ``, false},
		{"GET", "/v1/counters/{key}/shards", "/v1/counters/likes:1/shards", ``, false},
		{"GET", "/v1/counters/{key}/shards", "/v1/counters/none:1/shards?n=5", ``, false},
		{"GET", "/v1/counters/{key}/shards", "/v1/counters/none:1/shards?n=0", ``, false},
		{"PUT", "/v1/counters/{key}/shards", "/v1/counters/likes:1/shards", `{"n":4}`, false},
		{"PUT", "/v1/counters/{key}/shards", "/v1/counters/likes:1/shards", `{"auto":true}`, false},
		{"PUT", "/v1/counters/{key}/shards", "/v1/counters/likes:1/shards", `{}`, false},
		{"GET", "/v1/counters/{key}/ttl", "/v1/counters/likes:1/ttl", ``, false},
		{"PUT", "/v1/counters/{key}/ttl", "/v1/counters/likes:1/ttl", `{"ttl_ms":100000}`, false},
		{"GET", "/v1/counters/{key}/ttl", "/v1/counters/likes:1/ttl", ``, false},
		{"PUT", "/v1/counters/{key}/ttl", "/v1/counters/likes:1/ttl", `{"ttl_ms":3153600000001}`, false},
		{"DELETE", "/v1/counters/{key}/ttl", "/v1/counters/likes:1/ttl", ``, false},
		{"GET", "/v1/nodes", "/v1/nodes", ``, false},
		{"GET", "/v1/hotkeys", "/v1/hotkeys", ``, false},
		{"GET", "/v1/hotkeys", "/v1/hotkeys?n=101", ``, false},
		{"GET", "/v1/stats", "/v1/stats", ``, false},
		{"GET", "/v1/stats", "/v1/stats", ``, true},
		{"GET", "/healthz", "/healthz", ``, true},
		{"GET", "/readyz", "/readyz", ``, true},
		{"GET", "/v1/openapi.json", "/v1/openapi.json", ``, true},
	} {
		name := tc.method + " " + tc.target
		if len(name) > 80 {
			name = name[:80]
		}
		var hdr []string
		if !tc.noToken {
			hdr = auth
		}
		r := call(t, s, tc.method, tc.target, tc.body, hdr...)
		spec.checkAnswer(t, tc.method, tc.route, name, r)
	}
}

// checkAnswer fails t when the answer r to method on route is a status
// the operation does not document, or a JSON body its schema does not
// allow.
func (sp *apiSpec) checkAnswer(t *testing.T, method, route, name string, r reply) {
	t.Helper()
	op, ok := sp.Paths[route][strings.ToLower(method)]
	if !ok {
		t.Fatalf("openapi.json has no %s %s", method, route)
	}
	resp, ok := op.Responses[fmt.Sprint(r.status)]
	if !ok {
		t.Errorf("%s: %d, which openapi.json does not document for %s %s (%s)", name, r.status, method, route, strings.TrimSpace(r.raw))
		return
	}
	if resp.Ref != "" {
		resp = sp.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
	}
	c, ok := resp.Content["application/json"]
	if !ok || c.Schema == nil {
		return
	}
	if r.body == nil {
		t.Errorf("%s: %d with a body that is not JSON: %q", name, r.status, r.raw)
		return
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(r.raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	for _, b := range sp.check(c.Schema, v, "body") {
		t.Errorf("%s: %d: %s (%s)", name, r.status, b, strings.TrimSpace(r.raw))
	}
}
