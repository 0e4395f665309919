package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// UpstreamFlushDelay lets rueidis's writer wait this long after a flush
// to collect the commands of more connections into the next one: fewer
// write calls per command when many clients send one command at a time.
// A command that finds the writer idle is written at once; only one that
// arrives right after a flush waits, at most this long. Under
// redis-benchmark -c 50 on one CPU (GOMAXPROCS 1, `hotcount proxy`'s
// default), 100µs took the proxy's system calls per GET from 4.1 to 3.5
// and its CPU per command from about 40 to 25µs, against 20µs; 200µs did
// no better. The proxy's pass-through connections use it; its counters'
// connections use CounterFlushDelay.
const UpstreamFlushDelay = 100 * time.Microsecond

// CounterFlushDelay is the flush delay `hotcount proxy` gives its
// counters' connections to the cluster (hotcount.RedisConfig.FlushDelay):
// the cold INCRs of a long tail of counters, and the label look-ups and
// summed reads beside them, are many small commands to every node, and a
// node pays a wake-up, a read and a write for each batch of them. rueidis
// waits only while more than one command is in flight on the connection,
// so a lone command is never delayed; under load a command waits at most
// this long. In `hotcount bench longtail` (3 primaries, 2 shared cores,
// a tail of 200,000 counters), 400µs against 100µs took the nodes' reads
// per proxied increment of the tail (40 redis-benchmark clients) from
// about 0.4 to 0.15 and their CPU per increment down by about 40%. In the
// mixed workload (20 tail clients beside 40 on one viral key), 800µs
// against 400µs took the reads per increment from about 0.17 to 0.13 and
// the nodes' CPU per increment against the direct load from 0.48–0.68×
// (mean 0.56×, 5 runs) to 0.49–0.54× (mean 0.51×, 4 runs), at about 20%
// lower proxied throughput; 1.5ms did no better (0.53×, 0.57×).
//
// A wait is never shorter than the Go runtime's timer resolution when the
// process is idle, about 1 ms on Linux: measured on a 2-vCPU host,
// time.Sleep of 50µs, 200µs and 800µs each took about 1.1ms, so this
// delay and UpstreamFlushDelay act as about 1.1ms when they wait at all.
// The cold INCRs go in batches of their own (CounterBatchWindow).
const CounterFlushDelay = 800 * time.Microsecond

// CounterBatchWindow is the longest a cold INCR that `hotcount proxy`
// writes at once waits to be sent with the others
// (hotcount.RedisConfig.IncrBatchWindow): the cold INCRs of all clients go
// as one batch, written to every node at the same moment, as soon as
// every client seen at once is back and nothing is in flight, or this
// long after the last batch. A lone client is never held.
const CounterBatchWindow = 2 * time.Millisecond

// Server is a RESP front: it accepts Redis clients, serves counter keys
// through Counters and passes every other command to the cluster. It is
// safe for concurrent use.
type Server struct {
	cfg      settings
	counters Counters
	up2, up3 rueidis.Client       // upstream in RESP2 and in RESP3
	upOpt    rueidis.ClientOption // how up3 connects, for a node rueidis has no connection to (allNodes)
	cluster  bool                 // the upstream is a Redis Cluster
	cmds     commandTable
	est      *estimates
	version  string // redis_version of the upstream, shown by HELLO and INFO
	started  time.Time
	stats    stats
	input    budget  // input held by connections (Config.MemoryBudget)
	scripts  scripts // script bodies loaded on every primary

	ctx    context.Context // cancelled by Close: ends blocking calls
	cancel context.CancelFunc

	mu        sync.Mutex
	conns     map[*conn]struct{}
	listeners map[net.Listener]struct{}
	closing   bool
	draining  atomic.Bool
	wg        sync.WaitGroup // connection goroutines
	nextID    atomic.Int64
	closeOnce sync.Once
}

// stats are the proxy's own counters, exported as metrics.
type stats struct {
	accepted, rejected, commands, protocolErrors atomic.Int64
	counterIncrs, counterReads, counterClears    atomic.Int64
	passed, split, upstreamErrors, refused       atomic.Int64
	estimateReads, panics                        atomic.Int64
	budgetWaits, budgetCloses                    atomic.Int64
	blocked                                      atomic.Int64 // clients in a blocking command now
}

// Stats is a snapshot of the proxy's counters (also exported as metrics).
type Stats struct {
	Clients         int   // open client connections
	Accepted        int64 // connections accepted
	Rejected        int64 // connections refused (MaxClients, shutdown)
	Commands        int64 // commands received
	ProtocolErrors  int64 // connections closed for malformed or oversized input
	Panics          int64 // commands that panicked (bugs), answered with an error
	CounterIncrs    int64 // increments of counter keys accepted
	CounterReads    int64 // summed reads of counter keys
	EstimateAnswers int64 // counter values answered from the estimate
	CounterClears   int64 // counters cleared
	Passed          int64 // commands passed through
	Split           int64 // commands split by slot or sent to every primary
	UpstreamErrors  int64 // failed round trips to the cluster
	Refused         int64 // commands refused as unsupported
	Estimates       int   // counter keys with an estimate held
}

