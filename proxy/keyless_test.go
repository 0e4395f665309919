package proxy_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
	"github.com/redis/rueidis"
)

// keyOfSlot returns a key of the given slot.
func keyOfSlot(t *testing.T, slot uint16) string {
	for i := 0; i < 1<<20; i++ {
		k := "k" + itoa(i)
		if keyspace.Slot(k) == slot {
			return k
		}
	}
	t.Fatal("no key found")
	return ""
}

// TestKeylessScripts: scripts without keys go to a primary, and script
// loads reach every primary, so EVALSHA, SCRIPT EXISTS and keyless write
// scripts answer as a standalone Redis does.
func TestKeylessScripts(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	if got := r.do("SCRIPT", "FLUSH"); got != "+OK\r\n" {
		t.Fatalf("SCRIPT FLUSH: %q", got)
	}
	sha := strings.TrimSpace(strings.Split(r.do("SCRIPT", "LOAD", "return 42"), "\r\n")[1])
	bad := 0
	for i := 0; i < 200; i++ {
		if got := r.do("EVALSHA", sha, "0"); got != ":42\r\n" {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("EVALSHA after SCRIPT LOAD failed %d times in 200", bad)
	}
	sum := sha1.Sum([]byte("return 1+1"))
	sha2 := hex.EncodeToString(sum[:])
	if got := r.do("EVAL", "return 1+1", "0"); got != ":2\r\n" {
		t.Fatalf("EVAL: %q", got)
	}
	if got := r.do("SCRIPT", "EXISTS", sha2, sha, "ffffffffffffffffffffffffffffffffffffffff"); got != "*3\r\n:1\r\n:1\r\n:0\r\n" {
		t.Errorf("SCRIPT EXISTS after EVAL: %q", got)
	}
	// A keyless write script, writing a key of slot 0 (the primary that
	// serves keyless commands): never a replica's READONLY.
	k := keyOfSlot(t, 0)
	bad = 0
	var last string
	for i := 0; i < 100; i++ {
		if got := r.do("EVAL", "return redis.call('SET', ARGV[1], 'v')", "0", k); got != "+OK\r\n" {
			bad, last = bad+1, got
		}
	}
	if bad > 0 {
		t.Errorf("keyless write script failed %d times in 100: %q", bad, last)
	}
	// Functions load on every primary; FCALL without keys runs.
	lib := "#!lua name=hc_test_lib\nredis.register_function('hc_answer', function() return 7 end)"
	if got := r.do("FUNCTION", "LOAD", "REPLACE", lib); !strings.HasPrefix(got, "$") {
		t.Fatalf("FUNCTION LOAD: %q", got)
	}
	bad = 0
	for i := 0; i < 50; i++ {
		if got := r.do("FCALL", "hc_answer", "0"); got != ":7\r\n" {
			bad, last = bad+1, got
		}
	}
	if bad > 0 {
		t.Errorf("FCALL failed %d times in 50: %q", bad, last)
	}
	if got := r.do("FUNCTION", "FLUSH"); got != "+OK\r\n" {
		t.Fatalf("FUNCTION FLUSH: %q", got)
	}
	if got := r.do("FUNCTION", "LIST"); got != "*0\r\n" {
		t.Fatalf("FUNCTION LIST after FLUSH: %q", got)
	}
}

// TestFlushAndRandomKey: FLUSHALL is refused by default; allowed, it
// empties every primary, and RANDOMKEY then finds the one key there is.
// hotcount's own keys are hidden from KEYS, SCAN and RANDOMKEY, and
// refused by name.
func TestFlushAndRandomKey(t *testing.T) {
	p := uniq(t)
	refused := startProxy(t, nil, proxy.Config{})
	if got := dialRaw(t, refused.addr).do("FLUSHALL"); !strings.HasPrefix(got, "-ERR FLUSHALL is refused by the hotcount proxy") {
		t.Fatalf("FLUSHALL by default: %q", got)
	}
	e := startProxy(t, []hotcount.Namespace{{Prefix: p + "c:", N: 4}}, proxy.Config{AllowFlush: true})
	r := dialRaw(t, e.addr)
	if got := r.do("FLUSHALL"); got != "+OK\r\n" {
		t.Fatalf("FLUSHALL: %q", got)
	}
	if got := r.do("DBSIZE"); got != ":0\r\n" {
		t.Fatalf("DBSIZE after FLUSHALL: %q", got)
	}
	if got := r.do("RANDOMKEY"); got != "$-1\r\n" {
		t.Fatalf("RANDOMKEY on an empty cluster: %q", got)
	}
	r.do("SET", p+"only", "1")
	for i := 0; i < 100; i++ {
		if got := r.do("RANDOMKEY"); got != "$"+itoa(len(p+"only"))+"\r\n"+p+"only\r\n" {
			t.Fatalf("RANDOMKEY %d with one key: %q", i, got)
		}
	}
	// A sharded counter's sub-keys exist on the nodes, and are hidden.
	for i := 0; i < 20; i++ {
		r.do("INCR", p+"c:likes")
	}
	if err := e.client.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	subs, err := e.client.SubKeys(context.Background(), p+"c:likes")
	if err != nil || len(subs) == 0 {
		t.Fatalf("SubKeys: %v %v", subs, err)
	}
	if got := r.do("KEYS", "*"); got != "*1\r\n$"+itoa(len(p+"only"))+"\r\n"+p+"only\r\n" {
		t.Errorf("KEYS * shows more than the plain key: %q", got)
	}
	for i := 0; i < 30; i++ {
		if got := r.do("RANDOMKEY"); !strings.Contains(got, p+"only") {
			t.Fatalf("RANDOMKEY answered %q", got)
		}
	}
	if got := r.do("GET", subs[0]); !strings.Contains(got, "part of hotcount's own state") {
		t.Errorf("GET of a sub-key: %q", got)
	}
	if got := r.do("DEL", "hotcount:sentinel:{x}"); !strings.Contains(got, "part of hotcount's own state") {
		t.Errorf("DEL of a sentinel: %q", got)
	}
}

// TestFlushAllDurable: FLUSHALL through a proxy whose Client checkpoints
// to a durable store clears the counters there too and keeps the
// sentinels: the next checkpoint round restores nothing.
func TestFlushAllDurable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := uniq(t)
	hc, err := hotcount.New(ctx, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Namespaces: []hotcount.Namespace{{Prefix: p, N: 2}},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(ctx)
	e := startProxyWith(t, hc, proxy.Config{AllowFlush: true})
	r := dialRaw(t, e.addr)
	r.do("INCRBY", p+"views", "5")
	if err := hc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.do("FLUSHALL"); got != "+OK\r\n" {
		t.Fatalf("FLUSHALL: %q", got)
	}
	rep, err := hc.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hc.Restores()) != 0 {
		t.Fatalf("a checkpoint round after FLUSHALL restored: %+v (report %+v)", hc.Restores(), rep)
	}
	if got := r.do("GET", p+"views"); got != "$-1\r\n" {
		t.Fatalf("GET after FLUSHALL and a checkpoint round: %q", got)
	}
}

