package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// CheckJSONError sends req with c (http.DefaultClient when nil) and
// reports with t.Errorf an answer that is not the error serve and the
// proxy's admin port give: status code, Content-Type application/json,
// a body {"error": "..."} with a message, and the Allow header allow (""
// for none). It fails t at once if the request cannot be sent. It
// returns the answer, its body read and closed, and the body.
func CheckJSONError(t testing.TB, c *http.Client, req *http.Request, code int, allow string) (*http.Response, []byte) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m map[string]string
	if resp.StatusCode != code || resp.Header.Get("Content-Type") != "application/json" ||
		json.Unmarshal(b, &m) != nil || m["error"] == "" || resp.Header.Get("Allow") != allow {
		t.Errorf("%s %s: %d %q Allow %q %q; want %d, a JSON error, Allow %q",
			req.Method, req.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), b, code, allow)
	}
	return resp, b
}