// Stats returns a snapshot of the proxy's counters.
func (s *Server) Stats() Stats {
	st := &s.stats
	return Stats{
		Clients: s.Clients(), Accepted: st.accepted.Load(), Rejected: st.rejected.Load(),
		Commands: st.commands.Load(), ProtocolErrors: st.protocolErrors.Load(), Panics: st.panics.Load(),
		CounterIncrs: st.counterIncrs.Load(), CounterReads: st.counterReads.Load(),
		EstimateAnswers: st.estimateReads.Load(), CounterClears: st.counterClears.Load(),
		Passed: st.passed.Load(), Split: st.split.Load(), UpstreamErrors: st.upstreamErrors.Load(),
		Refused: st.refused.Load(), Estimates: s.est.size(),
	}
}

// New connects to the cluster (a RESP2 and a RESP3 rueidis client), reads
// its command table and returns a Server ready to Serve. It fails with
// ErrConfig for a bad Config, or with the connection error.
func New(ctx context.Context, cfg Config) (*Server, error) {
	st, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       st,
		counters:  st.Counters,
		est:       newEstimates(),
		started:   st.Clock.Now(),
		input:     budget{limit: st.MemoryBudget},
		conns:     map[*conn]struct{}{},
		listeners: map[net.Listener]struct{}{},
	}
	opt := rueidis.ClientOption{
		InitAddress:      st.Redis.Addrs,
		TLSConfig:        st.Redis.TLS,
		Username:         st.Redis.Username,
		Password:         st.Redis.Password,
		DisableCache:     true,
		ClientSetInfo:    rueidis.DisableClientSetInfo,
		DisableRetry:     true,
		Dialer:           net.Dialer{Timeout: st.Timeout},
		ConnWriteTimeout: st.Timeout,
		BlockingPoolSize: rueidis.DefaultPoolSize,
		MaxFlushDelay:    UpstreamFlushDelay,
	}
	s.upOpt = opt
	if s.up3, err = rueidis.NewClient(opt); err != nil {
		return nil, fmt.Errorf("proxy: connecting to %s: %w", strings.Join(st.Redis.Addrs, ","), err)
	}
	opt.AlwaysRESP2 = true
	if s.up2, err = rueidis.NewClient(opt); err != nil {
		s.up3.Close()
		return nil, fmt.Errorf("proxy: connecting to %s (RESP2): %w", strings.Join(st.Redis.Addrs, ","), err)
	}
	s.cluster = s.up3.Mode() == rueidis.ClientModeCluster
	lctx, cancel := context.WithTimeout(ctx, st.Timeout)
	defer cancel()
	if s.cmds, err = loadCommands(lctx, s.up3); err == nil {
		s.version, err = serverVersion(lctx, s.up3)
	}
	if err != nil {
		s.up2.Close()
		s.up3.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// serverVersion reads redis_version from INFO server.
func serverVersion(ctx context.Context, c rueidis.Client) (string, error) {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("INFO server: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("INFO server: no redis_version")
}

// Serve accepts connections on ln until Shutdown or Close, and returns
// ErrClosed then; any other error is the listener's.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accept(nc)
	}
}

// accept starts serving one connection, or refuses it past MaxClients.
func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	if s.closing || len(s.conns) >= s.cfg.MaxClients {
		closing := s.closing
		s.mu.Unlock()
		s.stats.rejected.Add(1)
		if !closing {
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = nc.Write(appendErr(nil, "ERR max number of clients reached"))
		}
		_ = nc.Close()
		return
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}

// Drain makes Ready fail, so that a load balancer stops sending new
// clients, while the proxy keeps serving.
func (s *Server) Drain() { s.draining.Store(true) }

// Ready reports whether the proxy takes traffic: not draining or closed,
// and the cluster answers PING.
func (s *Server) Ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("proxy: draining")
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	return s.up3.Do(ctx, s.up3.B().Ping().Build()).Error()
}

// Shutdown stops accepting, lets every connection finish the commands it
// has read (blocked commands are cancelled), closes the connections and
// the upstream clients. When ctx ends first the remaining connections are
// closed at once and ctx's error is returned. Counters is not closed: its
// owner closes it afterwards, which flushes what it buffered.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		_ = ln.Close()
	}
	for c := range s.conns {
		c.stop()
	}
	s.mu.Unlock()
	s.draining.Store(true)
	s.cancel() // unblock BLPOP and friends; their clients get an error
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		// Closed outside s.mu: Close waits until a connection's goroutine
		// leaves its socket (serveRaw holds the read side while it runs
		// a batch), and a batch may need s.mu (CLIENT LIST, INFO).
		s.mu.Lock()
		open := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			open = append(open, c)
		}
		s.mu.Unlock()
		for _, c := range open {
			_ = c.nc.Close()
		}
		<-done
	}
	s.closeOnce.Do(func() {
		s.up2.Close()
		s.up3.Close()
	})
	return err
}

// Close closes the listeners, every connection and the upstream clients
// at once.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Clients returns the number of open client connections.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// upstream returns the client that speaks proto.
func (s *Server) upstream(proto int) rueidis.Client {
	if proto >= 3 {
		return s.up3
	}
	return s.up2
}
