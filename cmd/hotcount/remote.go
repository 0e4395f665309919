package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// remote talks to a running `hotcount serve` for the one-shot commands
// (incr, get, shards, resize with --server URL).
type remote struct {
	base  string
	token string
	hc    *http.Client
}

// remoteError is a non-2xx answer from the server.
type remoteError struct {
	status int
	msg    string
}

func (e *remoteError) Error() string { return fmt.Sprintf("server answered %d: %s", e.status, e.msg) }

// unreachableError is a server that no connection reaches.
type unreachableError struct {
	server string
	err    error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("no hotcount server answers at %s (%v): start one with `hotcount serve`, "+
		"point --server or $%s at a running one, or work on a Redis Cluster directly with --redis or $%s",
		e.server, e.err, envServer, envRedis)
}

func (e *unreachableError) Unwrap() error { return e.err }

// newRemote checks the URL and returns a client for it.
func newRemote(server, token string) (*remote, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q is not an http(s) URL", server)
	}
	return &remote{base: strings.TrimRight(server, "/"), token: token, hc: &http.Client{Timeout: 30 * time.Second}}, nil
}

// do sends one request with a JSON body (or none) and decodes the JSON
// answer into out.
func (r *remote) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return &unreachableError{server: r.base, err: op.Err}
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &remoteError{status: resp.StatusCode, msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// counterPath is the API path of a counter: the key is one escaped segment.
func counterPath(key, suffix string) string {
	return "/v1/counters/" + url.PathEscape(key) + suffix
}

// remoteFailure maps a server error to an exit status: a 4xx answer is bad
// input (2), anything else a runtime failure (1).
func remoteFailure(stderr io.Writer, cmd string, err error) int {
	if re, ok := err.(*remoteError); ok && re.status/100 == 4 {
		return usagef(stderr, "%s: %v", cmd, err)
	}
	return failf(stderr, "%s: %v", cmd, err)
}
