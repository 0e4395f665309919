package proxy

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Keyless commands are routed as Redis Cluster users expect:
//
//   - a keyless command passed through (EVAL, EVALSHA, FCALL with 0 keys,
//     TIME, COMMAND, PUBLISH, ...) goes to one primary, the owner of slot
//     0 (the anchor), never to a replica: a script that writes works, and
//     EVALSHA finds what EVAL or SCRIPT LOAD left there;
//   - EVAL loads its body on every primary too (once per script body, as
//     the proxy remembers), so that SCRIPT EXISTS and an EVALSHA on any
//     slot agree with a standalone Redis; SCRIPT LOAD, SCRIPT FLUSH and
//     FUNCTION LOAD, DELETE, FLUSH and RESTORE go to every primary, and
//     SCRIPT EXISTS answers 1 only where every primary has the script;
//     FUNCTION LIST, DUMP and STATS are answered by the anchor;
//   - RANDOMKEY, DBSIZE, KEYS and SCAN cover every primary;
//   - hotcount's own keys (sentinels and store marks "hotcount:...", the
//     Client's "{hotcount:...}" keys, and a counter's sub-counters, metadata
//     and auxiliary keys "{K#L}...") are left out of KEYS, SCAN and
//     RANDOMKEY, and a command naming one is refused: deleting a sentinel
//     would make the next checkpoint round restore every counter;
//   - FLUSHALL and FLUSHDB are refused unless Config.AllowFlush; allowed,
//     see flushAll.

// anchorKey routes keyless commands: its slot (0) is served by one
// primary.
const anchorKey = ""

// keyAnchor, as the key position of a queued command, sends it to the
// anchor primary.
const keyAnchor = -2

// ownKey reports whether key belongs to hotcount rather than to the
// user: see the list above.
func (s *Server) ownKey(key string) bool {
	if len(key) == 0 {
		return false
	}
	switch key[0] {
	case 'h':
		return strings.HasPrefix(key, "hotcount:")
	case '{':
		end := strings.IndexByte(key, '}')
		if end < 0 {
			return false
		}
		tag := key[1:end]
		if strings.HasPrefix(tag, "hotcount:") {
			return true
		}
		i := strings.LastIndexByte(tag, '#')
		if i <= 0 {
			return false
		}
		_, ok := s.counters.Namespace(tag[:i])
		return ok
	}
	return false
}

