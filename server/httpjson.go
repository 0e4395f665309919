package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/hotcount/hotcount"
)

// httpError is an error with the status to answer it with.
type httpError struct {
	status int
	msg    string
	// challenge, when set, is the WWW-Authenticate header of a 401 or 403.
	challenge string
}

func (e *httpError) Error() string { return e.msg }

// badRequest returns a 400 error.
func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// The error classes counted in hotcount_http_errors_total{class}.
const (
	classBadRequest     = "bad_request"     // 400: bad key, body or parameter
	classNotDurable     = "not_durable"     // 400: an id or exact read on a fast-mode key
	classUnauthorized   = "unauthorized"    // 401: no or unknown token
	classForbidden      = "forbidden"       // 403: a token without the scope or outside its prefixes
	classNotFound       = "not_found"       // 404
	classMethod         = "method"          // 405
	classConflict       = "conflict"        // 409: a concurrent resize
	classIDConflict     = "id_conflict"     // 409: an idempotency id re-sent with another delta
	classOverflow       = "overflow"        // 409: the increment would pass the bound
	classTooLarge       = "too_large"       // 413
	classNotImplemented = "not_implemented" // 501: the backend cannot do this as configured
	classUnavailable    = "unavailable"     // 503: the cache or the durable store did not answer
	classBackpressure   = "backpressure"    // 503: buffered deltas are held and the bound is reached
	classShuttingDown   = "shutting_down"   // 503: draining or closed
	classCancelled      = "cancelled"       // 503: the client went away
	classInternal       = "internal"        // 500: an error nothing else names
	classPanic          = "panic"           // 500: a handler panicked
	classRedirect       = "redirect"        // 3xx from the mux (a path it would clean)
)

// errorClasses lists every class, so that each series exists from the
// start.
var errorClasses = []string{classBadRequest, classNotDurable, classUnauthorized, classForbidden, classNotFound,
	classMethod, classConflict, classIDConflict, classOverflow, classTooLarge, classNotImplemented, classUnavailable,
	classBackpressure, classShuttingDown, classCancelled, classInternal, classPanic, classRedirect}

// statusClass is the class of an answer by its status alone.
func statusClass(code int) string {
	switch code {
	case http.StatusBadRequest:
		return classBadRequest
	case http.StatusUnauthorized:
		return classUnauthorized
	case http.StatusForbidden:
		return classForbidden
	case http.StatusNotFound:
		return classNotFound
	case http.StatusMethodNotAllowed:
		return classMethod
	case http.StatusConflict:
		return classConflict
	case http.StatusRequestEntityTooLarge:
		return classTooLarge
	case http.StatusNotImplemented:
		return classNotImplemented
	case http.StatusServiceUnavailable:
		return classUnavailable
	}
	if code >= 300 && code < 400 {
		return classRedirect
	}
	return classInternal
}

// classify maps an error to a status, a class and a message for the
// client.
func classify(err error) (int, string, string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status, statusClass(he.status), he.msg
	case errors.Is(err, hotcount.ErrNotDurable):
		return http.StatusBadRequest, classNotDurable, err.Error()
	case errors.Is(err, hotcount.ErrInvalidKey), errors.Is(err, hotcount.ErrZeroDelta), errors.Is(err, hotcount.ErrInvalidN):
		return http.StatusBadRequest, classBadRequest, err.Error()
	case errors.Is(err, hotcount.ErrOverflow):
		return http.StatusConflict, classOverflow, err.Error()
	case errors.Is(err, hotcount.ErrConflict), errors.Is(err, hotcount.ErrExists):
		return http.StatusConflict, classConflict, err.Error()
	case errors.Is(err, hotcount.ErrIDConflict):
		return http.StatusConflict, classIDConflict, err.Error()
	case errors.Is(err, hotcount.ErrNoMetadata), errors.Is(err, hotcount.ErrConfig), errors.Is(err, hotcount.ErrNoExpiry):
		// The backend cannot do this as configured (no metadata store, no
		// durable store for durable mode).
		return http.StatusNotImplemented, classNotImplemented, err.Error()
	case errors.Is(err, hotcount.ErrBackpressure):
		return http.StatusServiceUnavailable, classBackpressure, "backend unavailable: " + err.Error()
	case errors.Is(err, hotcount.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, classUnavailable, "backend unavailable: " + err.Error()
	case errors.Is(err, hotcount.ErrClosed), errors.Is(err, hotcount.ErrStoreClosed):
		return http.StatusServiceUnavailable, classShuttingDown, "shutting down"
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, classCancelled, "request cancelled"
	default:
		return http.StatusInternalServerError, classInternal, "internal error"
	}
}

// writeError answers err and counts its class.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, class, msg := classify(err)
	var he *httpError
	switch {
	case code == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()+0.5))))
	case code == http.StatusInternalServerError:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case code == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="hotcount"`)
		if errors.As(err, &he) && he.msg == "unknown bearer token" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hotcount", error="invalid_token"`)
		}
	case code == http.StatusForbidden && errors.As(err, &he) && he.challenge != "":
		w.Header().Set("WWW-Authenticate", he.challenge)
	}
	s.metrics.countError(class)
	writeJSON(w, code, errorBody{Error: msg})
}

