package server

import (
	"context"
	"net/url"
	"testing"

	"github.com/hotcount/hotcount"
)

// FuzzIncr sends arbitrary keys and bodies to the increment endpoint of a
// server over the real embedded Client: the answer is always a documented
// status with a JSON body, never a 500, and the counter changes exactly
// when the answer is 200.
func FuzzIncr(f *testing.F) {
	for _, seed := range [][2]string{
		{"k", `{"by":1}`}, {"k", ``}, {"k", `{"by":-3,"id":"x"}`}, {"{k}", `{}`}, {"k\x00", `{"by":1}`},
		{"k", `{"by":1e2}`}, {"k", `{"by":9223372036854775807}`}, {"k", `null`}, {"k", `{"by":1}{}`}, {"日本", `{"by":2}`},
	} {
		f.Add(seed[0], seed[1])
	}
	s, c := newTestServer(f, nil, Config{})
	f.Fuzz(func(t *testing.T, key, body string) {
		valid := validKey(key)
		if valid { // start from 0, so that no sum can overflow
			if err := c.Clear(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}
		before := int64(0)
		r := call(t, s, "POST", "/v1/counters/"+url.PathEscape(key)+"/incr", body)
		switch r.status {
		case 200, 400, 409, 413, 501:
		case 404, 405: // a key with "/" names another route
			return
		default:
			t.Fatalf("key %q body %q: status %d %s", key, body, r.status, r.raw)
		}
		if r.body == nil {
			t.Fatalf("no JSON answer: %q", r.raw)
		}
		if valid {
			if after := value(t, c, key); (after != before) != (r.status == 200) {
				t.Fatalf("key %q body %q: status %d but value %d -> %d", key, body, r.status, before, after)
			}
		}
	})
}

func validKey(k string) bool { return hotcount.ValidateKey(k) == nil }
