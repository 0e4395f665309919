package proxy

import (
	"slices"
	"testing"
)

// TestClusterNodeAddrs: every node CLUSTER NODES lists, primaries and
// replicas (synced or not), but for failed ones, ones without an address
// and ones in a handshake.
func TestClusterNodeAddrs(t *testing.T) {
	text := "a1 127.0.0.1:7603@17603 slave b1 0 1 1 connected\n" +
		"b1 127.0.0.1:7600@17600 myself,master - 0 1 1 connected 0-5460\n" +
		"c1 127.0.0.1:7601@17601,node-b master - 0 1 2 connected 5461-16383\n" +
		"d1 127.0.0.1:7604@17604 slave,fail c1 0 1 2 disconnected\n" +
		"e1 :0@0 slave,noaddr c1 0 1 2 disconnected\n" +
		"f1 127.0.0.1:7605@17605 handshake - 0 0 0 connected\n" +
		"g1 127.0.0.1:7602@17602 slave,fail? c1 0 1 2 connected\n"
	want := []string{"127.0.0.1:7600", "127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603"}
	if got := clusterNodeAddrs(text); !slices.Equal(got, want) {
		t.Fatalf("clusterNodeAddrs = %v, want %v", got, want)
	}
}

// TestConfigFailure: OK only when every node said OK; otherwise the first
// refusing node's own error, the node named, and what was applied where.
func TestConfigFailure(t *testing.T) {
	addrs := []string{"127.0.0.1:7600", "127.0.0.1:7601", "127.0.0.1:7602"}
	for _, tc := range []struct {
		errs []string
		want string
	}{
		{[]string{"", "", ""}, ""},
		{[]string{"", "ERR bad value", ""}, "ERR bad value (hotcount proxy: CONFIG SET failed on node 127.0.0.1:7601; applied on 2 of 3 nodes)"},
		{[]string{"", "ERR one", "ERR two"}, "ERR one (hotcount proxy: CONFIG SET failed on node 127.0.0.1:7601 and 1 more; applied on 1 of 3 nodes)"},
		{[]string{"NOPERM no", "ERR x", "ERR x"}, "NOPERM no (hotcount proxy: CONFIG SET failed on node 127.0.0.1:7600 and 2 more; applied on 0 of 3 nodes)"},
	} {
		if got := configFailure("SET", addrs, tc.errs); got != tc.want {
			t.Errorf("configFailure(%q) = %q, want %q", tc.errs, got, tc.want)
		}
	}
}
