package proxy_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

var keySeq atomic.Int64

// uniq returns a prefix no other test uses.
func uniq(t testing.TB) string {
	return strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":" + time.Now().Format("150405.000000") + ":" + string(rune('a'+keySeq.Add(1)%26)) + ":"
}

// env is one proxy in front of the shared cluster, with its Client.
type env struct {
	addr   string
	srv    *proxy.Server
	client *hotcount.Client
}

// startProxy starts a Client with namespaces ns and a proxy in front of the
// shared cluster; both end with the test (the Client closed after the
// proxy, so that buffered deltas are flushed).
func startProxy(t testing.TB, ns []hotcount.Namespace, cfg proxy.Config) *env {
	t.Helper()
	return startProxyOn(t, cluster, ns, cfg)
}

// startProxyOn is startProxy in front of cl.
func startProxyOn(t testing.TB, cl *testenv.Cluster, ns []hotcount.Namespace, cfg proxy.Config) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cl.Seeds()}, Defaults: hotcount.Namespace{FlushInterval: 50 * time.Millisecond}, Namespaces: ns})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Counters = hc
	if cfg.Redis.Addrs == nil {
		cfg.Redis.Addrs = cl.Seeds()
	}
	srv, err := proxy.New(ctx, cfg)
	if err != nil {
		hc.Close(ctx)
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-done
		if err := hc.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &env{addr: ln.Addr().String(), srv: srv, client: hc}
}

// rawConn is a plain TCP connection that sends commands and reads whole
// replies as bytes.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// encode writes a command as a RESP array of bulk strings.
func encode(args ...string) []byte {
	var b []byte
	b = append(b, '*')
	b = append(b, itoa(len(args))...)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = append(b, itoa(len(a))...)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		d = append([]byte{byte('0' + n%10)}, d...)
		n /= 10
	}
	if neg {
		d = append([]byte{'-'}, d...)
	}
	return string(d)
}

// do sends one command and returns its whole reply, raw.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	r.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write(encode(args...)); err != nil {
		r.t.Fatalf("%v: write: %v", args, err)
	}
	s, err := readRaw(r.br)
	if err != nil {
		r.t.Fatalf("%v: read: %v", args, err)
	}
	return s
}

// readRaw reads one RESP2 or RESP3 reply and returns its bytes.
func readRaw(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	if err := readOne(br, &sb); err != nil {
		return sb.String(), err
	}
	return sb.String(), nil
}

func readOne(br *bufio.Reader, sb *strings.Builder) error {
	line, err := br.ReadString('\n')
	sb.WriteString(line)
	if err != nil {
		return err
	}
	if len(line) < 3 {
		return errShort
	}
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case '$', '!', '=':
		n := atoi(body)
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(br, buf); err != nil {
			return err
		}
		sb.Write(buf)
	case '*', '~', '>':
		n := atoi(body)
		for i := 0; i < n; i++ {
			if err := readOne(br, sb); err != nil {
				return err
			}
		}
	case '%', '|':
		n := atoi(body)
		for i := 0; i < 2*n; i++ {
			if err := readOne(br, sb); err != nil {
				return err
			}
		}
		if line[0] == '|' {
			return readOne(br, sb)
		}
	}
	return nil
}
