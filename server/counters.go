package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// handleIncr adds "by" (default 1) to a counter, once per "id" when given.
// "n" creates a counter that does not exist yet with n sub-counters,
// pinned (409 when it exists with another n); an increment the counter
// would refuse is refused before it is created.
func (s *Server) handleIncr(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var byp, n *int64
	var id *string
	if err := decodeObject(w, r, s.cfg.MaxBody, true, intField("by", &byp), stringField("id", &id), intField("n", &n)); err != nil {
		return err
	}
	by := int64(1)
	if byp != nil {
		by = *byp
	}
	if by == 0 {
		return badRequest("by must not be 0")
	}
	if n != nil && (*n < 1 || *n > keyspace.MaxN) {
		return badRequest("n must be 1..%d, got %d", keyspace.MaxN, *n)
	}
	if id != nil {
		if err := validID(*id); err != nil {
			return err
		}
	}
	if n != nil {
		// What the increment itself would refuse is refused before the
		// counter is created: a refused request changes nothing.
		if by > hotcount.MaxDelta || by < -hotcount.MaxDelta {
			return fmt.Errorf("incr %q: %w: |by| %d passes the sub-counter bound %d", key, hotcount.ErrOverflow, by, int64(hotcount.MaxDelta))
		}
		if id != nil && s.c.Mode(key) != hotcount.ModeDurable {
			return fmt.Errorf("incr %q: %w", key, hotcount.ErrNotDurable)
		}
		start := time.Now()
		_, err := s.c.Create(r.Context(), key, int(*n))
		s.metrics.since(opResize, start)
		if err != nil {
			return err
		}
	}
	if id != nil {
		start := time.Now()
		err = s.c.IncrID(r.Context(), key, by, *id)
		s.metrics.since(opIncrID, start)
	} else {
		start := time.Now()
		err = s.c.Incr(r.Context(), key, by)
		s.metrics.since(opIncr, start)
	}
	if err != nil {
		return err
	}
	s.metrics.incremented(s.c, key)
	writeJSON(w, http.StatusOK, incrResponse{Key: key, Accepted: true})
	return nil
}

type incrResponse struct {
	Key      string `json:"key"`
	Accepted bool   `json:"accepted"`
}

// readingResponse is the answer of GET /v1/counters/{key}.
type readingResponse struct {
	Key     string `json:"key"`
	Value   int64  `json:"value"`
	StaleMS int64  `json:"stale_ms"`
	Mode    string `json:"mode"`
	// N is null when an exact read could not learn it from the cache.
	N *int `json:"n"`
	// Regions, for a server in a region, is each region's share of
	// value and how old it is.
	Regions map[string]regionShare `json:"regions,omitempty"`
}

// regionShare is one region's share of a reading.
type regionShare struct {
	Value   int64 `json:"value"`
	StaleMS int64 `json:"stale_ms"`
}

// shares translates a reading's region shares.
func shares(rd hotcount.Reading) map[string]regionShare {
	if rd.Regions == nil {
		return nil
	}
	out := make(map[string]regionShare, len(rd.Regions))
	for name, sh := range rd.Regions {
		out[name] = regionShare{Value: sh.Value, StaleMS: sh.Stale.Milliseconds()}
	}
	return out
}

// handleGet reads a counter: the cached sum by default, or with
// ?consistency=exact the durable log.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var rd hotcount.Reading
	switch c := r.URL.Query().Get("consistency"); c {
	case "", "cached":
		start := time.Now()
		rd, err = s.c.Get(r.Context(), key)
		s.metrics.since(opGet, start)
	case "exact":
		if m := s.c.Mode(key); m != hotcount.ModeDurable {
			return badRequest("consistency=exact needs a durable namespace; %q is in mode %s", key, m)
		}
		start := time.Now()
		rd, err = s.c.GetExact(r.Context(), key)
		s.metrics.since(opGetExact, start)
	default:
		return badRequest("consistency must be cached or exact, got %q", c)
	}
	if err != nil {
		return err
	}
	resp := readingResponse{Key: key, Value: rd.Value, StaleMS: rd.Stale.Milliseconds(), Mode: string(s.c.Mode(key)), Regions: shares(rd)}
	if !rd.NUnknown {
		resp.N = &rd.N
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleGetMulti reads many counters at once.
func (s *Server) handleGetMulti(w http.ResponseWriter, r *http.Request) error {
	var keys []string
	if err := decodeObject(w, r, s.cfg.MaxBatchBody, false, stringsField("keys", &keys)); err != nil {
		return err
	}
	switch {
	case keys == nil:
		return badRequest("keys is required")
	case len(keys) == 0:
		return badRequest("keys must not be empty")
	case len(keys) > s.cfg.MaxKeys:
		return badRequest("at most %d keys per request, got %d", s.cfg.MaxKeys, len(keys))
	}
	p := principalOf(r.Context())
	for i, k := range keys {
		if err := hotcount.ValidateKey(k); err != nil {
			return badRequest("keys[%d]: %v", i, err)
		}
		if !p.covers(k) {
			return outsidePrefixes(p, k)
		}
	}
	start := time.Now()
	got, err := s.c.GetMulti(r.Context(), keys)
	s.metrics.since(opGetMulti, start)
	if err != nil {
		return err
	}
	vals := make(map[string]int64, len(got))
	for _, k := range keys {
		vals[k] = got[k].Value
	}
	writeJSON(w, http.StatusOK, map[string]any{"values": vals})
	return nil
}

// handleClear deletes a counter; clearing a missing counter succeeds.
func (s *Server) handleClear(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	start := time.Now()
	err = s.c.Clear(r.Context(), key)
	s.metrics.since(opClear, start)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "cleared": true})
	return nil
}

