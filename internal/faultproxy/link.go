package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// link is one proxied connection: the client's socket and ours to the
// target.
type link struct {
	p      *Proxy
	client net.Conn

	mu         sync.Mutex
	target     net.Conn           // set by start once dialed; under mu
	cancelDial context.CancelFunc // ends the dial; under mu

	done     chan struct{} // closed when the link is closing
	doneOnce sync.Once
}

// chunk is bytes read from one side, stamped with their arrival.
type chunk struct {
	data []byte
	at   time.Time
}

func (l *link) isDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// start dials the target and carries the link until both directions end.
// It runs in the link's own goroutine (counted in p.wg by handle).
func (l *link) start() {
	p := l.p
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	l.mu.Lock()
	l.cancelDial = cancel // a close during the dial ends it
	l.mu.Unlock()
	if l.isDone() {
		cancel()
	}
	var d net.Dialer
	t, err := d.DialContext(ctx, "tcp", p.cfg.Target)
	cancel()
	if err != nil {
		p.refused.Add(1)
		l.markDone()
		resetConn(l.client)
		return
	}
	l.mu.Lock()
	l.target = t
	l.mu.Unlock()
	if l.isDone() { // closed while dialing
		l.close()
		return
	}
	up := make(chan chunk, queueLen)
	down := make(chan chunk, queueLen)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); l.read(l.client, up) }()
	go func() { defer wg.Done(); l.read(t, down) }()
	go func() { defer wg.Done(); l.write(Downstream, down, l.client) }()
	l.write(Upstream, up, t)
	wg.Wait()
	l.close()
}

// read copies src into q, one stamped chunk per Read, until src fails or
// the link ends; then it closes q.
func (l *link) read(src net.Conn, q chan<- chunk) {
	defer close(q)
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{data: buf[:n], at: time.Now()}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close()
			}
			return
		}
	}
}

// write forwards the chunks of q to dst in direction d, applying the
// faults. When q ends (the source half-closed) it half-closes dst; when a
// fault or an error ends the link, it closes or resets it.
func (l *link) write(d Direction, q <-chan chunk, dst net.Conn) {
	p := l.p
	for ch := range q {
		if !p.waitFlowing(l) {
			l.reset()
			return
		}
		if lat := time.Duration(p.latency[d].Load()); lat > 0 {
			if !l.sleepFor(time.Until(ch.at.Add(lat))) {
				return
			}
			if !p.waitFlowing(l) { // a fault began during the delay
				l.reset()
				return
			}
		}
		if d == Downstream {
			if n := p.dropEvery.Load(); n > 0 && p.dropSeq.Add(1)%n == 0 {
				p.dropped.Add(1)
				l.reset()
				return
			}
		}
		if pw := p.partial[d].Load(); pw > 0 {
			n := min(int(pw-1), len(ch.data))
			if n > 0 {
				_, _ = dst.Write(ch.data[:n])
			}
			p.count(d, n)
			p.partials.Add(1)
			l.close()
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			l.close()
			return
		}
		p.count(d, len(ch.data))
	}
	if tc, ok := dst.(*net.TCPConn); ok && !l.isDone() {
		_ = tc.CloseWrite()
	}
}

func (p *Proxy) count(d Direction, n int) {
	if d == Upstream {
		p.bytesUp.Add(int64(n))
	} else {
		p.bytesDown.Add(int64(n))
	}
}

// markDone marks the link as closing and wakes its held writers. It
// reports whether this call did it.
func (l *link) markDone() bool {
	first := false
	l.doneOnce.Do(func() {
		close(l.done)
		first = true
	})
	if first {
		l.mu.Lock()
		if l.cancelDial != nil {
			l.cancelDial()
		}
		l.mu.Unlock()
		l.p.wake()
	}
	return first
}

// close closes both sockets.
func (l *link) close() {
	l.markDone()
	_ = l.client.Close()
	if t := l.targetConn(); t != nil {
		_ = t.Close()
	}
}

// reset closes both sockets, the client's with a TCP reset.
func (l *link) reset() {
	l.markDone()
	resetConn(l.client)
	if t := l.targetConn(); t != nil {
		resetConn(t)
	}
}

func (l *link) targetConn() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.target
}