// ownKeyErr is the refusal of a command that names one of hotcount's
// own keys.
func ownKeyErr(key string) string {
	return "ERR key '" + truncate(key, 200) + "' is part of hotcount's own state (a sentinel, a mark or a counter's sub-key): the hotcount proxy does not serve it; use the counter key"
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// scripts remembers the script bodies loaded on every primary, by SHA1.
type scripts struct {
	mu     sync.Mutex
	loaded map[string]struct{}
}

// maxScripts bounds what scripts remembers; past it, it starts over.
const maxScripts = 10000

func (sc *scripts) has(sha string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	_, ok := sc.loaded[sha]
	return ok
}

func (sc *scripts) add(sha string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.loaded == nil || len(sc.loaded) >= maxScripts {
		sc.loaded = map[string]struct{}{}
	}
	sc.loaded[sha] = struct{}{}
}

func (sc *scripts) forget() {
	sc.mu.Lock()
	sc.loaded = nil
	sc.mu.Unlock()
}

// loadEverywhere loads an EVAL's body on every primary once, so that
// SCRIPT EXISTS and EVALSHA find it wherever they look. A body that does
// not compile is left to the EVAL itself, which answers Redis's error.
func (c *conn) loadEverywhere(body string) {
	if !c.s.cluster {
		return
	}
	sum := sha1.Sum([]byte(body))
	sha := hex.EncodeToString(sum[:])
	if c.s.scripts.has(sha) {
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	res, err := c.allPrimaries(ctx, []string{"SCRIPT", "LOAD", body})
	if err != nil {
		return
	}
	for i := range res {
		if resultError(&res[i]) != "" {
			return
		}
	}
	c.s.scripts.add(sha)
}

// allPrimaries sends strs to every primary at once and returns their
// results in address order.
func (c *conn) allPrimaries(ctx context.Context, strs []string) ([]rueidis.RedisResult, error) {
	addrs, nodes, err := c.primaries(ctx)
	if err != nil {
		return nil, err
	}
	return c.sendAll(ctx, addrs, nodes, strs), nil
}

// sendAll sends strs to the nodes of addrs at once and returns their
// results in the order of addrs.
func (c *conn) sendAll(ctx context.Context, addrs []string, nodes map[string]rueidis.Client, strs []string) []rueidis.RedisResult {
	c.s.stats.split.Add(1)
	res := make([]rueidis.RedisResult, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := nodes[a]
			res[i] = n.Do(ctx, n.B().Arbitrary(strs...).Build())
		}()
	}
	wg.Wait()
	return res
}

// function: FUNCTION LOAD, DELETE, FLUSH and RESTORE on every primary
// (the first primary's reply answers); LIST, DUMP, STATS and HELP from the
// anchor primary; KILL is refused (a function runs on one node).
func (c *conn) function(args [][]byte) {
	if len(args) < 2 {
		c.out = appendErr(c.out, wrongArity("function"))
		return
	}
	var nb [32]byte
	switch sub := string(lower(nb[:0], args[1])); sub {
	case "load", "delete", "flush", "restore":
		res := c.onPrimaries(c.strings(args))
		if res == nil {
			return
		}
		c.appendResult(&res[0], nil)
	case "kill":
		c.refuse(args)
	default:
		c.do(c.strings(args), keyAnchor, nullShape{})
	}
}

// randomKey: RANDOMKEY asks every primary and answers one of their keys
// at random (so each primary is equally likely, not each key), never one
// of hotcount's own keys; nil when no primary has another key.
func (c *conn) randomKey(args [][]byte) {
	if len(args) != 1 {
		c.out = appendErr(c.out, wrongArity("randomkey"))
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	for round := 0; round < 8; round++ {
		res, err := c.allPrimaries(ctx, []string{"RANDOMKEY"})
		if err != nil {
			c.out = appendErr(c.out, upstreamError(err))
			return
		}
		var keys []string
		own := false
		for i := range res {
			if rueidis.IsRedisNil(res[i].Error()) {
				continue // an empty primary
			}
			if e := resultError(&res[i]); e != "" {
				c.out = appendErr(c.out, e)
				return
			}
			k, _ := res[i].ToString()
			if c.s.ownKey(k) {
				own = true
				continue
			}
			keys = append(keys, k)
		}
		if len(keys) > 0 {
			c.out = appendBulk(c.out, keys[rand.IntN(len(keys))])
			return
		}
		if !own {
			c.out = appendNull(c.out, c.proto)
			return
		}
	}
	// Every pick was one of hotcount's own keys: a primary may hold
	// thousands of them beside one of the user's. Scan for a visible key,
	// primaries in random order, so that nil still means "none at all".
	k, err := c.scanVisible(ctx)
	switch {
	case err != nil:
		c.out = appendErr(c.out, upstreamError(err))
	case k == "":
		c.out = appendNull(c.out, c.proto)
	default:
		c.out = appendBulk(c.out, k)
	}
}

// scanVisible returns the first key that is not hotcount's own, scanning
// the primaries in random order; "" when there is none.
func (c *conn) scanVisible(ctx context.Context) (string, error) {
	addrs, nodes, err := c.primaries(ctx)
	if err != nil {
		return "", err
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	for _, a := range addrs {
		n := nodes[a]
		var cur uint64
		for {
			r, err := n.Do(ctx, n.B().Scan().Cursor(cur).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return "", err
			}
			for _, k := range r.Elements {
				if !c.s.ownKey(k) {
					return k, nil
				}
			}
			if r.Cursor == 0 {
				break
			}
			cur = r.Cursor
		}
	}
	return "", nil
}

// visible drops hotcount's own keys from a listing (KEYS, SCAN).
func (c *conn) visible(keys []rueidis.RedisMessage) []rueidis.RedisMessage {
	out := keys[:0]
	for i := range keys {
		if k, err := keys[i].ToString(); err == nil && c.s.ownKey(k) {
			continue
		}
		out = append(out, keys[i])
	}
	return out
}
