// Package simulate models a sharded cache under Zipf traffic plus one viral
// key, and compares the ways hotcount can write counters: one counter per
// key, sub-counters with hashed or placed labels, buffered deltas, both
// combined, and automatic N for hot keys.
//
// # Model
//
// K nodes own equal ranges of the 16384 Redis Cluster slots; a key's node is
// found from its real slot (CRC16, hash tags honoured), so sub-key names
// "{key#label}" land where they would in a cluster. Each node takes
// Capacity writes/s.
//
// Background traffic is Keys keys "k:0", "k:1", … whose rates follow Zipf:
// the key of rank i gets BackgroundLoad·K·Capacity·i^-s/H(Keys, s)
// increments/s. Their mass is aggregated once per node (one pass over the
// keys), never simulated increment by increment. The viral key ramps
// linearly to ViralRate over RampSeconds and stays there.
//
// Time advances in one-second buckets. In each second a node's mean write
// rate is the sum of what every key sends it under the strategy; its
// actual count is drawn from the normal approximation of a Poisson count
// with that mean, with the same random draws for every strategy (common
// random numbers), so differences between strategies are not luck.
//
// A buffered key with rate r, split over P processes flushing every D
// seconds, sends (P/D)·(1-exp(-r·D/P)) writes/s: each process flushes once
// per interval when it holds a delta. Sub-counters divide a key's write rate
// evenly. Auto sizes every key from its previous second's rate: a key over
// KeyBudget·Capacity gets ceil(rate/budget) placed sub-counters (N only
// grows during a run), so a ramping key can overshoot for a second.
//
// # Outputs
//
// For each strategy: the peak utilisation (writes/Capacity of the busiest
// node-second), seconds and node-seconds over capacity, mean cache writes,
// the viral key's read fan-in (keys and nodes per read) and its collisions.
// The placement odds of N hashed labels on K nodes are reported exactly,
// K!/((K-N)!·K^N) via plan.PAllDistinct, and by Monte Carlo over Trials
// throws. Alongside, the share of key names whose labels "0".."N-1" land
// on distinct nodes by their real CRC16 slots is measured: CRC16 is linear,
// so labels that differ in one byte are correlated, and on 20 nodes 8 such
// labels are all distinct far less often than independent hashing predicts
// (about 2.5 % against 19.8 %), which is one more reason to place labels.
// Results print as text, JSON, CSV or an SVG bar chart.
//
// All randomness comes from Config.Rand or a PCG seeded with Config.Seed,
// so a run is reproducible.
package simulate
