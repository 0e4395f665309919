// Package hotcount absorbs write-hot counters on a sharded cache.
//
// A counter such as "likes:post:42" is split into N sub-counters, stored
// under the sub-keys "{likes:post:42#L}" for N labels L. Each sub-key has its
// own hash tag, so the sub-counters hash to different slots and, in a Redis
// Cluster, to different primaries, chosen so that they land on distinct
// ones: one hot counter's write load is spread over ~N keys instead of
// hammering one node.
//
// Incr adds a delta to one sub-counter chosen uniformly at random, or, for
// buffered namespaces, to a process-local delta that a flusher sends as one
// idempotent increment per key and interval. Get sums all sub-counters: the
// sub-keys are grouped by the node that owns their slot and each node is
// asked once, in one pipelined round (never a cross-slot MGET). The sum is
// cached for the namespace's read-cache TTL (default 1 s) with
// single-flight, so a thousand concurrent page views cost one round per
// node, and each Reading says how stale it is. A process reads its own
// writes.
//
// Counters keep their values through cache loss per their namespace's
// durability mode: ModeFast checkpoints totals to a durable store and
// restores them; ModeDurable commits every increment to a durable event log
// before acknowledging it, and the cache view of such counters heals from
// the log by itself within two DurabilityConfig.HealIntervals.
//
// A Client talks to Redis (standalone or Cluster, via rueidis) when
// Config.Redis.Addrs is set, and otherwise to an embedded in-process store
// whose simulated nodes route keys by the same slot rule.
//
// The Client is the public face; the mechanics live in internal packages
// (the data path in internal/engine, checkpoints, the event log and
// rebuild in internal/durability, automatic N and re-placement in
// internal/autoscale, the shipping between regions in internal/regions,
// and the operations that take several of these in internal/counters)
// over the leaf packages keyspace, placement, meta,
// buffer, hotkeys, store and durable.
//
// Counters are not balances: there is no conditional or bounded decrement,
// and money belongs in a transactional store.
package hotcount
