package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// statTimeout bounds one INFO commandstats query.
const statTimeout = 5 * time.Second

// backend is the cache under test: it opens clients on it, counts the
// write commands its nodes received and reads single keys directly.
type backend interface {
	// open returns a client of the cache configured as cfg otherwise says.
	open(ctx context.Context, cfg hotcount.Config) (*hotcount.Client, error)
	// calls returns the cumulative call counts of the write commands
	// (incrby, evalsha, eval) received by each node.
	calls(ctx context.Context, nodes []string) (map[string]calls, error)
	// writes turns the call counts of an interval into cache writes.
	writes(c calls) int64
	// cpuSeconds returns the CPU time a node's server process has used
	// (INFO cpu: used_cpu_user + used_cpu_sys); errNoCPU where the
	// backend has no such figure.
	cpuSeconds(ctx context.Context, node string) (float64, error)
	// rawGet reads one key with one plain GET.
	rawGet(ctx context.Context, key string) error
	// kind is "redis" or "embedded".
	kind() string
	close()
}

// openBackend opens the cache that redis says: with seed addresses the
// Redis (Cluster) they reach, logged in and secured as redis says; without
// them one embedded store.
func openBackend(ctx context.Context, redis hotcount.RedisConfig) (backend, error) {
	if len(redis.Addrs) == 0 {
		st, err := mem.New(mem.Config{})
		if err != nil {
			return nil, err
		}
		return &memBackend{st: st}, nil
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:   redis.Addrs,
		Username:      redis.Username,
		Password:      redis.Password,
		TLSConfig:     redis.TLS,
		DisableCache:  true,
		ClientSetInfo: rueidis.DisableClientSetInfo,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: connect %v: %w", store.ErrUnavailable, redis.Addrs, err)
	}
	return &redisBackend{redis: redis, rc: rc}, nil
}

// redisBackend is a Redis (Cluster) reached through the seeds of redis,
// every connection logged in and secured as redis says.
type redisBackend struct {
	redis hotcount.RedisConfig
	rc    rueidis.Client
}

func (b *redisBackend) kind() string { return "redis" }

func (b *redisBackend) open(ctx context.Context, cfg hotcount.Config) (*hotcount.Client, error) {
	flushDelay := cfg.Redis.FlushDelay
	cfg.Redis = b.redis
	cfg.Redis.FlushDelay = flushDelay
	return hotcount.New(ctx, cfg)
}

// info returns the INFO section of one node.
func (b *redisBackend) info(ctx context.Context, node, section string) (string, error) {
	c, ok := b.rc.Nodes()[node]
	if !ok {
		return "", fmt.Errorf("%w: no connection to primary %s", store.ErrUnavailable, node)
	}
	qctx, cancel := context.WithTimeout(ctx, statTimeout)
	defer cancel()
	s, err := c.Do(qctx, c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("%w: INFO %s on %s: %w", store.ErrUnavailable, section, node, err)
	}
	return s, nil
}

func (b *redisBackend) cpuSeconds(ctx context.Context, node string) (float64, error) {
	s, err := b.info(ctx, node, "cpu")
	if err != nil {
		return 0, err
	}
	return parseCPU(s)
}

func (b *redisBackend) calls(ctx context.Context, nodes []string) (map[string]calls, error) {
	out := make(map[string]calls, len(nodes))
	for _, n := range nodes {
		s, err := b.info(ctx, n, "commandstats")
		if err != nil {
			return nil, err
		}
		all, err := parseCommandStats(s)
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats on %s: %w", n, err)
		}
		out[n] = writeCalls(all)
	}
	return out, nil
}

// writes counts scripts plus the INCRBYs that no script ran (see the
// package doc).
func (b *redisBackend) writes(c calls) int64 {
	scripts := c.evalsha + c.eval
	return scripts + max(0, c.incrby-scripts)
}

func (b *redisBackend) rawGet(ctx context.Context, key string) error {
	err := b.rc.Do(ctx, b.rc.B().Get().Key(key).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return nil
	}
	return err
}

func (b *redisBackend) close() { b.rc.Close() }

// memBackend is one embedded store shared by every instance.
type memBackend struct{ st *mem.Store }

func (b *memBackend) kind() string { return "embedded" }

func (b *memBackend) open(ctx context.Context, cfg hotcount.Config) (*hotcount.Client, error) {
	cfg.Store = b.st
	return hotcount.New(ctx, cfg)
}

func (b *memBackend) calls(_ context.Context, nodes []string) (map[string]calls, error) {
	st := b.st.Stats()
	out := make(map[string]calls, len(nodes))
	for _, n := range nodes {
		out[n] = writeCalls(st[n].Commands)
	}
	return out, nil
}

// writes adds the calls: the embedded store does not count a token
// increment's INCRBY apart.
func (b *memBackend) writes(c calls) int64 { return c.incrby + c.evalsha + c.eval }

func (b *memBackend) cpuSeconds(context.Context, string) (float64, error) { return 0, errNoCPU }

func (b *memBackend) rawGet(ctx context.Context, key string) error {
	_, err := b.st.Get(ctx, []string{key})
	return err
}

func (b *memBackend) close() { _ = b.st.Close() }

// errNoCPU: the backend does not report its nodes' CPU time.
var errNoCPU = errors.New("bench: no CPU figures for the embedded store")

// parseCPU returns used_cpu_user + used_cpu_sys from an INFO cpu reply.
func parseCPU(s string) (float64, error) {
	var total float64
	found := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("bench: bad %s %q in INFO cpu", k, v)
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("bench: INFO cpu lacks used_cpu_user or used_cpu_sys")
	}
	return total, nil
}

// calls are the call counts of the write commands of one node.
type calls struct{ incrby, evalsha, eval int64 }

func writeCalls(m map[string]int64) calls {
	return calls{incrby: m["incrby"], evalsha: m["evalsha"], eval: m["eval"]}
}

func (c calls) minus(o calls) calls {
	return calls{incrby: c.incrby - o.incrby, evalsha: c.evalsha - o.evalsha, eval: c.eval - o.eval}
}

// parseCommandStats parses the reply of INFO commandstats into call counts
// by lower-case command name ("cmdstat_incrby:calls=3,usec=..." gives
// incrby: 3).
func parseCommandStats(s string) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))
		found := false
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bench: bad calls in %q", line)
			}
			out[name] = n
			found = true
		}
		if !found {
			return nil, fmt.Errorf("bench: no calls in %q", line)
		}
	}
	return out, sc.Err()
}

// parseCommandUsec reads INFO commandstats: the microseconds spent in
// each command (usec), by lower-case command name.
func parseCommandUsec(s string) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))
		for _, f := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(f, "="); k == "usec" {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
					out[name] = n
				}
			}
		}
	}
	return out
}
