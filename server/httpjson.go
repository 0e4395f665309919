package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store"
)

// httpError is an error with the status to answer it with.
type httpError struct {
	status int
	msg    string
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

// classify maps an error to a status and a message for the client.
func classify(err error) (int, string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status, he.msg
	case errors.Is(err, hotcount.ErrInvalidKey), errors.Is(err, hotcount.ErrZeroDelta),
		errors.Is(err, hotcount.ErrNotDurable), errors.Is(err, hotcount.ErrInvalidN):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, hotcount.ErrOverflow), errors.Is(err, hotcount.ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, hotcount.ErrNoMetadata), errors.Is(err, hotcount.ErrConfig):
		// The backend cannot do this as configured (no metadata store, no
		// durable store for durable mode).
		return http.StatusNotImplemented, err.Error()
	case errors.Is(err, hotcount.ErrUnavailable), errors.Is(err, hotcount.ErrBackpressure),
		errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "backend unavailable: " + err.Error()
	case errors.Is(err, hotcount.ErrClosed), errors.Is(err, store.ErrClosed):
		return http.StatusServiceUnavailable, "shutting down"
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "request cancelled"
	default:
		return http.StatusInternalServerError, "internal error"
	}
}

// writeError answers err.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := classify(err)
	switch {
	case code == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()+0.5))))
	case code == http.StatusInternalServerError:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, errorBody{Error: msg})
}

// pathKey returns the {key} path segment, unescaped and validated.
func pathKey(r *http.Request) (string, error) {
	key := r.PathValue("key")
	if err := hotcount.ValidateKey(key); err != nil {
		return "", badRequest("%v", err)
	}
	return key, nil
}

// decodeBody reads r's body, at most limit bytes, into dst, a pointer to a
// struct. The body must be one JSON object without unknown fields and with
// nothing after it; an empty body is allowed when allowEmpty and leaves dst
// alone.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, limit int64, dst *T, allowEmpty bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	var obj *T // nil after decoding "null"
	err := dec.Decode(&obj)
	switch {
	case errors.Is(err, io.EOF):
		if allowEmpty {
			return nil
		}
		return badRequest("body must be a JSON object, got nothing")
	case err != nil:
		return bodyError(err, limit)
	case obj == nil:
		return badRequest("body must be a JSON object, got null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			if e := bodyError(err, limit); e.(*httpError).status == http.StatusRequestEntityTooLarge {
				return e
			}
		}
		return badRequest("invalid JSON body: data after the object")
	}
	*dst = *obj
	return nil
}

// bodyError maps a decoding error to 413 (too large) or 400.
func bodyError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is larger than %d bytes", limit)}
	case errors.As(err, &ute) && ute.Field == "":
		return badRequest("body must be a JSON object")
	default:
		return badRequest("invalid JSON body: %v", err)
	}
}

// validID checks an idempotency id: 1 to 256 bytes of printable ASCII.
func validID(id string) error {
	if id == "" || len(id) > 256 {
		return badRequest("id must be 1 to 256 bytes, got %d", len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return badRequest("id must be printable ASCII without spaces (byte %d)", i)
		}
	}
	return nil
}
