package proxy_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// FuzzCommands sends arbitrary bytes to a proxy in front of a real Redis
// Cluster, as one connection's input: every input must end (no hang: the
// proxy answers, or closes, once the client half-closes), produce whole
// RESP replies, cause no panic and leave the proxy serving.
func FuzzCommands(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
		"*2\r\n$4\r\nINCR\r\n$9\r\nfz:likes1\r\n*3\r\n$6\r\nINCRBY\r\n$9\r\nfz:likes1\r\n$2\r\n-5\r\n",
		"*4\r\n$4\r\nMGET\r\n$9\r\nfz:likes1\r\n$1\r\na\r\n$1\r\nb\r\n",
		"*3\r\n$3\r\nDEL\r\n$9\r\nfz:likes1\r\n$1\r\nb\r\n",
		"*3\r\n$3\r\nSET\r\n$9\r\nfz:likes1\r\n$2\r\n10\r\n",
		"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$4\r\nINCR\r\n$3\r\nfz:\r\n",
		"*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$4\r\n{a}x\r\n$1\r\n1\r\n*2\r\n$4\r\nINCR\r\n$4\r\n{a}x\r\n*1\r\n$4\r\nEXEC\r\n",
		"*2\r\n$5\r\nWATCH\r\n$1\r\na\r\n*1\r\n$5\r\nMULTI\r\n*1\r\n$4\r\nEXEC\r\n",
		"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n",
		"*3\r\n$6\r\nSUNION\r\n$1\r\na\r\n$1\r\nb\r\n",
		"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
		"*4\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n1\r\n$1\r\nk\r\n",
		"*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n*1\r\n$6\r\nDBSIZE\r\n",
		"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n*1\r\n$4\r\nINFO\r\n",
		"PING\r\nECHO \"a b\"\r\n",
		"*1\r\n$3\r\nGE",
		"*1\r\n$9223372036854775807\r\n",
		"*1\r\n*1\r\n$4\r\nPING\r\n",
		"\x00\xff\xfe\x01junk\r\n",
		"$5 hello\r\n",
		"*2\r\n$6\r\nAPPEND\r\n$9\r\nfz:likes1\r\n",
	} {
		f.Add([]byte(s))
	}
	cl := cluster
	if cl == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		cl, err = testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
		cancel()
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { _ = cl.Stop() })
	}
	// The proxy logs each panic with its stack; the log is shown with the
	// input that caused it.
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	e := startProxyOn(f, cl, []hotcount.Namespace{{Prefix: "fz:", Buffered: true}}, proxy.Config{QueryBufferLimit: 64 << 10, MaxBulkLen: 32 << 10, Timeout: 2 * time.Second, Logger: logger})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 256<<10 {
			return
		}
		panics := e.srv.Stats().Panics
		out, err := exchange(t, e.addr, in)
		if err != nil {
			t.Fatalf("no end of the exchange: %v; input %q, got %q", err, in, out)
		}
		if _, err := parseReplies(out); err != nil {
			t.Fatalf("answer is not whole RESP replies: %v; input %q, got %q", err, in, out)
		}
		if n := e.srv.Stats().Panics - panics; n != 0 {
			t.Fatalf("%d panics; input %q; log:\n%s", n, in, log.String())
		}
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent use (the proxy's
// connections log from their own goroutines).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