// handleShards reports where a counter's sub-counters live.
func (s *Server) handleShards(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	n := 0
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > keyspace.MaxN {
			return badRequest("n must be an integer 1..%d, got %q", keyspace.MaxN, v)
		}
	}
	start := time.Now()
	rep, err := s.c.ShardsN(r.Context(), key, n)
	s.metrics.since(opShards, start)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// handleResize changes a counter's number of sub-counters and pins it
// ({"n": K}), or unpins it ({"auto": true}).
func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var n *int64
	var auto *bool
	if err := decodeObject(w, r, s.cfg.MaxBody, false, intField("n", &n), boolField("auto", &auto)); err != nil {
		return err
	}
	switch {
	case auto != nil && n != nil:
		return badRequest("give n or auto, not both")
	case auto != nil && !*auto:
		return badRequest("auto must be true (give n to pin a number)")
	case auto == nil && n == nil:
		return badRequest("n is required")
	case n != nil && (*n < 1 || *n > keyspace.MaxN):
		return badRequest("n must be 1..%d, got %d", keyspace.MaxN, *n)
	}
	start := time.Now()
	if auto != nil {
		err = s.c.Unpin(r.Context(), key)
	} else {
		err = s.c.Resize(r.Context(), key, int(*n))
	}
	s.metrics.since(opResize, start)
	if err != nil {
		return err
	}
	rep, err := s.c.Shards(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// ttlResponse is the answer of the ttl routes.
type ttlResponse struct {
	Key    string `json:"key"`
	Exists bool   `json:"exists"`
	// TTLMS is the time left in ms; null without a deadline.
	TTLMS *int64 `json:"ttl_ms"`
	// Deadline is when the counter expires; null without one.
	Deadline *time.Time `json:"deadline"`
}

// handleGetTTL answers a counter's deadline.
func (s *Server) handleGetTTL(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	at, exists, err := s.c.Deadline(r.Context(), key)
	if err != nil {
		return err
	}
	resp := ttlResponse{Key: key, Exists: exists}
	if exists && !at.IsZero() {
		left := max(time.Until(at), 0).Milliseconds()
		at = at.UTC()
		resp.TTLMS, resp.Deadline = &left, &at
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleSetTTL gives a counter a deadline ttl_ms from now (not positive:
// the counter goes now), as Redis PEXPIRE does; exists says whether there
// was a counter to expire.
func (s *Server) handleSetTTL(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var ms *int64
	if err := decodeObject(w, r, s.cfg.MaxBody, false, intField("ttl_ms", &ms)); err != nil {
		return err
	}
	switch {
	case ms == nil:
		return badRequest("ttl_ms is required")
	case *ms > maxTTLMillis:
		return badRequest("ttl_ms must be at most %d (a century), got %d", int64(maxTTLMillis), *ms)
	}
	existed, err := s.c.Expire(r.Context(), key, time.Now().Add(time.Duration(max(*ms, -1))*time.Millisecond))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "exists": existed})
	return nil
}

// handleDeleteTTL removes a counter's deadline, as Redis PERSIST does.
func (s *Server) handleDeleteTTL(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	had, err := s.c.Persist(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "persisted": had})
	return nil
}

// handleNodes reports the cache writes per node.
func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{"nodes": s.c.Nodes(r.Context())})
	return nil
}

// maxTTLMillis is the longest ttl_ms PUT …/ttl takes: a century.
const maxTTLMillis = 100 * 365 * 24 * 3600 * 1000

// maxHotKeys bounds ?n= of /v1/hotkeys.
const maxHotKeys = 100

// maxHotKeysScan is how far down the ranking /v1/hotkeys looks for the
// keys of a token limited to prefixes.
const maxHotKeysScan = 1000

// handleHotKeys reports the hottest keys and the recent automatic-N
// decisions.
func (s *Server) handleHotKeys(w http.ResponseWriter, r *http.Request) error {
	n := 10
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHotKeys {
			return badRequest("n must be an integer 1..%d, got %q", maxHotKeys, v)
		}
	}
	p := principalOf(r.Context())
	keys := []hotcount.HotKey{}
	if p.limited() {
		// Other tenants' keys are not shown: look further down the
		// ranking for n keys of the token's own.
		for _, k := range s.c.HotKeys(r.Context(), maxHotKeysScan) {
			if p.covers(k.Key) && len(keys) < n {
				keys = append(keys, k)
			}
		}
	} else {
		keys = append(keys, s.c.HotKeys(r.Context(), n)...)
	}
	var decisions []hotcount.Decision
	for _, d := range s.c.Decisions() {
		if p.covers(d.Key) {
			decisions = append(decisions, d)
		}
	}
	last := map[string]string{}
	for _, d := range decisions {
		last[d.Key] = d.Reason
	}
	for i := range keys {
		if keys[i].Reason == "" {
			keys[i].Reason = last[keys[i].Key]
		}
	}
	if len(decisions) > maxDecisions {
		decisions = decisions[len(decisions)-maxDecisions:]
	}
	if decisions == nil {
		decisions = []hotcount.Decision{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys, "decisions": decisions})
	return nil
}

// maxDecisions bounds the automatic-N decisions /v1/hotkeys returns.
const maxDecisions = 20
