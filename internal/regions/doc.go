// Package regions gives a counter written in several regions one global
// value. Each region is its own cache (a Redis Cluster) and counts its own
// increments there, with every technique of a single region; nothing a
// write does waits on another region.
//
// # Model
//
// A region's contribution to a counter is its own total: the sum of the
// increments made in that region since its last clear of the counter. It
// is one number, however hot the key, and it only needs to travel when it
// changed. Every region keeps, per counter, the peers' contributions as it
// last received them, and reads
//
//	global = own − fence(self) + Σ_peer (contribution(peer) − fence(peer))
//
// # Versions
//
// A contribution is a record (durable.RegionPart) versioned by its origin
// alone: (Epoch, Lease, Seq), compared in that order.
//   - Epoch is the origin's clear epoch of the counter. A clear in the
//     origin starts a new epoch, whose contributions count from zero and
//     replace those of the older epoch whatever their values. Epochs are
//     taken from the origin cache's clock (2 × Unix ms, odd while a clear
//     is under way), so they rise even after the origin's cache lost them.
//   - Lease is the fencing token of the origin's shipper (one process per
//     region holds the shipping lease). A new holder's token is larger
//     than every earlier one, so a stale holder's late write never
//     replaces what the new holder wrote.
//   - Seq orders the records of one lease.
//
// A receiver keeps, per (counter, origin), the record of the highest
// version (State.Merge; in Redis, the same comparison in a script), so
// records may arrive late, twice or out of order: the state converges to
// the newest, a join semilattice per origin. Since a contribution is a
// total and not a delta, a lost or repeated message loses and duplicates
// nothing; a partition only delays.
//
// # Clears: observed-remove
//
// A clear in region R removes what R had observed: its own sub-counters
// (the engine's clear) and, for every peer P, the contribution of P as R
// had received it. The latter becomes a fence: a record of kind
// PartFence with the version and value of the contribution it removes,
// shipped to every region like a contribution. Every region subtracts a
// fence from the contribution of the same epoch; a fence of an older epoch
// is void, and a contribution older than its fence counts nothing.
// Increments that R had not received when it cleared (made concurrently in
// P) survive, because P's later contributions exceed the fence by them.
//
// # Wire format
//
// A record travels and is stored under the name "c:" + origin
// (contribution) or "f:" + origin (fence), value
// "1:epoch:lease:seq:value:at_ms" (Encode, Decode). The leading 1 is
// WireVersion; a record of another version is refused, never misread.
// The name "e" holds the region's own clear epoch, "d" the deadline
// register.
//
// # Layout: bucket hashes
//
// A counter's records in a region's cache are fields of one of Buckets
// shared hashes, "hotcount:rg:b:{hotcount-rg-b-<n>}" (n from the FNV hash
// of the counter): field counter + NUL + name, and the field counter +
// NUL alone lists the names the counter has; this code calls those fields
// the counter's region hash. So a counter written in one
// region costs each peer a few fields in a shared hash, not a key of its
// own. Every script over a counter's records (receive, clear, expiry,
// deadline, epoch, collection, read) works on the counter's fields of
// its bucket alone, atomically (see vhash).
package regions
