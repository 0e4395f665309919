// Package hotkeys finds write-hot counters and sizes their number of
// sub-counters automatically.
//
// # Sketch: which keys are hot, and how hot
//
// A Sketch is a Space-Saving heavy-hitters summary split into Shards
// shards; a key's shard is chosen by a seeded hash, so shards hold
// disjoint keys and their union is the summary (a merge needs no
// deduplication). Each shard is a small mutex-protected Space-Saving table
// of K counters: a map from key to entry plus a min-heap on the counts.
// Observing a tracked key adds to its count and sifts it down the heap;
// observing an untracked key, when the shard is full, hands it the
// smallest counter, whose count c it inherits as its error bound. Within a
// shard that has seen W writes, every key with more than W/K writes is
// tracked, and a tracked key's count overestimates its writes by at most
// its ErrBound (<= W/K). Counts are halved every DecayEvery, so keys that
// were hot long ago give way to keys that are hot now.
//
// Each entry also keeps a ring of time buckets (Window/Buckets wide,
// 250 ms by default). A key's Rate is the sum of its last Buckets complete
// buckets and the current one over the time they cover — a sliding window
// of Window (2 s by default) — or over the time since the key entered the
// sketch when that is shorter. Rates count only writes seen while the key
// was tracked, which for a hot key is all of them. Observe reads the
// injected clock once per ClockEvery calls of a shard (16 by default),
// since a clock reading can cost more than the rest of Observe; Top and
// Rate read it every time.
//
// # Cluster-wide rate
//
// Each process sees only its share of a key's writes. A RateSource turns
// that into a cluster-wide estimate:
//
//   - the Sketch itself: this process's rate (one process);
//   - Scaled: local rate × the number of processes, right when a load
//     balancer spreads writes evenly, and free;
//   - Shared: every process adds, once per evaluation, the writes it saw
//     of each candidate key to one cache counter per key, WriteKey(key)
//     ("{K#hk}:w"), and reads it back in the same round; that counter is
//     the cluster's running write count, and its growth over Window is the
//     cluster rate, whatever the spread. It is never below the local rate.
//
// # Policy: how many sub-counters
//
// A key with cluster rate r on N sub-counters puts r/N writes per second on
// each (so on each node). The Policy grows N as soon as r/N exceeds
// Budget, to ceil(r×Headroom/Budget) (at most MaxN), and shrinks it, to the
// same formula but at least MinN, only after r/N has stayed below
// ShrinkBelow×Budget for Hysteresis without a break. Either target leaves
// at most Budget/Headroom per sub-counter, which is neither over the
// budget nor (since the target is what the rate needs) a candidate for
// shrinking: a key hovering around a threshold grows once and stays.
//
// # Controller
//
// A Controller evaluates, every Interval (500 ms by default), the Sketch's
// Top(TopN) plus every key it has left above its base N, asks the Policy
// about each, and calls its Resizer (meta.Manager) for the grows and
// shrinks, in goroutines, one resize per key at a time. It keeps the last
// History decisions (Decisions) and the last evaluation (Hot) for metrics
// and the dashboard. Close cancels in-flight resizes (a fold interrupted so
// is resumed by the next Resize of the key) and waits for them.
package hotkeys
