package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// TestTransactionQueuedErrorAcrossSlotMove: a command of a transaction
// that the node answers an error when it is queued (here OOM, the node
// over its maxmemory) makes Redis abort the transaction: EXEC answers
// EXECABORT and runs nothing. The slot moving afterwards must not change
// that: the proxy, sending the transaction again to the new owner, would
// have it queued there without the error and run it whole, the command
// the client was told failed included. Before, EXEC answered the
// results of every command and the INCRs ran.
func TestTransactionQueuedErrorAcrossSlotMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := startProxyOn(t, cl, nil, proxy.Config{})
	for _, tc := range []struct {
		name  string
		after [][]string // queued after the move, each answered QUEUED
	}{
		{"moved before EXEC", nil},
		{"moved while queued", [][]string{{"INCR", "k"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "{" + uniq(t) + "}k"
			r := dialRaw(t, e.addr)
			if got := r.do("SET", key, "0"); got != "+OK\r\n" {
				t.Fatalf("SET: %q", got)
			}
			src := settledOwner(t, ctx, ps, key)
			for _, c := range [][]string{{"MULTI"}, {"INCR", key}} {
				if got := r.do(c...); got != "+OK\r\n" && got != "+QUEUED\r\n" {
					t.Fatalf("%q: %q", c, got)
				}
			}
			// The slot's owner refuses the next command, as a node over
			// its maxmemory does.
			if _, err := testenv.Do(ctx, src, "CONFIG", "SET", "maxmemory", "1"); err != nil {
				t.Fatal(err)
			}
			got := r.do("SET", key+"x", "v")
			if _, err := testenv.Do(ctx, src, "CONFIG", "SET", "maxmemory", "0"); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, "-OOM") {
				t.Fatalf("SET queued on a node over its maxmemory: %q, want OOM", got)
			}
			moveKeySlot(t, ctx, ps, key)
			for _, c := range tc.after {
				c = []string{c[0], key}
				if got := r.do(c...); got != "+QUEUED\r\n" {
					t.Fatalf("%q queued after the move: %q", c, got)
				}
			}
			if got := r.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
				t.Fatalf("EXEC of a transaction one of whose commands was refused: %q, want EXECABORT (as Redis answers)", got)
			}
			if got := r.do("GET", key); got != "$1\r\n0\r\n" {
				t.Fatalf("GET after the aborted transaction: %q, want 0 (nothing of it runs)", got)
			}
			if got := r.do("EXISTS", key+"x"); got != ":0\r\n" {
				t.Fatalf("EXISTS of the refused SET's key: %q, want 0", got)
			}
		})
	}
}
