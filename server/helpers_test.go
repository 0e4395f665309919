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
		NoReadCache: true,
		MetaTTL:     10 * time.Millisecond, // resizes wait this out
		Namespaces:  []hotcount.Namespace{{Prefix: "one:", N: 1}},
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
func newTestServer(t testing.TB, backend Counters, cfg Config) (*Server, *hotcount.Client) {
	t.Helper()
	var c *hotcount.Client
	if backend == nil {
		c = newClient(t)
		backend = NewClientBackend(c, nil)
	}
	cfg.Backend = backend
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

// fake is a configurable backend for tests of error paths and optional
// capabilities.
type fake struct {
	incr   func(ctx context.Context, key string, delta int64) error
	get    func(ctx context.Context, key string) (hotcount.Reading, error)
	incrID func(ctx context.Context, key string, delta int64, id string) error
}

func (f *fake) Incr(ctx context.Context, key string, delta int64) error {
	if f.incr != nil {
		return f.incr(ctx, key, delta)
	}
	return nil
}

func (f *fake) Get(ctx context.Context, key string) (hotcount.Reading, error) {
	if f.get != nil {
		return f.get(ctx, key)
	}
	return hotcount.Reading{Key: key}, nil
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

func (f *fake) Clear(ctx context.Context, key string) error { return nil }

// fakeFull adds every optional capability to fake.
type fakeFull struct {
	fake
	ids     map[string]bool
	total   int64
	resized int
	mode    string
}

func (f *fakeFull) IncrID(ctx context.Context, key string, delta int64, id string) error {
	if !f.ids[id] {
		f.ids[id] = true
		f.total += delta
	}
	return nil
}

func (f *fakeFull) GetExact(ctx context.Context, key string) (hotcount.Reading, error) {
	return hotcount.Reading{Key: key, Value: f.total, N: 4}, nil
}

func (f *fakeFull) Mode(string) string { return f.mode }

func (f *fakeFull) Resize(ctx context.Context, key string, n int) error {
	f.resized = n
	return nil
}

func (f *fakeFull) HotKeys(n int) []HotKey { return []HotKey{{Key: "from-backend", Rate: 7, N: 3}} }

func (f *fakeFull) NodeRates() []NodeRate { return []NodeRate{{Node: "n1", Rate: 2.5}} }
