package server

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// TestOpenAPILimits: the bounds openapi.json gives (a key's length, n,
// an idempotency id's length, the keys of one read, ?n= of /v1/hotkeys,
// by, ttl_ms) are the ones the server and the library enforce, read
// from the constants that enforce them.
func TestOpenAPILimits(t *testing.T) {
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	type bounds struct {
		Minimum   *int64 `json:"minimum"`
		Maximum   *int64 `json:"maximum"`
		MinLength *int64 `json:"minLength"`
		MaxLength *int64 `json:"maxLength"`
		MinItems  *int64 `json:"minItems"`
		MaxItems  *int64 `json:"maxItems"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string `json:"name"`
				In     string `json:"in"`
				Schema bounds `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
		Components struct {
			Parameters map[string]struct {
				Schema bounds `json:"schema"`
			} `json:"parameters"`
			Schemas map[string]struct {
				Properties map[string]bounds `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	query := func(path, name string) bounds {
		for _, p := range doc.Paths[path]["get"].Parameters {
			if p.In == "query" && p.Name == name {
				return p.Schema
			}
		}
		t.Fatalf("openapi.json: GET %s has no query parameter %s", path, name)
		return bounds{}
	}
	prop := func(schema, name string) bounds {
		b, ok := doc.Components.Schemas[schema].Properties[name]
		if !ok {
			t.Fatalf("openapi.json: the schema %s has no member %s", schema, name)
		}
		return b
	}
	val := func(p *int64) any {
		if p == nil {
			return "none"
		}
		return *p
	}
	for _, tc := range []struct {
		what string
		got  *int64
		want int64
	}{
		{"the key parameter's maxLength", doc.Components.Parameters["key"].Schema.MaxLength, keyspace.MaxKeyLen},
		{"the key parameter's minLength", doc.Components.Parameters["key"].Schema.MinLength, 1},
		{"IncrRequest.n maximum", prop("IncrRequest", "n").Maximum, keyspace.MaxN},
		{"ResizeRequest.n maximum", prop("ResizeRequest", "n").Maximum, keyspace.MaxN},
		{"GET …/shards ?n= maximum", query("/v1/counters/{key}/shards", "n").Maximum, keyspace.MaxN},
		{"IncrRequest.id maxLength", prop("IncrRequest", "id").MaxLength, maxIDLen},
		{"IncrRequest.by maximum", prop("IncrRequest", "by").Maximum, hotcount.MaxDelta},
		{"IncrRequest.by minimum", prop("IncrRequest", "by").Minimum, -hotcount.MaxDelta},
		{"MultiRequest.keys maxItems", prop("MultiRequest", "keys").MaxItems, DefaultMaxKeys},
		{"GET /v1/hotkeys ?n= maximum", query("/v1/hotkeys", "n").Maximum, maxHotKeys},
		{"TTLRequest.ttl_ms maximum", prop("TTLRequest", "ttl_ms").Maximum, maxTTLMillis},
	} {
		if tc.got == nil || *tc.got != tc.want {
			t.Errorf("openapi.json: %s is %v; the server enforces %d", tc.what, val(tc.got), tc.want)
		}
	}
}
