package hotcount_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
)

// TestReadsCreateNoState: reads of counters never written — Get, a batch
// read of the documented maximum of 1,000 keys, Shards, SubKeys — answer 0
// and write nothing, neither to the cache nor to the durable store. The
// batch costs one round per node for the label sets and one for the
// values. Before, every such read pinned the counter's labels: a metadata
// key in Redis and a row in PostgreSQL per key read.
func TestReadsCreateNoState(t *testing.T) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, postgres.Config{URL: testenv.PostgresURL(), Schema: testenv.PostgresSchema(t), MaxConns: 4})
	if err != nil {
		t.Fatalf("open postgres (is it running at %s?): %v", testenv.PostgresURL(), err)
	}
	defer db.Close()
	st := openCluster(t)
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 8}, Durability: hotcount.DurabilityConfig{Store: db}})
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbsize := func() map[string]int64 {
		out := map[string]int64{}
		for _, p := range primaries {
			s, err := testenv.Do(ctx, p, "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			if out[p], err = strconv.ParseInt(s, 10, 64); err != nil {
				t.Fatalf("DBSIZE %s = %q", p, s)
			}
		}
		return out
	}
	run := uniqueKey(t)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:unseen:%d", run, i)
	}
	beforeKeys, beforeRounds := dbsize(), st.Stats()
	got, err := c.GetMulti(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got[k].Value != 0 {
			t.Fatalf("%s = %d", k, got[k].Value)
		}
	}
	afterRounds := st.Stats()
	for _, p := range primaries {
		if r := afterRounds[p].Rounds - beforeRounds[p].Rounds; r > 2 {
			t.Errorf("primary %s: %d rounds for a batch read of 1,000 keys, want at most 2 (label sets, values)", p, r)
		}
	}
	for _, k := range keys[:20] {
		if r, err := c.Get(ctx, k); err != nil || r.Value != 0 {
			t.Fatalf("Get(%s) = %+v %v", k, r, err)
		}
		if _, err := c.Shards(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SubKeys(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	after := dbsize()
	for _, p := range primaries {
		if after[p] != beforeKeys[p] {
			t.Errorf("primary %s: %d keys before the reads, %d after", p, beforeKeys[p], after[p])
		}
	}
	for _, k := range keys[:20] {
		if _, err := db.LoadMeta(ctx, k); !errors.Is(err, durable.ErrNotFound) {
			t.Errorf("the durable store has metadata of %s after reads: %v", k, err)
		}
		if data, ok, err := st.GetMeta(ctx, k); ok || err != nil {
			t.Errorf("the cache has metadata of %s after reads: %s %v", keyspace.MetaKey(k), data, err)
		}
	}
	// A cold counter's first write creates its one key and no metadata.
	if err := c.Incr(ctx, keys[0], 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LoadMeta(ctx, keys[0]); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("durable metadata of a cold counter: %v", err)
	}
	if _, ok, err := st.GetMeta(ctx, keys[0]); ok || err != nil {
		t.Errorf("metadata of a cold counter in the cache: %v", err)
	}
	var total int64
	for _, n := range dbsize() {
		total += n
	}
	var before int64
	for _, n := range after {
		before += n
	}
	if total != before+1 {
		t.Errorf("a cold counter's first write added %d keys, want 1", total-before)
	}
	// A counter of a namespace without cold start gets its labels pinned
	// by its first write, in both stores.
	warm := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 8, NoColdStart: true}, Durability: hotcount.DurabilityConfig{Store: db}})
	if err := warm.Incr(ctx, keys[1], 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LoadMeta(ctx, keys[1]); err != nil {
		t.Errorf("no durable metadata after the first write: %v", err)
	}
	if _, ok, err := st.GetMeta(ctx, keys[1]); !ok || err != nil {
		t.Errorf("no metadata in the cache after the first write: %v", err)
	}
}
