// Package faultproxy is a fault-injecting TCP proxy for tests.
//
// A Proxy listens on 127.0.0.1 (a free port) and forwards every accepted
// connection to one target address. Faults are switched on and off at run
// time, while traffic flows:
//
//   - SetLatency delays each chunk by a fixed time, per direction.
//   - ResetAll resets every open connection (TCP RST to the client).
//   - SetHalfOpen stops forwarding in both directions but keeps every socket
//     open: the peers see silence, not an error.
//   - SetPartialWrite forwards only a prefix of the next chunk in one
//     direction, then closes that connection.
//   - DropReplies forwards client→target bytes as usual and, when the
//     target's reply arrives, throws it away and resets the client
//     connection: the command ran, the client never hears of it. This is
//     the case that decides exactly-once behaviour of retries.
//   - Pause makes the target unreachable: new and existing connections are
//     reset (PauseReset) or held silent (PauseHang) until Resume.
//
// # How a connection is carried
//
// Each accepted connection is a link of two sockets (client, target) and
// four goroutines: per direction a reader that stamps each chunk with its
// arrival time and queues it, and a writer that applies the faults and
// writes it on. Latency is applied by the writer, against the arrival
// stamp, so pipelined chunks are delayed, not serialised. Links are bounded
// (Config.MaxConns); past the bound new connections are reset. Close closes
// the listener and every link and waits for every goroutine.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction names one way through the proxy.
type Direction int

// The two directions.
const (
	// Upstream is client → target (commands).
	Upstream Direction = iota
	// Downstream is target → client (replies).
	Downstream
)

func (d Direction) String() string {
	if d == Upstream {
		return "upstream"
	}
	return "downstream"
}

// PauseMode says how an unreachable target looks to clients.
type PauseMode int

// The pause modes.
const (
	// PauseReset resets open connections and every new one at once (as a
	// node that is down and whose port refuses).
	PauseReset PauseMode = iota + 1
	// PauseHang keeps open connections and accepts new ones, but forwards
	// nothing (as a node behind a dead network path).
	PauseHang
)

// Defaults for the zero values of Config.
const (
	// DefaultMaxConns bounds the links a Proxy carries at once.
	DefaultMaxConns = 256
	// DefaultDialTimeout bounds the dial to the target.
	DefaultDialTimeout = 2 * time.Second
	// chunkSize is the read buffer of one direction.
	chunkSize = 32 << 10
	// queueLen is the chunks a reader may run ahead of its writer.
	queueLen = 64
)

// Named errors.
var (
	// ErrConfig: the Config is not usable.
	ErrConfig = errors.New("faultproxy: invalid config")
	// ErrClosed: the proxy was closed.
	ErrClosed = errors.New("faultproxy: closed")
)

// Config configures a Proxy. The zero value of every field but Target is
// its documented default.
type Config struct {
	// Target is the "host:port" every connection is forwarded to.
	Target string
	// MaxConns bounds the links carried at once; 0 means DefaultMaxConns.
	MaxConns int
	// DialTimeout bounds each dial to Target; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
}

// Stats counts what a Proxy did since New.
type Stats struct {
	// Accepted is the number of client connections accepted.
	Accepted int64
	// Active is the number of links open now.
	Active int64
	// Refused is the number of connections reset at once (pause, bound,
	// failed dial).
	Refused int64
	// BytesUp and BytesDown are the bytes forwarded in each direction.
	BytesUp, BytesDown int64
	// RepliesDropped is the number of links reset by DropReplies after the
	// target had answered.
	RepliesDropped int64
	// Resets is the number of links reset by ResetAll or PauseReset.
	Resets int64
	// PartialWrites is the number of chunks cut short by SetPartialWrite.
	PartialWrites int64
}

// Proxy is a fault-injecting TCP proxy. It is safe for concurrent use.
type Proxy struct {
	cfg Config
	ln  net.Listener

	latency   [2]atomic.Int64 // per Direction, nanoseconds
	halfOpen  atomic.Bool
	partial   [2]atomic.Int64 // per Direction: prefix length + 1; 0 = off
	dropEvery atomic.Int64    // drop the reply of every n-th downstream chunk; 0 = off
	dropSeq   atomic.Int64
	pause     atomic.Int32 // PauseMode; 0 = running

	mu     sync.Mutex
	cond   *sync.Cond // broadcast when halfOpen or pause clears, or on Close
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup

	accepted, refused, bytesUp, bytesDown atomic.Int64
	dropped, resets, partials             atomic.Int64
}

