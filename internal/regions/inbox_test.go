package regions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/sqlite"
)

// scriptsLast is a peer's cache as a cluster may run a pipelined round:
// the script calls (the receiving script, on the nodes of the bucket
// hashes) after the other commands (the inbox, on other nodes), with
// between run in the gap, as the peer's own loops would, and after (when
// set) once the scripts ran.
type scriptsLast struct {
	rueidis.Client
	between, after func()
}

func (c scriptsLast) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	var plain, scripts []rueidis.Completed
	var plainAt, scriptsAt []int
	for i, cmd := range cmds {
		if name := strings.ToUpper(cmd.Commands()[0]); name == "EVAL" || name == "EVALSHA" {
			scripts, scriptsAt = append(scripts, cmd), append(scriptsAt, i)
		} else {
			plain, plainAt = append(plain, cmd), append(plainAt, i)
		}
	}
	out := make([]rueidis.RedisResult, len(cmds))
	if len(plain) > 0 {
		for j, r := range c.Client.DoMulti(ctx, plain...) {
			out[plainAt[j]] = r
		}
	}
	if len(plain) > 0 && len(scripts) > 0 {
		c.between()
	}
	if len(scripts) > 0 {
		for j, r := range c.Client.DoMulti(ctx, scripts...) {
			out[scriptsAt[j]] = r
		}
		if c.after != nil {
			c.after()
		}
	}
	return out
}

// pair is two regions' Services on their own nodes, their loops idle (an
// hour's interval), for a test to run the ship round and the drain of the
// inbox step by step: eu ships to us through peer (a client of us's
// cache, wrapped by wrap).
type pair struct {
	eu, us    *Service
	local     rueidis.Client // eu's cache
	peer      rueidis.Client // us's cache
	usDurable *sqlite.DB
	inboxes   []string // us's inbox boxes (takeBoxes)
}