// startProxyWith starts a proxy in front of the shared cluster over a
// Client the test owns (and closes after the proxy).
func startProxyWith(t *testing.T, hc *hotcount.Client, cfg proxy.Config) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Counters = hc
	cfg.Redis.Addrs = cluster.Seeds()
	srv, err := proxy.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return &env{addr: ln.Addr().String(), srv: srv, client: hc}
}

// TestMultiRefusalsAsRedis: a command Redis refuses inside MULTI gets
// Redis's error there and aborts EXEC; one of hotcount's own keys is
// refused inside MULTI as outside.
func TestMultiRefusalsAsRedis(t *testing.T) {
	e := startProxy(t, nil, proxy.Config{})
	r := dialRaw(t, e.addr)
	for _, step := range [][2]string{
		{"MULTI", "+OK\r\n"},
		{"SAVE", "-ERR Command not allowed inside a transaction\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
	} {
		if got := r.do(step[0]); got != step[1] {
			t.Fatalf("%s: %q, want %q", step[0], got, step[1])
		}
	}
	r.do("MULTI")
	if got := r.do("DEL", "hotcount:sentinel:{x}"); !strings.Contains(got, "part of hotcount's own state") {
		t.Fatalf("DEL of a sentinel inside MULTI: %q", got)
	}
	r.do("DISCARD")
}

// TestRandomKeyAmongOwnKeys: RANDOMKEY finds the user's one key even when
// the primary holding it has thousands of hotcount's own keys, which a
// primary's own RANDOMKEY picks almost every time.
func TestRandomKeyAmongOwnKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := uniq(t)
	e := startProxy(t, nil, proxy.Config{AllowFlush: true})
	r := dialRaw(t, e.addr)
	if got := r.do("FLUSHALL"); got != "+OK\r\n" {
		t.Fatalf("FLUSHALL: %q", got)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cluster.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	only := p + "only"
	cmds := make(rueidis.Commands, 0, 4000)
	for i := range 4000 {
		// Own keys in the slot of the user's key, so on its primary.
		cmds = append(cmds, rc.B().Set().Key("hotcount:pad:{"+only+"}:"+itoa(i)).Value("1").Build())
	}
	dels := make(rueidis.Commands, 0, len(cmds))
	for i := range 4000 {
		dels = append(dels, rc.B().Del().Key("hotcount:pad:{"+only+"}:"+itoa(i)).Build())
	}
	// FLUSHALL keeps hotcount's keys: the padding goes by name.
	defer rc.DoMulti(context.Background(), dels...)
	for _, res := range rc.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.do("RANDOMKEY"); got != "$-1\r\n" {
		t.Fatalf("RANDOMKEY with only hotcount's keys: %q", got)
	}
	r.do("SET", only, "1")
	for i := range 5 {
		if got := r.do("RANDOMKEY"); got != "$"+itoa(len(only))+"\r\n"+only+"\r\n" {
			t.Fatalf("RANDOMKEY %d: %q", i, got)
		}
	}
}