// New starts a proxy to cfg.Target on 127.0.0.1 (a free port).
func New(cfg Config) (*Proxy, error) {
	if cfg.Target == "" {
		return nil, fmt.Errorf("%w: no target", ErrConfig)
	}
	if _, _, err := net.SplitHostPort(cfg.Target); err != nil {
		return nil, fmt.Errorf("%w: target %q: %v", ErrConfig, cfg.Target, err)
	}
	if cfg.MaxConns < 0 || cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("%w: negative MaxConns or DialTimeout", ErrConfig)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, links: map[*link]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address connections are forwarded to.
func (p *Proxy) Target() string { return p.cfg.Target }

// SetLatency delays every chunk forwarded in direction d by delay (0 turns
// it off). It applies to chunks already queued, too.
func (p *Proxy) SetLatency(d Direction, delay time.Duration) {
	p.latency[d].Store(int64(max(delay, 0)))
	p.wake()
}

// SetHalfOpen stops (on) or resumes (off) forwarding in both directions.
// Sockets stay open; bytes read meanwhile are held and forwarded on resume.
func (p *Proxy) SetHalfOpen(on bool) {
	p.halfOpen.Store(on)
	p.wake()
}

// SetPartialWrite makes every link forward only the first n bytes of its
// next chunk in direction d and then close; n < 0 turns it off. It stays on
// until turned off, so reconnecting clients meet it again.
func (p *Proxy) SetPartialWrite(d Direction, n int) {
	if n < 0 {
		p.partial[d].Store(0)
		return
	}
	p.partial[d].Store(int64(n) + 1)
}

// DropReplies makes the proxy throw away every n-th chunk the target sends
// (n = 1: every one) and reset that client connection instead: the command
// reached the target, its reply never reaches the client. n ≤ 0 turns it
// off. Each call restarts the count.
func (p *Proxy) DropReplies(n int) {
	p.dropSeq.Store(0)
	p.dropEvery.Store(int64(max(n, 0)))
}

// ResetAll resets every open link now (RST to the client). It returns how
// many were reset.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
		p.resets.Add(1)
	}
	return len(ls)
}

// Pause makes the target unreachable in the given mode until Resume.
// PauseReset also resets every open link; PauseHang holds them silent.
func (p *Proxy) Pause(mode PauseMode) {
	p.pause.Store(int32(mode))
	if mode == PauseReset {
		p.ResetAll()
	}
}

// Resume ends a Pause. Links held by PauseHang carry on.
func (p *Proxy) Resume() {
	p.pause.Store(0)
	p.wake()
}

// Clear turns every fault off (latency, half-open, partial writes, dropped
// replies, pause).
func (p *Proxy) Clear() {
	p.latency[Upstream].Store(0)
	p.latency[Downstream].Store(0)
	p.partial[Upstream].Store(0)
	p.partial[Downstream].Store(0)
	p.dropEvery.Store(0)
	p.halfOpen.Store(false)
	p.pause.Store(0)
	p.wake()
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := int64(len(p.links))
	p.mu.Unlock()
	return Stats{
		Accepted:       p.accepted.Load(),
		Active:         active,
		Refused:        p.refused.Load(),
		BytesUp:        p.bytesUp.Load(),
		BytesDown:      p.bytesDown.Load(),
		RepliesDropped: p.dropped.Load(),
		Resets:         p.resets.Load(),
		PartialWrites:  p.partials.Load(),
	}
}

// Close stops listening, closes every link and waits for every goroutine
// of the proxy to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range ls {
		l.close()
	}
	p.wg.Wait()
	return err
}

// wake tells held writers to look at the faults again.
func (p *Proxy) wake() {
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // transient (e.g. EMFILE)
			continue
		}
		p.accepted.Add(1)
		p.handle(c)
	}
}

// handle dials the target for an accepted connection and starts its link,
// or resets the connection when paused, full or the dial fails.
func (p *Proxy) handle(c net.Conn) {
	refuse := func() {
		p.refused.Add(1)
		resetConn(c)
	}
	if PauseMode(p.pause.Load()) == PauseReset {
		refuse()
		return
	}
	p.mu.Lock()
	full := p.closed || len(p.links) >= p.cfg.MaxConns
	p.mu.Unlock()
	if full {
		refuse()
		return
	}
	// The link dials the target in its own goroutine, so a slow target
	// does not hold up the accept loop.
	l := &link{p: p, client: c, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		refuse()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go l.start()
}

// waitFlowing blocks while the link may not forward (half-open or a
// hanging pause). It returns false when the link or proxy is closing, or
// when a reset pause began.
func (p *Proxy) waitFlowing(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed || l.isDone() {
			return false
		}
		pm := PauseMode(p.pause.Load())
		if pm == PauseReset {
			return false
		}
		if !p.halfOpen.Load() && pm != PauseHang {
			return true
		}
		p.cond.Wait()
	}
}

// sleepFor waits d or until the link ends; it reports whether the link is
// still open.
func (l *link) sleepFor(d time.Duration) bool {
	if d <= 0 {
		return !l.isDone()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// resetConn closes c with SO_LINGER 0, so the peer sees a reset.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
