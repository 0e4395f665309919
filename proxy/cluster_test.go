package proxy_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/proxy"
)

// TestGoRedisClusterClient: go-redis's ClusterClient, pointed at the
// proxy, learns a cluster of one node (the proxy), counts exactly from 16
// concurrent writers on a counter key and runs plain commands across
// slots, never talking to a node of the real cluster.
func TestGoRedisClusterClient(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, N: 4, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{e.addr}, MaxRedirects: 0})
	defer cc.Close()
	key := p + "likes:post:42"
	const writers, each = 16, 100
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := cc.Incr(ctx, key).Err(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := int64(writers * each)
	var got int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, _ = cc.Get(ctx, key).Int64(); got == want {
			break
		}
	}
	if got != want {
		t.Fatalf("ClusterClient read %d after %d increments", got, want)
	}
	// Plain keys across slots: go-redis splits MSET/MGET by slot itself,
	// and sends each part to the slot's "node", the proxy.
	var keys []string
	for i := 0; i < 40; i++ {
		k := p + "plain:" + strconv.Itoa(i)
		keys = append(keys, k)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	vals, err := cc.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != strconv.Itoa(i) {
			t.Fatalf("MGET %s = %v", keys[i], v)
		}
	}
	if n, err := cc.Del(ctx, keys...).Result(); err != nil || n != int64(len(keys)) {
		t.Fatalf("DEL across slots: %d, %v", n, err)
	}
	var addrs []string
	var mu sync.Mutex
	if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		addrs = append(addrs, c.Options().Addr)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0] != e.addr {
		t.Fatalf("ClusterClient talks to %v, want only the proxy %s", addrs, e.addr)
	}
}

// TestClusterGroup: with Announce and Peers, every proxy of the group
// answers the same slot map, split between them.
func TestClusterGroup(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{Announce: "127.0.0.1:7001", Peers: []string{"127.0.0.1:7002", "127.0.0.1:7000"}})
	r := dialRaw(t, e.addr)
	got := r.do("CLUSTER", "NODES")
	for _, want := range []string{"127.0.0.1:7000@17000 master - 0 0 1 connected 0-5460", "127.0.0.1:7001@17001 myself,master - 0 0 1 connected 5461-10921", "127.0.0.1:7002@17002 master - 0 0 1 connected 10922-16383"} {
		if !strings.Contains(got, want) {
			t.Errorf("CLUSTER NODES lacks %q:\n%s", want, got)
		}
	}
	if got := r.do("CLUSTER", "KEYSLOT", "foo"); got != ":12182\r\n" {
		t.Errorf("CLUSTER KEYSLOT foo: %q", got)
	}
	for _, cmd := range []string{"READONLY", "READWRITE"} {
		if got := r.do(cmd); got != "+OK\r\n" {
			t.Errorf("%s: %q", cmd, got)
		}
	}
}

// pythonClusterScript runs redis-py's RedisCluster against the proxy: 16
// threads increment one counter key, plain keys are set and read across
// slots, and the nodes it knows are printed.
const pythonClusterScript = `
import sys, threading, time
from redis.cluster import RedisCluster
host, port, key, prefix, each = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
rc = RedisCluster(host=host, port=port)
def work():
    for i in range(each):
        rc.incr(key)
ts = [threading.Thread(target=work) for _ in range(16)]
for t in ts: t.start()
for t in ts: t.join()
want = 16 * each
v = 0
for _ in range(600):
    v = int(rc.get(key))
    if v == want:
        break
    time.sleep(0.05)
if v != want:
    sys.exit("read %d, want %d" % (v, want))
keys = [prefix + str(i) for i in range(40)]
rc.mset_nonatomic({k: str(i) for i, k in enumerate(keys)})
vals = rc.mget_nonatomic(keys)
assert vals == [str(i).encode() for i in range(40)], vals
assert rc.delete(*keys) == 40
print(v, " ".join(sorted(n.name for n in rc.get_nodes())))
`

// TestPythonRedisCluster: Debian's python3-redis RedisCluster, pointed at
// the proxy, counts exactly from 16 threads and runs plain commands
// across slots, knowing only the proxy as a node.
func TestPythonRedisCluster(t *testing.T) {
	py := need(t, "python3", "/usr/bin/python3", "python3")
	if out, err := exec.Command(py, "-c", "from redis.cluster import RedisCluster").CombinedOutput(); err != nil {
		t.Fatalf("python3-redis is needed (apt-get install -y python3-redis; scripts/test installs it): %v %s", err, out)
	}
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, N: 4, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
	host, port := hostPort(t, e.addr)
	const each = 50
	out := strings.TrimSpace(runTool(t, py, "-c", pythonClusterScript, host, port, p+"likes:post:7", p+"plain:", strconv.Itoa(each)))
	if want := fmt.Sprintf("%d %s", 16*each, e.addr); out != want {
		t.Fatalf("RedisCluster printed %q, want %q", out, want)
	}
}
