package testenv

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// errorsTB records what CheckJSONError reports instead of failing.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// TestCheckJSONError: a JSON error with the status and Allow asked for
// passes; a plain-text body, another status or another Allow is reported.
func TestCheckJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprintln(w, `{"error": "method POST not allowed"}`)
		case "/empty":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"error": ""}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path  string
		code  int
		allow string
		ok    bool
	}{
		{"/json", 405, "GET, HEAD", true},
		{"/json", 404, "GET, HEAD", false},
		{"/json", 405, "", false},
		{"/empty", 404, "", false},
		{"/text", 404, "", false},
	} {
		req, err := http.NewRequest("POST", srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := &errorsTB{TB: t}
		CheckJSONError(rec, nil, req, tc.code, tc.allow)
		if ok := len(rec.errs) == 0; ok != tc.ok {
			t.Errorf("%s want %d Allow %q: reported %q, want passed %v", tc.path, tc.code, tc.allow, rec.errs, tc.ok)
		}
	}
}
