package proxy

import (
	"testing"

	"github.com/tidwall/redcon"
)

var benchReq = []byte("*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$16\r\n0123456789abcdef\r\n")

// BenchmarkParseRequest parses one pipelined SET; BenchmarkParseRedcon is
// the parser the proxy used before, for comparison.
func BenchmarkParseRequest(b *testing.B) {
	args := make([][]byte, 0, 8)
	lim := parseLimits{maxBulk: DefaultMaxBulkLen}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n, a, _, err := parseRequest(benchReq, args, lim)
		if err != nil || n != len(benchReq) || len(a) != 3 {
			b.Fatal(n, a, err)
		}
	}
}

func BenchmarkParseRedcon(b *testing.B) {
	args := make([][]byte, 0, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ok, a, _, _, err := redcon.ReadNextCommand(benchReq, args)
		if err != nil || !ok || len(a) != 3 {
			b.Fatal(ok, a, err)
		}
	}
}

// FuzzParseRequest: any input parses without a panic, and a request
// taken whole consumes bytes within the input.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{string(benchReq), "PING\r\n", "*-1\r\n", "*1\r\n$-1\r\n", "ECHO \"a\\x41\"\r\n", "*2\r\n$1\r\na\r\n$9223372036854775807\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n, args, _, err := parseRequest(in, nil, parseLimits{maxBulk: 1 << 20})
		if err != nil {
			return
		}
		if n < 0 || n > len(in) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		if n > 0 && len(args) > n {
			t.Fatalf("%d arguments in %d bytes", len(args), n)
		}
	})
}
