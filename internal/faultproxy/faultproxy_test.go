package faultproxy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/internal/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer echoes every connection and records what it received.
type echoServer struct {
	ln  net.Listener
	wg  sync.WaitGroup
	mu  sync.Mutex
	got bytes.Buffer
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.got.Write(buf[:n])
						e.mu.Unlock()
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.wg.Wait()
	})
	return e
}

func (e *echoServer) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got.String()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(faultproxy.Config{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads len(msg) bytes back within wait.
func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

// waitReceived waits up to 5 s for the target to have received want.
func waitReceived(e *echoServer, want string) {
	deadline := time.Now().Add(5 * time.Second)
	for e.received() != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

func TestForward(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	for _, msg := range []string{"hello", "world", string(bytes.Repeat([]byte("x"), 100_000))} {
		got, err := roundTrip(c, msg, 5*time.Second)
		if err != nil || got != msg {
			t.Fatalf("echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
	// A chunk is counted just after it is written: wait for the count.
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().BytesDown != 100_010 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s := p.Stats()
	if s.Accepted != 1 || s.Active != 1 || s.BytesUp != 100_010 || s.BytesDown != 100_010 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLatency(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	const up, down = 60 * time.Millisecond, 40 * time.Millisecond
	p.SetLatency(faultproxy.Upstream, up)
	p.SetLatency(faultproxy.Downstream, down)
	start := time.Now()
	if got, err := roundTrip(c, "ping", 10*time.Second); err != nil || got != "ping" {
		t.Fatalf("got %q, %v", got, err)
	}
	// A lower bound only: the delay is a minimum the proxy guarantees.
	if d := time.Since(start); d < up+down {
		t.Fatalf("round trip took %v, want at least %v", d, up+down)
	}
	p.SetLatency(faultproxy.Upstream, 0)
	p.SetLatency(faultproxy.Downstream, 0)
	if got, err := roundTrip(c, "pong", 10*time.Second); err != nil || got != "pong" {
		t.Fatalf("after clearing latency: %q, %v", got, err)
	}
}

func TestResetAll(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	if _, err := roundTrip(c, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("ResetAll reset %d links, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after reset: %v, want a connection error", err)
	}
	// New connections work again.
	c2 := dial(t, p)
	if got, err := roundTrip(c2, "b", 5*time.Second); err != nil || got != "b" {
		t.Fatalf("after reset: %q, %v", got, err)
	}
}

func TestHalfOpen(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	if _, err := roundTrip(c, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetHalfOpen(true)
	if _, err := roundTrip(c, "b", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("half-open read: %v, want a timeout (silence, not an error)", err)
	}
	if got := e.received(); got != "a" {
		t.Fatalf("target received %q while half-open, want %q", got, "a")
	}
	p.SetHalfOpen(false)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "b" {
		t.Fatalf("held byte after resume: %q, %v", buf, err)
	}
}

func TestPartialWrite(t *testing.T) {
	for _, d := range []faultproxy.Direction{faultproxy.Upstream, faultproxy.Downstream} {
		t.Run(d.String(), func(t *testing.T) {
			e := newEcho(t)
			p := newProxy(t, e.ln.Addr().String())
			p.SetPartialWrite(d, 3)
			c := dial(t, p)
			if _, err := c.Write([]byte("abcdefgh")); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(c)
			if isTimeout(err) {
				t.Fatalf("no close after a partial write: %v", err)
			}
			// Downstream the client gets the 3-byte prefix of the echo;
			// upstream the target gets the prefix and the link closes
			// (before or just after its echo of the prefix comes back).
			want := "abc"
			if d == faultproxy.Downstream {
				if string(got) != "abc" {
					t.Fatalf("client got %q, want %q", got, "abc")
				}
				want = "abcdefgh"
			} else if !bytes.HasPrefix([]byte("abc"), got) {
				t.Fatalf("client got %q, want a prefix of %q", got, "abc")
			}
			waitReceived(e, want)
			if r := e.received(); r != want {
				t.Fatalf("target received %q, want %q", r, want)
			}
			if s := p.Stats(); s.PartialWrites != 1 {
				t.Fatalf("stats %+v", s)
			}
			p.SetPartialWrite(d, -1)
			c2 := dial(t, p)
			if got, err := roundTrip(c2, "ok", 5*time.Second); err != nil || got != "ok" {
				t.Fatalf("after turning it off: %q, %v", got, err)
			}
		})
	}
}

func TestDropReplies(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	p.DropReplies(1)
	c := dial(t, p)
	if _, err := c.Write([]byte("INCR x")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read %d bytes, %v; want no reply and a connection error", n, err)
	}
	// The command reached the target; only the reply was lost.
	waitReceived(e, "INCR x")
	if got := e.received(); got != "INCR x" {
		t.Fatalf("target received %q", got)
	}
	if s := p.Stats(); s.RepliesDropped != 1 || s.BytesDown != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Every second reply: the first passes, the second is dropped.
	p.DropReplies(2)
	c2 := dial(t, p)
	var outcomes []bool
	for _, msg := range []string{"p", "q"} {
		_, err := roundTrip(c2, msg, 5*time.Second)
		outcomes = append(outcomes, err == nil)
	}
	if outcomes[0] == outcomes[1] {
		t.Fatalf("with DropReplies(2), outcomes %v; want one reply through and one dropped", outcomes)
	}
	p.DropReplies(0)
	c3 := dial(t, p)
	if got, err := roundTrip(c3, "ok", 5*time.Second); err != nil || got != "ok" {
		t.Fatalf("after turning it off: %q, %v", got, err)
	}
}

func TestPauseReset(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	open := dial(t, p)
	if _, err := roundTrip(open, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Pause(faultproxy.PauseReset)
	if _, err := roundTrip(open, "b", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("open link while paused: %v, want a connection error", err)
	}
	// A new connection is reset: during the handshake or at once after.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		if _, err := roundTrip(c, "c", 5*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("new link while paused: %v, want a connection error", err)
		}
		c.Close()
	}
	if s := p.Stats(); s.Refused < 1 || s.Resets < 1 {
		t.Fatalf("stats %+v", s)
	}
	p.Resume()
	c2 := dial(t, p)
	if got, err := roundTrip(c2, "d", 5*time.Second); err != nil || got != "d" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
}

func TestPauseHang(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	p.Pause(faultproxy.PauseHang)
	c := dial(t, p)
	if _, err := roundTrip(c, "x", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused (hang): %v, want a timeout", err)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "x" {
		t.Fatalf("after Resume: %q, %v", buf, err)
	}
}

func TestMaxConns(t *testing.T) {
	e := newEcho(t)
	p, err := faultproxy.New(faultproxy.Config{Target: e.ln.Addr().String(), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c1 := dial(t, p)
	if _, err := roundTrip(c1, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // reset during the handshake: refused, as wanted
	}
	defer c2.Close()
	if _, err := roundTrip(c2, "b", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("second link past MaxConns 1: %v, want a reset", err)
	}
}

func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := newProxy(t, dead)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // reset during the handshake: as good as refused
	}
	defer c.Close()
	if _, err := roundTrip(c, "a", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("target down: %v, want a connection error", err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := newEcho(t)
	before := goleak.IgnoreCurrent()
	p, err := faultproxy.New(faultproxy.Config{Target: e.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 5 {
		c := dial(t, p)
		conns = append(conns, c)
		if _, err := roundTrip(c, "a", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	p.SetHalfOpen(true) // writers blocked in a wait must end too
	for _, c := range conns {
		_, _ = c.Write([]byte("held"))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("link open after Close: %v", err)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still listens after Close")
	}
	// The echo server's handlers end once the proxy's sockets close.
	goleak.VerifyNone(t, before)
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []faultproxy.Config{
		{},
		{Target: "nohost"},
		{Target: "127.0.0.1:1", MaxConns: -1},
		{Target: "127.0.0.1:1", DialTimeout: -1},
	} {
		if _, err := faultproxy.New(cfg); !errors.Is(err, faultproxy.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
