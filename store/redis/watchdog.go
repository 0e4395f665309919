package redis

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Watchdog geometry: the watchdog ticks watchTicks times per
// Config.Timeout, and counts rounds by the tick (epoch) they started in,
// in a ring of watchSlots epochs.
const (
	watchTicks = 32
	watchSlots = 64 // a power of two above watchTicks+2
)

// flight counts the rounds sent to one node in the epochs of one ring
// slot, and how many of them are over. Both only grow.
type flight struct {
	started, done atomic.Int64
}

// watchdog bounds the rounds that IncrBy sends without a deadline context
// (see the package documentation, Rounds): it counts them by the epoch
// they start in, and once every round of an epoch should have been
// answered (Config.Timeout after the epoch ended) while one of that node
// is not, it closes every connection of the store to that node. rueidis
// then fails every command waiting on those connections, and dials again
// on the next command. A round thus waits between Timeout and about
// Timeout·(1+2/watchTicks), plus however late the watchdog's tick runs.
type watchdog struct {
	timeout time.Duration
	tick    time.Duration
	epoch   atomic.Uint64

	// Owned by the goroutine that calls advance.
	starts [watchSlots]time.Time // when each epoch in the ring began
	next   uint64                // the oldest epoch not checked yet

	mu    sync.Mutex
	conns map[string]map[*watchedConn]struct{} // open connections by dialed address
}

func newWatchdog(timeout time.Duration, now time.Time) *watchdog {
	w := &watchdog{timeout: timeout, tick: max(timeout/watchTicks, time.Millisecond), conns: map[string]map[*watchedConn]struct{}{}}
	w.starts[0] = now
	return w
}

// begin counts one round of node nc starting now and returns its flight,
// to be marked done when the round is over, and nc's cut count.
func (w *watchdog) begin(nc *nodeCounters) (*flight, uint64) {
	f := &nc.flights[w.epoch.Load()%watchSlots]
	f.started.Add(1)
	return f, nc.cuts.Load()
}

// advance starts a new epoch at now and returns the epochs [from, to)
// whose rounds should all be over by now: they began before an epoch
// that began at least Timeout ago. An epoch about to leave the ring is
// returned too.
func (w *watchdog) advance(now time.Time) (from, to uint64) {
	e := w.epoch.Load() + 1
	w.starts[e%watchSlots] = now
	w.epoch.Store(e)
	from = w.next
	for w.next+1 < e && (e-(w.next+1) >= watchSlots-1 || now.Sub(w.starts[(w.next+1)%watchSlots]) >= w.timeout) {
		w.next++
	}
	return from, w.next
}

// late reports whether a round of nc that started in one of the epochs
// [from, to) is not over. Rounds of older epochs in the same ring slots
// count too: they are older still.
func late(nc *nodeCounters, from, to uint64) bool {
	for e := from; e < to && e < from+watchSlots; e++ {
		f := &nc.flights[e%watchSlots]
		if started := f.started.Load(); f.done.Load() < started {
			return true
		}
	}
	return false
}

// check advances the epoch at now and cuts every node with a late round.
func (s *Store) check(now time.Time) {
	from, to := s.watch.advance(now)
	if from == to {
		return
	}
	s.stats.Range(func(k, v any) bool {
		if nc := v.(*nodeCounters); late(nc, from, to) {
			nc.cuts.Add(1)
			s.watch.cut(k.(string))
			s.kickRefresh()
		}
		return true
	})
}

// watchLoop ticks the watchdog until Close.
func (s *Store) watchLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.watch.tick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.check(time.Now())
		}
	}
}

// cut closes every open connection to addr.
func (w *watchdog) cut(addr string) {
	w.mu.Lock()
	conns := make([]*watchedConn, 0, len(w.conns[addr]))
	for c := range w.conns[addr] {
		conns = append(conns, c)
	}
	w.mu.Unlock()
	for _, c := range conns {
		_ = c.Conn.Close() // rueidis closes it again, and forgets it, when it sees the error
	}
}

// dial is the rueidis client's dialer: rueidis' own, plus a record of
// each connection by address, so that the watchdog can close them.
func (w *watchdog) dial(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, notSentError{err}
	}
	wc := &watchedConn{Conn: c, w: w, addr: addr}
	w.mu.Lock()
	if w.conns[addr] == nil {
		w.conns[addr] = map[*watchedConn]struct{}{}
	}
	w.conns[addr][wc] = struct{}{}
	w.mu.Unlock()
	return wc, nil
}

// notSentError is a failed dial, or the failure of a connection that
// never read a byte: rueidis sends commands on a connection only once its
// handshake was answered, so a command that gets it was never written.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// watchedConn is a connection the watchdog knows of until it is closed.
type watchedConn struct {
	net.Conn
	w    *watchdog
	addr string
	read atomic.Bool // a byte was read: the handshake was answered
}

// Read reads, and marks an error before the first byte as notSentError.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.read.Load() {
		c.read.Store(true)
	}
	if err != nil && !c.read.Load() {
		err = notSentError{err}
	}
	return n, err
}

// Write writes, and marks an error before the first byte read as
// notSentError.
func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && !c.read.Load() {
		err = notSentError{err}
	}
	return n, err
}

// Close forgets the connection and closes it.
func (c *watchedConn) Close() error {
	c.w.mu.Lock()
	if m := c.w.conns[c.addr]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(c.w.conns, c.addr)
		}
	}
	c.w.mu.Unlock()
	return c.Conn.Close()
}
