// Package layout holds no code: its tests check the shape of the module
// that the design brief sets out, over the real package graph
// (`go list -deps`) and the real sources.
//
//   - Production packages never depend on the test harness
//     (internal/testenv, internal/faultproxy, durable/durabletest) nor on
//     package testing: `hotcount cluster up` stands on
//     internal/rediscluster, and the harness builds on that, never the
//     reverse.
//   - The faces, server and proxy, import of this module only the root
//     package, the leaf utilities keyspace and clock, and their own
//     subpackages: every error, default and stats type they need is
//     exported by the root.
//   - A limit is defined once: the largest number of sub-counters is
//     keyspace.MaxN, and every other name for it refers to it.
//   - Every default is an exported constant: a library package that
//     gives a zero Config field its default (if c.Nodes == 0 {...},
//     c.Timeout = or(c.Timeout, ...)) names a Default… constant, never a
//     number or duration written where it is applied.
package layout
