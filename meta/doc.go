// Package meta keeps the label sets of counters and changes them safely:
// grow, shrink (fold) and re-placement.
//
// # Metadata
//
// Every counter K has a record at keyspace.MetaKey(K), a JSON object
//
//	{"epoch":E,"write":[...],"read":[...],"folds":[...]}
//
// Write is the active label set: writers pick one of these sub-counters.
// Read is every label that may hold a value: readers sum all of them. Write
// is always a subset of Read. Folds is the journal of folds in progress.
// Each change increases the epoch by one and is written with compare-and-set
// on the epoch (atomic in the backend: a Lua script in Redis, one lock in the
// embedded store), so concurrent changers never overwrite each other. When a
// Durable store is configured every committed record is mirrored to it, and
// a record missing from the cache is restored from it; a record is dropped
// from the durable store first, then from the cache, so that no look-up
// restores a record just dropped.
//
// A counter without a record gets a default label set: placement.Choose on
// the current topology with the counter's N (or keyspace.NaiveLabels when
// Config.Naive is set). A placed default is pinned — written as epoch 1 on
// first use — so that a later slot migration, which changes what Choose
// returns, never changes the labels of a counter that already holds values.
//
// Managers cache records for Config.TTL (default 2 s) by an injected clock,
// so every process sees a change within one TTL. The protocol below relies on
// exactly that bound.
//
// # Growing
//
// New labels are added to Read (epoch+1); after one TTL, when every process
// sums them, they are added to Write (epoch+1). Growing never moves values.
//
// # Shrinking: the fold
//
// Removing label A, whose value moves into a remaining label B:
//
//	(a) remove A from Write, keep it in Read, journal {id, from A, to B,
//	    step "stopped"} (epoch+1);
//	(b) wait out the TTL plus Config.Margin: no process writes A any more;
//	    journal step "moving" (epoch+1);
//	(c) FoldOut in A's slot, atomically: if the marker {K#A}:fold:<id> exists
//	    return its value; else v = GET A, DECRBY A v, SET marker v → v;
//	(d) FoldIn in B's slot, atomically: if the marker {K#B}:foldin:<id>
//	    exists do nothing; else INCRBY B v, give B the counter's deadline
//	    plus store.DeadlineGrace unless it has one (PEXPIREAT … NX: a B
//	    never written is created by the fold), SET marker;
//	(e) re-fold stragglers: if GET A is not zero (a write that was in flight
//	    during the wait), repeat (c)–(d) with the id "<id>.2", "<id>.3", ...;
//	(f) retire A: remove it from Read and drop the journal entry (epoch+1).
//
// Markers carry their sub-counter's hash tag (keyspace.AuxKey), so each
// atomic step touches one slot. Every step is idempotent and the journal
// says where a fold stands, so a fold interrupted anywhere (the process
// killed) is finished by Resume without losing or duplicating anything:
// replaying (c) returns the stored v instead of draining again, and
// replaying (d) with a used marker does nothing. The scripts do no
// arithmetic in Lua (its numbers are doubles): the value GET returns is
// passed as a string to DECRBY, INCRBY and the marker.
//
// A sum read between (c) and (d) — a few milliseconds, or until Resume if
// the process dies in between — is low by v; the total afterwards is exact.
// The protocol assumes a writer uses a label within TTL+Margin of the
// Labels call that returned it (see Config.Margin).
//
// # Record marks
//
// A counter with a record also has a mark, keyspace.MarkKey(K) =
// "{K#0}:rec", in the slot of its cold sub-counter, so that a writer can
// check, in the same round trip as an INCRBY of "{K#0}" and on the same
// node, whether the counter has a record at all: no mark, no record, so
// the counter is cold, with no deadline (Manager.NoRecord caches it so).
// The Manager keeps the invariant "a record has its mark" for its own
// writes:
//
//   - the mark is written (SET, with the record's generation as value)
//     before every compare-and-set that saves a record: creation, change,
//     pin, and restore from the durable store; when the compare-and-set
//     fails, the record is read again and the mark written is deleted
//     (if it still holds the value written) unless that record is of the
//     same generation: the record was dropped meanwhile, or another
//     process wrote the counter's first record (whose mark is then
//     written again, SET … NX);
//   - it is deleted only after the record was deleted (a drop, a counter
//     folded back to its cold sub-counter, a restore taken back), and
//     only if it still holds the deleted record's value (one script), so
//     a record written meanwhile by another process keeps its mark;
//   - a record with a deadline has a mark that expires
//     store.DeadlineGrace after the record;
//   - a writer's look-up that finds a record (fetch) sets its mark when
//     it is missing (SET … NX); a reader's (ReadSets) writes nothing: its
//     caller reads the mark with the counter's values, in the same round
//     (the mark lives in the slot of the cold sub-counter, which every
//     read set holds), and calls HealMarks for a record found without
//     one. A record of a version before marks, or a mark lost with a node
//     while the record survived, is thus marked again by the next look-up
//     or uncached read, and Remark marks again the counters whose marks a
//     node that came back empty held (the checkpoint restore calls it).
//     Until then a writer takes the counter for cold (its increment goes
//     to the cold sub-counter, which every reader sums);
//   - a mark written by SET … NX (a look-up's, a reader's, Remark's) may
//     be of a record deleted, with its mark, after the look-up read it:
//     the records of the marks SET … NX wrote are read again, and a mark
//     whose record is gone or of another generation by then is deleted
//     (if it still holds the value written). The record is read after
//     the mark was written, so a record found then is deleted, if ever,
//     after the mark was written, and its deleter deletes the mark.
//
// The steps that take a mark back (the deletion of a deleted record's
// mark, and the reads and deletions above) run even when the caller's
// context has ended, bounded by SettleTimeout: a caller that gives up
// once the record is deleted, or whose write of a mark failed (its reply
// lost: it may have landed), does not leave the mark.
//
// So no mark outlives its record, whatever the processes of a counter do
// at the same moment, and whenever their callers give up. A mark without
// a record is left only when a step fails (a process dies between
// deleting a record and its mark, or the cache does not answer the
// deletion): it costs the counter's writers a look-up per TTL until the
// counter's next record takes the mark over, and, for a record with a
// deadline, it expires with it.
//
// # Re-placement
//
// Slot migration can put two sub-counters on one primary. Collisions reports
// it (sub-counters beyond an even spread); Rebalance grows new labels on the
// free primaries and folds the colliding labels into them.
package meta
