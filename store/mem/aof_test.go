package mem

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/store"
)

// TestAOFReplay: what a store with an append-only file acknowledged is
// there after Open on the same file without Close (as after a kill):
// values, deadlines, tokens (a replayed token keeps a retried op from
// counting twice), writer sequences, fold markers and metadata records.
func TestAOFReplay(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cache.aof")
	s, err := Open(Config{AOF: path})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := s.IncrBy(ctx, "{a#0}", 1); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	s.IncrByExpire(ctx, "{b#0}", 5, at)
	tok := store.IncrOp{Key: "{c#0}", Delta: 7, TokenKey: "{c#0}:tok"}
	seqOp := store.IncrOp{Key: "{c#1}", Delta: 3, SeqKey: "{c#1}:seq", Writer: "w", Seq: 4}
	if _, err := s.IncrMulti(ctx, []store.IncrOp{tok, seqOp}); err != nil {
		t.Fatal(err)
	}
	s.IncrBy(ctx, "{gone#0}", 1)
	s.Del(ctx, []string{"{gone#0}"})
	if _, err := s.FoldOut(ctx, "f", "1", "x"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.CASMeta(ctx, "m", 0, []byte(`{"epoch":1,"write":["0"],"read":["0"]}`)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	// No Close: the process was killed.
	r, err := Open(Config{AOF: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	vals, _ := r.Get(ctx, []string{"{a#0}", "{b#0}", "{c#0}", "{c#1}", "{gone#0}", "{f#1}:fold:x"})
	if want := []int64{400, 5, 7, 3, 0, 0}; !equal(vals, want) {
		t.Fatalf("after replay: %v, want %v", vals, want)
	}
	if d, _ := r.Deadlines(ctx, []string{"{b#0}"}); !d[0].At.Equal(at) {
		t.Fatalf("deadline after replay: %v, want %v", d[0].At, at)
	}
	res, err := r.IncrMulti(ctx, []store.IncrOp{tok, seqOp})
	if err != nil || res[0].Applied || res[1].Applied {
		t.Fatalf("retried ops after replay: %+v %v; want both refused (token and sequence replayed)", res, err)
	}
	if data, ok, _ := r.GetMeta(ctx, "m"); !ok || string(data) != `{"epoch":1,"write":["0"],"read":["0"]}` {
		t.Fatalf("metadata after replay: %q %v", data, ok)
	}
	if _, ok := r.nodeOf("{f#1}:fold:x").ints["{f#1}:fold:x"]; !ok {
		t.Fatal("fold marker not replayed")
	}
}

// TestAOFTornTail: a record cut short by a kill is dropped; the ones
// before it stay.
func TestAOFTornTail(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cache.aof")
	s, err := Open(Config{AOF: path})
	if err != nil {
		t.Fatal(err)
	}
	s.IncrBy(ctx, "{a#0}", 2)
	s.Close()
	rec := intRec("{a#0}", 99, time.Time{})
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(rec[:len(rec)-1])
	f.Close()
	r, err := Open(Config{AOF: path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if v, _ := r.Get(ctx, []string{"{a#0}"}); v[0] != 2 {
		t.Fatalf("after a torn record: %d, want 2", v[0])
	}
	r.IncrBy(ctx, "{a#0}", 1)
	r.Close()
	r2, _ := Open(Config{AOF: path})
	defer r2.Close()
	if v, _ := r2.Get(ctx, []string{"{a#0}"}); v[0] != 3 {
		t.Fatalf("a write after the torn record: %d, want 3", v[0])
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAOFRefusesOtherNodeCount: a file written by a store of another
// number of nodes is refused (its sentinels would not match, and a
// restore would count the checkpoints again).
func TestAOFRefusesOtherNodeCount(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.aof")
	s, err := Open(Config{AOF: path, Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.IncrBy(context.Background(), "{a#0}", 1)
	s.Close()
	_, err = Open(Config{AOF: path, Nodes: 5})
	if err == nil || !strings.Contains(err.Error(), "3 nodes") {
		t.Fatalf("Open with 5 nodes on a file of 3: %v", err)
	}
	// Both counts, for the caller to name its own setting.
	if ne := (*NodesError)(nil); !errors.As(err, &ne) || !errors.Is(err, ErrAOF) || ne.Written != 3 || ne.Nodes != 5 {
		t.Fatalf("Open with 5 nodes on a file of 3: %v, want ErrAOF and NodesError{3, 5}", err)
	}
	r, err := Open(Config{AOF: path, Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}
