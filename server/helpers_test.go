package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// newClient returns a real embedded Client without a read cache (every Get
// reads the sub-counters) and a namespace "one:" with a single sub-counter.
func newClient(t testing.TB) *hotcount.Client {
	t.Helper()
	c, err := hotcount.New(context.Background(), hotcount.Config{
		// resizes wait this out
		Defaults:   hotcount.Namespace{NoColdStart: true},
		Namespaces: []hotcount.Namespace{{Prefix: "one:", N: 1}, {Prefix: "cold:"}},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Meta:       hotcount.MetaConfig{TTL: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// quietLogger discards log output, but fails nothing: tests that expect a
// logged panic check metrics instead.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newTestServer returns a Server over backend (a real embedded Client when
// nil) with cfg's other fields.
func newTestServer(t testing.TB, backend Backend, cfg Config) (*Server, *hotcount.Client) {
	t.Helper()
	var c *hotcount.Client
	switch b := backend.(type) {
	case nil:
		c = newClient(t)
		backend = c
	case *hotcount.Client:
		c = b
	case *fake:
		c = b.Client
	}
	cfg.Client = backend
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// call performs one request against h and returns status, headers and the
// decoded JSON body (nil when the body is not JSON).
type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func call(t testing.TB, h http.Handler, method, target, body string, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := reply{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&out.body); err != nil {
			t.Fatalf("%s %s: bad JSON answer %q: %v", method, target, rec.Body.String(), err)
		}
	}
	return out
}

// value reads key straight from the Client.
func value(t testing.TB, c *hotcount.Client, key string) int64 {
	t.Helper()
	r, err := c.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r.Value
}

// fake wraps a real embedded Client and changes the answers of Incr and
// Get, for tests of error paths.
type fake struct {
	*hotcount.Client
	incr func(ctx context.Context, key string, delta int64) error
	get  func(ctx context.Context, key string) (hotcount.Reading, error)
}

// newFake returns a fake over a fresh embedded Client.
func newFake(t testing.TB) *fake { return &fake{Client: newClient(t)} }

func (f *fake) Incr(ctx context.Context, key string, delta int64) error {
	if f.incr != nil {
		return f.incr(ctx, key, delta)
	}
	return f.Client.Incr(ctx, key, delta)
}

func (f *fake) Get(ctx context.Context, key string) (hotcount.Reading, error) {
	if f.get != nil {
		return f.get(ctx, key)
	}
	return f.Client.Get(ctx, key)
}

func (f *fake) GetMulti(ctx context.Context, keys []string) (map[string]hotcount.Reading, error) {
	out := map[string]hotcount.Reading{}
	for _, k := range keys {
		r, err := f.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, nil
}