func newPair(t *testing.T, euDurable durable.Regions, wrap func(rueidis.Client) rueidis.Client) *pair {
	t.Helper()
	local, remote := node(t), node(t)
	p := &pair{local: client(t, local.Addr), peer: client(t, remote.Addr)}
	db, err := sqlite.Open(t.Context(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p.usDurable = db
	seven := func(ctx context.Context, keys []string) (map[string]int64, error) {
		out := map[string]int64{}
		for _, k := range keys {
			out[k] = 7
		}
		return out, nil
	}
	p.us, err = New(Config{Region: "us", Local: p.peer, Totals: seven, Durable: db, Interval: time.Hour, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.us.Close(context.Background()) })
	p.eu, err = New(Config{Region: "eu", Local: p.local, Totals: seven, Durable: euDurable, Interval: time.Hour, LeaseTTL: time.Hour,
		Peers: []Peer{{Name: "us", Connect: func(ctx context.Context) (rueidis.Client, error) {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{remote.Addr}, DisableCache: true,
				ClientSetInfo: rueidis.DisableClientSetInfo})
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.eu.Close(context.Background()) })
	p.inboxes = takeBoxes("in", "")
	return p
}

// token waits for eu's lease and returns its token.
func (p *pair) token(t *testing.T) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tok := p.eu.token.Load(); tok != 0 {
			return tok
		}
		if time.Now().After(deadline) {
			t.Fatal("eu did not take its lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drain runs us's inbox drain as its lease holder's loop does, n times.
func (p *pair) drain(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := p.us.drainInbox(p.inboxes); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInboxMarkAfterRecords: the peer's lease holder drains its inbox
// (twice, as a loaded loop whose ticks queued up does) while the records
// of a ship round are still on their way to the bucket hash's node. Every
// part the peer holds in its cache also gets its row in the peer's
// durable store: the inbox is marked only once the records are there.
func TestInboxMarkAfterRecords(t *testing.T) {
	var p *pair
	p = newPair(t, nil, func(c rueidis.Client) rueidis.Client {
		return scriptsLast{Client: c, between: func() { p.drain(t, 2) }}
	})
	ctx := context.Background()
	tok := p.token(t)
	if err := mark(ctx, p.local, []string{"k"}, p.eu.outboxes); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 20 {
		var n int
		if n, _, err = p.eu.ship(p.eu.links[0], tok); err == nil && n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := peerPart(t, p.peer, "k", "eu"); !ok || got.Value != 7 {
		t.Fatalf("us holds eu's part %+v (%v), want 7", got, ok)
	}
	p.drain(t, 1) // us's next interval
	rows, err := p.usDurable.LoadRegionParts(ctx, []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows["k"]) != 1 || rows["k"][0].Origin != "eu" || rows["k"][0].Value != 7 {
		t.Fatalf("us's durable store holds %+v of k; want eu's part, 7, which its cache holds", rows["k"])
	}
	if n, err := pending(ctx, p.peer, p.inboxes); err != nil || n != 0 {
		t.Fatalf("us's inbox holds %d entries (%v), want none", n, err)
	}
}

// failingSave is a durable store whose SaveRegionParts fails while fail
// is set.
type failingSave struct {
	durable.Regions
	fail bool
}

var errSave = errors.New("save failed")

func (f *failingSave) SaveRegionParts(ctx context.Context, parts []durable.RegionPart) error {
	if f.fail {
		return errSave
	}
	return f.Regions.SaveRegionParts(ctx, parts)
}

// TestOwnPartSavedBeforeAck: a ship round whose save of the own part in
// the durable store fails leaves the counter in the outbox, and the next
// round saves it.
func TestOwnPartSavedBeforeAck(t *testing.T) {
	db, err := sqlite.Open(t.Context(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := &failingSave{Regions: db, fail: true}
	p := newPair(t, store, func(c rueidis.Client) rueidis.Client { return c })
	ctx := context.Background()
	tok := p.token(t)
	if err := mark(ctx, p.local, []string{"k"}, p.eu.outboxes); err != nil {
		t.Fatal(err)
	}
	outboxes := takeBoxes("out", "us")
	for i := 0; ; i++ {
		_, _, err = p.eu.ship(p.eu.links[0], tok)
		if errors.Is(err, errSave) {
			break
		}
		if i == 20 {
			t.Fatalf("the round did not reach the save: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := pending(ctx, p.local, outboxes); err != nil || n == 0 {
		t.Fatalf("after a failed save the outbox holds %d entries (%v); want k still in it", n, err)
	}
	store.fail = false
	// (The round after finds that us does not know eu, whose first round
	// failed: the resync puts k into the outbox again.)
	for range 2 {
		if _, _, err := p.eu.ship(p.eu.links[0], tok); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.LoadRegionParts(ctx, []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows["k"]) != 1 || rows["k"][0].Origin != "eu" || rows["k"][0].Value != 7 {
		t.Fatalf("eu's durable store holds %+v of k; want its own part, 7", rows["k"])
	}
	if n, err := pending(ctx, p.local, outboxes); err != nil || n != 0 {
		t.Fatalf("the outbox holds %d entries (%v), want none", n, err)
	}
}

// TestPeerEmptiedDuringFirstRound: the peer's cache comes back empty
// right after the records of the round that first finds it not knowing
// this region reached it. The resync that round starts ships those
// counters again too: the peer ends up with them.
func TestPeerEmptiedDuringFirstRound(t *testing.T) {
	db, err := sqlite.Open(t.Context(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var p *pair
	flushed := false
	p = newPair(t, db, func(c rueidis.Client) rueidis.Client {
		return scriptsLast{Client: c, between: func() {}, after: func() {
			if _, ok := peerPart(t, p.peer, "k", "eu"); ok && !flushed {
				flushed = true
				if err := p.peer.Do(context.Background(), p.peer.B().Flushall().Build()).Error(); err != nil {
					t.Error(err)
				}
			}
		}}
	})
	ctx := context.Background()
	tok := p.token(t)
	if err := mark(ctx, p.local, []string{"k"}, p.eu.outboxes); err != nil {
		t.Fatal(err)
	}
	for i := 0; !flushed; i++ {
		if _, _, err := p.eu.ship(p.eu.links[0], tok); err != nil && i == 20 {
			t.Fatal(err)
		}
	}
	if _, ok := peerPart(t, p.peer, "k", "eu"); ok {
		t.Fatal("the flush left eu's part in us")
	}
	// The rounds that follow.
	for range 3 {
		if _, _, err := p.eu.ship(p.eu.links[0], tok); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := peerPart(t, p.peer, "k", "eu"); !ok || got.Value != 7 {
		t.Fatalf("us holds eu's part %+v (%v), want 7", got, ok)
	}
}
