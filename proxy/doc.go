// Package proxy is a Redis-protocol front for hotcount: existing Redis
// clients in any language send INCR to the proxy and get hot-counter
// absorption with no code change, while every other command reaches the
// Redis Cluster behind it unchanged.
//
// # Keys
//
// A counter key is a key that a counter namespace matches
// (Counters.Namespace). Counter keys are served by the hotcount Client:
//
//   - INCR, INCRBY, DECR, DECRBY add through the Client: sharded,
//     buffered or durable as the namespace says. INCRBY by 0 reads.
//   - GET and MGET (mixed freely with plain keys) answer the summed value;
//     a counter that does not exist (Client.Exists, asked only when the
//     sum is 0) reads nil, as in Redis.
//   - DEL and UNLINK clear the counter (Client.Clear) and count it when it
//     existed; EXISTS and TYPE ("string" or "none") work.
//   - EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT (without NX, XX, GT, LT)
//     give the counter a deadline (Client.Expire); a time not in the
//     future removes it. TTL, PTTL, EXPIRETIME and PEXPIRETIME answer as
//     Redis does (-1: no deadline, -2: no counter); PERSIST removes the
//     deadline. A cold counter expires exactly as its one key; a sharded
//     one reads as gone from its deadline on.
//   - SET key <integer> resets the counter: it is cleared, then the
//     integer is added. Like DEL, this is not atomic across processes:
//     increments other proxies had buffered before land after it. SET with
//     options or a non-integer value is refused.
//   - Any other command naming a counter key (APPEND, INCRBYFLOAT, GETSET,
//     ... and WATCH or MULTI/EXEC) answers an -ERR that lists what counter
//     keys accept.
//
// Every other key passes through.
//
// # The reply to INCR
//
// Redis answers INCR with the new value. A buffered counter has no single
// new value: other processes hold increments not yet flushed. The proxy
// answers its estimate: the last summed read of the counter plus the
// increments this proxy made since (see estimates). A summed read is taken
// when the estimate is older than the namespace's read-cache TTL (default
// 1 s), so a hot key costs one read of its N sub-counters per TTL, not one
// per INCR. The estimate never goes below what this proxy itself has added
// since that read; it may run ahead by the increments that arrived while
// the read was in flight, until the next read re-bases it. After the
// increments stop, the first read past the TTL is exact.
//
// A namespace with reply "exact" (ReplyExact) answers a fresh summed read
// after each increment instead (Counters.GetFresh, past the Client's
// summed-read cache): one pipelined round to every node that holds a
// sub-counter and N keys read per INCR; GET and MGET read it afresh too.
// For a buffered
// namespace the value includes this proxy's unflushed delta, not other
// processes'.
//
// # Loss windows
//
// They are those of the namespace's mode. A proxy that crashes (SIGKILL,
// power loss) loses at most what it buffered in its last flush interval
// (default 500 ms) plus one flush in flight, for buffered namespaces; an
// unbuffered or durable namespace loses nothing the proxy acknowledged.
// Shutdown (SIGTERM in `hotcount proxy`) stops accepting, finishes the
// commands it has read, and the Client's Close then flushes every buffered
// delta: nothing is lost. Plain keys are never buffered.
//
// # Connections
//
// Each client connection has one goroutine. It reads into a buffer, splits
// it into commands (parse.go: RESP and inline commands, parsed as Redis
// 7.0 parses them, with Redis's error texts for malformed input), runs
// every complete command in order and writes all their replies in one
// write (pipelining). On a TCP or Unix socket it reads the descriptor
// itself (syscall.RawConn) and, after a read that left the socket empty,
// waits for the runtime's poller instead of reading again: one read system
// call per request where net.Conn.Read takes two (the second finds
// nothing); an end of input that came with the last data is read at most
// 100 ms later.
//
// Input is bounded as in Redis: a bulk length above MaxBulkLen (Redis's
// proto-max-bulk-len) is answered "-ERR Protocol error: invalid bulk
// length" as soon as its header arrives; an unfinished count line, bulk
// length line or inline line longer than 64 KiB is refused; past
// QueryBufferLimit (client-query-buffer-limit) of unparsed input the
// connection is answered an error. Each refusal closes the connection.
// Across connections, MemoryBudget bounds the input held beyond each
// connection's first 16 KiB buffer: a connection reserves a large argument
// whole before reading it (as Redis allocates it on its header), and when
// the budget has no room it stops reading, so its client's sends block,
// until memory comes back or Timeout passes, when it is answered an error
// and closed (metrics hotcount_proxy_input_bytes and
// hotcount_proxy_input_budget_*). The copy of an open transaction's queued
// commands, kept to send it again if its slot moves, is charged to the
// same budget and bounded by QueryBufferLimit; when it does not fit it is
// dropped. The keyless commands held before the transaction's first key
// are charged and bounded the same way but cannot be dropped: one that
// does not fit is answered an error and the transaction aborts at EXEC
// (see tx.go). A panic serving a command answers an error, is counted
// (Stats.Panics), and closes that connection only.
//
// Replies are written with redcon's append helpers; RESP3 types redcon has
// no helper for (maps, nulls, verbatim strings) are written alongside.
// HELLO 3 switches a connection to RESP3.
//
// # Pass-through
//
// The proxy keeps two rueidis clients to the cluster: one in RESP3 and one
// forced to RESP2 (AlwaysRESP2). A client's commands go through the one of
// its own protocol, because Redis shapes replies by protocol (maps,
// doubles, nested pairs in RESP3) and no conversion could reproduce what
// Redis itself writes. rueidis keeps each reply's RESP types; the proxy
// writes them back byte for byte (appendMessage). RESP2 has two nulls,
// "$-1" and "*-1", which rueidis reads as one; a table of the commands
// that answer a null array (nullShape) restores the right one.
//
// Keys are located with the cluster's own command table (COMMAND, read at
// start): legacy key positions, subcommands, rules for the movable-key
// commands (EVAL, FCALL, ZUNION, LMPOP, XREAD, ...) and COMMAND GETKEYS for
// the rest. Then:
//
//   - commands whose keys share a slot go to the slot's primary; the
//     commands of one pipelined batch are sent together, and rueidis
//     pipelines what every connection sends to one node;
//   - MGET, DEL, UNLINK, EXISTS, TOUCH and MSET across slots are split by
//     slot and answered as one (not atomically); other multi-key commands
//     across slots answer Redis Cluster's CROSSSLOT error;
//   - keyless commands go to the primary of slot 0, never a replica, and
//     script and function loads reach every primary, except DBSIZE
//     (summed), KEYS (concatenated), RANDOMKEY, SCAN (primary after
//     primary; the cursor packs the primary's index in its low 10 bits),
//     which cover every primary and hide hotcount's own keys, and
//     FLUSHALL/FLUSHDB, refused unless Config.AllowFlush (see keyless.go
//     and flush.go); CONFIG SET and RESETSTAT are refused unless
//     Config.AllowConfig, which sends them to every node, replicas
//     included (see configcmd.go); CONFIG REWRITE is refused; the rest of
//     CONFIG goes to any node;
//   - a command naming one of hotcount's own keys (a sentinel, a store
//     mark, a counter's sub-key) is refused;
//   - unknown commands and wrong arities reach a node, which answers its
//     own error.
//
// MULTI/EXEC and WATCH run on a rueidis dedicated connection bound to the
// slot of the transaction's first key; a key of another slot in the same
// transaction answers CROSSSLOT and EXEC then answers EXECABORT. When the
// cluster moves that slot while the transaction is open (a MOVED or ASK
// on the dedicated connection, which rueidis does not follow), the proxy
// sends the transaction again to the node the redirection names (tx.go);
// a WATCH on the old owner is lost with the slot, and EXEC answers nil.
// A queued command answered an error (OOM, TRYAGAIN, ...) aborts the
// transaction there and then, so that it is never sent again: EXEC
// answers EXECABORT, as Redis does.
// The primaries that keyless commands reach are read from the cluster
// (CLUSTER SLOTS, from a node that answers with slots: a node removed
// from the cluster answers none) each time; one that joined since
// rueidis last read its map is connected to through a MOVED from its
// slot's old owner. Blocking
// commands (BLPOP, BLMOVE, XREAD BLOCK, ...) run on rueidis's blocking
// pool for as long as they ask; while one blocks, a second goroutine reads
// the client (from a duplicate of its socket's descriptor), so that a
// client hanging up (or Shutdown) ends the wait.
//
// To cluster clients it looks like a Redis Cluster whose every slot it
// serves itself (cluster.go: CLUSTER SLOTS, SHARDS, NODES, INFO; INFO
// says cluster_enabled:1). Otherwise it looks like a standalone Redis:
// PING, ECHO, HELLO, AUTH,
// SELECT 0, CLIENT ID/GETNAME/SETNAME/INFO/LIST/SETINFO/UNBLOCK, INFO, ROLE, QUIT
// and RESET are answered by the proxy for the client's own connection;
// COMMAND and COMMAND DOCS come from a node. Refused with a clear -ERR:
// pub/sub subscriptions (PUBLISH works), MONITOR, client-side caching,
// replication, cluster administration, persistence administration, ACL,
// FUNCTION KILL, SCRIPT KILL, WAIT. INFO combines the primaries' figures
// (info.go). Downstream AUTH checks Config.Password; the proxy's own
// credentials to Redis (Config.Redis) are separate.
package proxy
