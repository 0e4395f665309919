package proxy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
	"github.com/redis/go-redis/v9"
)

// TestConfigSet drives CONFIG SET, CONFIG RESETSTAT and CONFIG GET through
// the proxy with go-redis: refused by default, with an error that names
// the option; with AllowConfig, set on every node of the cluster, replicas
// included (read back from each node directly), every node's statistics
// reset, and a parameter the nodes refuse answered with their error and
// the node named.
func TestConfigSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const param = "slowlog-max-len"
	nodes := cluster.Nodes()
	get := func(t *testing.T, addr string) string {
		t.Helper()
		out, err := testenv.Do(ctx, addr, "CONFIG", "GET", param)
		if err != nil {
			t.Fatalf("CONFIG GET on %s: %v", addr, err)
		}
		if f := strings.Split(out, "\n"); len(f) == 2 {
			return f[1]
		}
		t.Fatalf("CONFIG GET on %s: %q", addr, out)
		return ""
	}
	was := map[string]string{}
	for _, n := range nodes {
		was[n.Addr] = get(t, n.Addr)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if _, err := testenv.Do(context.Background(), n.Addr, "CONFIG", "SET", param, was[n.Addr]); err != nil {
				t.Errorf("restoring %s on %s: %v", param, n.Addr, err)
			}
		}
	})
	want := strconv.Itoa(1000 + int(time.Now().UnixNano()%100000))
	for _, proto := range []int{2, 3} {
		t.Run("off/RESP"+strconv.Itoa(proto), func(t *testing.T) {
			e := startProxy(t, nil, proxy.Config{})
			rdb := redis.NewClient(&redis.Options{Addr: e.addr, Protocol: proto})
			defer rdb.Close()
			for _, err := range []error{
				rdb.ConfigSet(ctx, param, want).Err(),
				rdb.ConfigResetStat(ctx).Err(),
			} {
				if err == nil || !strings.Contains(err.Error(), "is refused by the hotcount proxy") || !strings.Contains(err.Error(), "resp_allow_config: true") {
					t.Errorf("refused CONFIG: %v, want the refusal naming resp_allow_config", err)
				}
			}
			for _, n := range nodes {
				if got := get(t, n.Addr); got != was[n.Addr] {
					t.Errorf("%s on %s = %s after a refused CONFIG SET, want %s", param, n.Addr, got, was[n.Addr])
				}
			}
			if m, err := rdb.ConfigGet(ctx, param).Result(); err != nil || m[param] != was[nodes[0].Addr] {
				t.Errorf("CONFIG GET through the proxy: %v, %v", m, err)
			}
		})
	}
	t.Run("on", func(t *testing.T) {
		e := startProxy(t, nil, proxy.Config{AllowConfig: true})
		rdb := redis.NewClient(&redis.Options{Addr: e.addr})
		defer rdb.Close()
		if err := rdb.ConfigSet(ctx, param, want).Err(); err != nil {
			t.Fatalf("CONFIG SET: %v", err)
		}
		for _, n := range nodes {
			if got := get(t, n.Addr); got != want {
				t.Errorf("%s on %s = %s, want %s", param, n.Addr, got, want)
			}
		}
		// CONFIG GET goes to any node: every one answers the new value.
		for i := 0; i < 20; i++ {
			if m, err := rdb.ConfigGet(ctx, param).Result(); err != nil || m[param] != want {
				t.Fatalf("CONFIG GET through the proxy: %v, %v; want %s", m, err, want)
			}
		}
		// CONFIG RESETSTAT: an error counted on every node is gone.
		for _, n := range nodes {
			if _, err := testenv.Do(ctx, n.Addr, "HC-NO-SUCH-COMMAND"); err == nil {
				t.Fatalf("an unknown command on %s did not fail", n.Addr)
			}
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		for _, n := range nodes {
			out, err := testenv.Do(ctx, n.Addr, "INFO", "errorstats")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "errorstat_ERR:") {
				t.Errorf("INFO errorstats of %s after CONFIG RESETSTAT: %q", n.Addr, out)
			}
		}
		// A parameter the nodes refuse: their error, the node named.
		_, direct := testenv.Do(ctx, nodes[0].Addr, "CONFIG", "SET", "hc-no-such-param", "1")
		if direct == nil {
			t.Fatal("a node accepted an unknown parameter")
		}
		nodeErr := direct.Error()[strings.Index(direct.Error(), "ERR "):]
		err := rdb.ConfigSet(ctx, "hc-no-such-param", "1").Err()
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			t.Fatalf("CONFIG SET of an unknown parameter: %v, want an error reply", err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, nodeErr) || !strings.Contains(msg, "failed on node 127.0.0.1:") ||
			!strings.Contains(msg, "applied on 0 of "+strconv.Itoa(len(nodes))+" nodes") {
			t.Errorf("CONFIG SET of an unknown parameter: %q, want the node's %q, the node named and none applied", msg, nodeErr)
		}
		// An arity error is the node's too.
		if err := rdb.Do(ctx, "CONFIG", "SET", param).Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
			t.Errorf("CONFIG SET without a value: %v", err)
		}
		if err := rdb.Do(ctx, "CONFIG", "REWRITE").Err(); err == nil || !strings.Contains(err.Error(), "not supported by the hotcount proxy") {
			t.Errorf("CONFIG REWRITE: %v, want refused", err)
		}
	})
}

// TestConfigSetNodeDown: with a replica killed, CONFIG SET through the
// proxy is not OK, and its error names the node that did not apply it;
// the nodes that are up applied it.
func TestConfigSetNodeDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop() })
	e := startProxyOn(t, cl, nil, proxy.Config{AllowConfig: true, Timeout: time.Second})
	rdb := redis.NewClient(&redis.Options{Addr: e.addr})
	defer rdb.Close()
	if err := rdb.ConfigSet(ctx, "slowlog-max-len", "200").Err(); err != nil {
		t.Fatalf("CONFIG SET with every node up: %v", err)
	}
	victim := cl.Nodes()[len(cl.Nodes())-1] // a replica
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	// Several times: the node list must not be asked of the node that is
	// down (the cluster client picked any node, 1 in 6 the victim).
	for range 12 {
		err = rdb.ConfigSet(ctx, "slowlog-max-len", "300").Err()
		if err == nil || !strings.Contains(err.Error(), "failed on node "+victim.Addr+";") ||
			!strings.Contains(err.Error(), "applied on 5 of 6 nodes") {
			t.Fatalf("CONFIG SET with %s down: %v, want an error naming it, the other 5 applied", victim.Addr, err)
		}
	}
	for _, n := range cl.Nodes() {
		if n == victim {
			continue
		}
		if out, err := testenv.Do(ctx, n.Addr, "CONFIG", "GET", "slowlog-max-len"); err != nil || out != "slowlog-max-len\n300" {
			t.Errorf("slowlog-max-len on %s: %q %v, want 300", n.Addr, out, err)
		}
	}
}