// pathKey returns the {key} path segment, unescaped and validated. The
// keys "." and ".." cannot be named in a path, escaped or not: clients,
// proxies and the mux resolve such segments, so the same URL could name
// another route on the way.
func pathKey(r *http.Request) (string, error) {
	key := r.PathValue("key")
	if key == "." || key == ".." {
		return "", badRequest("the counter key %q cannot be used in a path (read it with POST /v1/counters:get)", key)
	}
	if err := hotcount.ValidateKey(key); err != nil {
		return "", badRequest("%v", err)
	}
	return key, nil
}

// field is one member a JSON request body may have. set receives the
// member's raw value, never null.
type field struct {
	name string
	set  func(raw json.RawMessage) error
}

// decodeObject reads r's body, at most limit bytes, as one JSON object
// whose members are among fields, and calls each member's setter. It is
// strict where encoding/json is lenient: member names match exactly (a
// differently cased name is unknown), a member may appear once, null is
// not a value, and nothing may follow the object. An empty body is allowed
// when allowEmpty (no setter is called). Every failure is a 400, or a 413
// when the body is too large.
func decodeObject(w http.ResponseWriter, r *http.Request, limit int64, allowEmpty bool, fields ...field) error {
	if r.ContentLength > limit {
		// Too large whatever it holds: 413 before the first byte is
		// parsed, not a 400 for a syntax error inside it.
		return bodyError(&http.MaxBytesError{Limit: limit}, limit)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.UseNumber()
	tok, err := dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		if allowEmpty {
			return nil
		}
		return badRequest("body must be a JSON object, got nothing")
	case err != nil:
		return bodyError(err, limit)
	case tok != json.Delim('{'):
		return badRequest("body must be a JSON object, got %s", jsonKind(tok))
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bodyError(err, limit)
		}
		name, _ := tok.(string)
		f, ok := findField(fields, name)
		if !ok {
			return unknownField(fields, name)
		}
		if seen[name] {
			return badRequest("invalid JSON body: field %q appears more than once", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return bodyError(err, limit)
		}
		if string(raw) == "null" {
			return badRequest("%s must not be null (leave it out instead)", name)
		}
		if err := f.set(raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return bodyError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			if e := bodyError(err, limit); e.(*httpError).status == http.StatusRequestEntityTooLarge {
				return e
			}
		}
		return badRequest("invalid JSON body: data after the object")
	}
	return nil
}

// findField returns the field named exactly name.
func findField(fields []field, name string) (field, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

// unknownField explains a member name that no field has.
func unknownField(fields []field, name string) error {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = strconv.Quote(f.name)
		if strings.EqualFold(f.name, name) {
			return badRequest("unknown field %q: field names are case-sensitive, did you mean %q?", name, f.name)
		}
	}
	return badRequest("unknown field %q (allowed: %s)", name, strings.Join(names, ", "))
}

// jsonKind names the kind of value a first token starts.
func jsonKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return "null"
	}
}

// intField is a member holding an int64 (no fraction, no exponent).
func intField(name string, dst **int64) field {
	return field{name: name, set: func(raw json.RawMessage) error {
		var v int64
		if err := json.Unmarshal(raw, &v); err != nil {
			return badRequest("%s must be an integer in the int64 range, got %.40s", name, raw)
		}
		*dst = &v
		return nil
	}}
}

// boolField is a member holding true or false.
func boolField(name string, dst **bool) field {
	return field{name: name, set: func(raw json.RawMessage) error {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return badRequest("%s must be true or false, got %.40s", name, raw)
		}
		*dst = &v
		return nil
	}}
}

// stringField is a member holding a string.
func stringField(name string, dst **string) field {
	return field{name: name, set: func(raw json.RawMessage) error {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return badRequest("%s must be a string, got %.40s", name, raw)
		}
		*dst = &v
		return nil
	}}
}

// stringsField is a member holding an array of strings.
func stringsField(name string, dst *[]string) field {
	return field{name: name, set: func(raw json.RawMessage) error {
		var raws []json.RawMessage
		if err := json.Unmarshal(raw, &raws); err != nil {
			return badRequest("%s must be an array of strings, got %.40s", name, raw)
		}
		v := make([]string, len(raws))
		for i, r := range raws {
			if err := json.Unmarshal(r, &v[i]); err != nil || string(r) == "null" {
				return badRequest("%s[%d] must be a string, got %.40s", name, i, r)
			}
		}
		*dst = v
		return nil
	}}
}

// bodyError maps a decoding error to 413 (too large) or 400.
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is larger than %d bytes", limit)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("invalid JSON body: unexpected end")
	default:
		return badRequest("invalid JSON body: %v", err)
	}
}

// maxIDLen is the longest idempotency id the API takes, in bytes.
const maxIDLen = 256

// validID checks an idempotency id: 1 to maxIDLen bytes of printable
// ASCII without spaces (0x21-0x7e).
func validID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return badRequest("id must be 1 to %d bytes, got %d", maxIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return badRequest("id must be printable ASCII without spaces (byte %d)", i)
		}
	}
	return nil
}
