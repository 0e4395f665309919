package proxy_test

import (
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/proxy"
)

func TestSmoke(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true}}, proxy.Config{})
	c := dialRaw(t, e.addr)
	for _, cmd := range [][]string{
		{"PING"}, {"SET", p + "a", "1"}, {"GET", p + "a"}, {"INCR", p + "likes:1"}, {"INCR", p + "likes:1"},
		{"GET", p + "likes:1"}, {"MGET", p + "a", p + "likes:1", p + "b", p + "likes:2"},
		{"HELLO", "3"}, {"GET", p + "nope"}, {"HGETALL", p + "h"}, {"HSET", p + "h", "f", "v"}, {"HGETALL", p + "h"},
		{"MULTI"}, {"SET", p + "x", "1"}, {"INCR", p + "x"}, {"EXEC"}, {"APPEND", p + "likes:1", "x"},
		{"DEL", p + "likes:1", p + "a", p + "zz"}, {"GET", p + "likes:1"},
	} {
		t.Logf("%q -> %q", cmd, c.do(cmd...))
	}
}
