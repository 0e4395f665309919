package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/hotcount/hotcount"
)

// incrRequest is the body of POST /v1/counters/{key}/incr.
type incrRequest struct {
	By *int64  `json:"by"`
	ID *string `json:"id"`
}

// handleIncr adds "by" (default 1) to a counter, once per "id" when given.
func (s *Server) handleIncr(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var req incrRequest
	if err := decodeBody(w, r, s.cfg.MaxBody, &req, true); err != nil {
		return err
	}
	by := int64(1)
	if req.By != nil {
		by = *req.By
	}
	if by == 0 {
		return badRequest("by must not be 0")
	}
	if req.ID != nil {
		if err := validID(*req.ID); err != nil {
			return err
		}
		ii, ok := s.backend.(IdempotentIncr)
		if !ok {
			return notImplemented("an idempotent increment (id)")
		}
		err = ii.IncrID(r.Context(), key, by, *req.ID)
	} else {
		err = s.backend.Incr(r.Context(), key, by)
	}
	if err != nil {
		return err
	}
	s.record(r.Context(), key)
	writeJSON(w, http.StatusOK, incrResponse{Key: key, Accepted: true})
	return nil
}

type incrResponse struct {
	Key      string `json:"key"`
	Accepted bool   `json:"accepted"`
}

// record feeds an accepted increment to the server's own rate measurement
// when the backend has none.
func (s *Server) record(ctx context.Context, key string) {
	s.metrics.increments.Inc()
	_, hk := s.backend.(HotKeys)
	_, nr := s.backend.(NodeRates)
	if hk && nr {
		return
	}
	var nodes []string
	if p, ok := s.backend.(Placement); ok {
		nodes, _ = p.SubCounterNodes(ctx, key)
	}
	s.rates.add(key, nodes)
}

// readingResponse is the answer of GET /v1/counters/{key}.
type readingResponse struct {
	Key     string `json:"key"`
	Value   int64  `json:"value"`
	StaleMS int64  `json:"stale_ms"`
	Mode    string `json:"mode"`
	N       int    `json:"n"`
}

// mode returns the durability mode of key.
func (s *Server) mode(key string) string {
	if m, ok := s.backend.(ModeReporter); ok {
		return m.Mode(key)
	}
	return ModeFast
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
		rd, err = s.backend.Get(r.Context(), key)
	case "exact":
		er, ok := s.backend.(ExactReader)
		if !ok {
			return notImplemented("consistency=exact")
		}
		if m := s.mode(key); m != ModeDurable {
			return badRequest("consistency=exact needs a durable namespace; %q is in mode %s", key, m)
		}
		rd, err = er.GetExact(r.Context(), key)
	default:
		return badRequest("consistency must be cached or exact, got %q", c)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, readingResponse{Key: key, Value: rd.Value, StaleMS: rd.Stale.Milliseconds(), Mode: s.mode(key), N: rd.N})
	return nil
}

// multiRequest is the body of POST /v1/counters:get.
type multiRequest struct {
	Keys []string `json:"keys"`
}

// handleGetMulti reads many counters at once.
func (s *Server) handleGetMulti(w http.ResponseWriter, r *http.Request) error {
	var req multiRequest
	if err := decodeBody(w, r, s.cfg.MaxBatchBody, &req, false); err != nil {
		return err
	}
	switch {
	case req.Keys == nil:
		return badRequest("keys is required")
	case len(req.Keys) == 0:
		return badRequest("keys must not be empty")
	case len(req.Keys) > s.cfg.MaxKeys:
		return badRequest("at most %d keys per request, got %d", s.cfg.MaxKeys, len(req.Keys))
	}
	for i, k := range req.Keys {
		if err := hotcount.ValidateKey(k); err != nil {
			return badRequest("keys[%d]: %v", i, err)
		}
	}
	got, err := s.backend.GetMulti(r.Context(), req.Keys)
	if err != nil {
		return err
	}
	vals := make(map[string]int64, len(got))
	for _, k := range req.Keys {
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
	if err := s.backend.Clear(r.Context(), key); err != nil {
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
	sr, ok := s.backend.(ShardReporter)
	if !ok {
		return notImplemented("a placement report")
	}
	rep, err := sr.Shards(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// resizeRequest is the body of PUT /v1/counters/{key}/shards.
type resizeRequest struct {
	N *int `json:"n"`
}

// handleResize changes a counter's number of sub-counters.
func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) error {
	key, err := pathKey(r)
	if err != nil {
		return err
	}
	var req resizeRequest
	if err := decodeBody(w, r, s.cfg.MaxBody, &req, false); err != nil {
		return err
	}
	switch {
	case req.N == nil:
		return badRequest("n is required")
	case *req.N < 1 || *req.N > hotcount.MaxN:
		return badRequest("n must be 1..%d, got %d", hotcount.MaxN, *req.N)
	}
	rs, ok := s.backend.(Resizer)
	if !ok {
		return notImplemented("resizing")
	}
	if err := rs.Resize(r.Context(), key, *req.N); err != nil {
		return err
	}
	if sr, ok := s.backend.(ShardReporter); ok {
		rep, err := sr.Shards(r.Context(), key)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, rep)
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "n": *req.N})
	return nil
}

// handleNodes reports per-node write rates.
func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) error {
	var rates []NodeRate
	if nr, ok := s.backend.(NodeRates); ok {
		rates = nr.NodeRates()
	} else {
		var known []string
		if p, ok := s.backend.(Placement); ok {
			var err error
			if known, err = p.Nodes(r.Context()); err != nil {
				return err
			}
		}
		rates = s.rates.nodeRates(known)
	}
	if rates == nil {
		rates = []NodeRate{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": rates, "window_s": s.cfg.RateWindow.Seconds()})
	return nil
}

// maxHotKeys bounds ?n= of /v1/hotkeys.
const maxHotKeys = 100

// handleHotKeys reports the hottest keys.
func (s *Server) handleHotKeys(w http.ResponseWriter, r *http.Request) error {
	n := 10
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHotKeys {
			return badRequest("n must be an integer 1..%d, got %q", maxHotKeys, v)
		}
	}
	var keys []HotKey
	if hk, ok := s.backend.(HotKeys); ok {
		keys = hk.HotKeys(n)
	} else {
		keys = s.rates.hotKeys(n)
	}
	if keys == nil {
		keys = []HotKey{}
	}
	decisions := []Decision{}
	if an, ok := s.backend.(AutoN); ok {
		decisions = an.Decisions()
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
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys, "decisions": decisions, "window_s": s.cfg.RateWindow.Seconds()})
	return nil
}

// maxDecisions bounds the automatic-N decisions /v1/hotkeys returns.
const maxDecisions = 20
