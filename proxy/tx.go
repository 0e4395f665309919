package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/redis/rueidis"
)

// Transactions. MULTI/EXEC and WATCH need one upstream connection for the
// whole transaction, so a client's transaction runs on a rueidis dedicated
// connection bound to the slot of the first key it names; every key of the
// transaction must be in that slot (as Redis Cluster requires). MULTI is
// answered at once; it is sent upstream together with the first keyed
// command (keyless commands queued before that are held and sent with
// it), so that the dedicated connection is bound to the right slot.
//
// The cluster may move that slot while the transaction is open. A command
// queued, or EXEC, on the slot's old owner is then answered MOVED (or ASK
// while the slot migrates) and Redis runs nothing of the transaction, so
// the proxy sends it again, MULTI and every command queued so far, on a
// connection to the node the redirection names (after ASKING, for ASK),
// and the client sees its transaction run as on one Redis. A transaction
// that WATCHes cannot move: the watch stays on the old owner, whose
// migration deleted the watched keys, so its EXEC answers nil, as when a
// watched key changed, and the client's retry goes to the new owner.
//
// The copy of the queued commands kept for that is charged to the memory
// budget (Config.MemoryBudget) with the connections' input, and bounded
// per transaction by QueryBufferLimit. A command that does not fit (the
// budget has no room, or the copy would pass the bound) drops the copy
// and its charge instead of waiting: the transaction runs on as before,
// and only a redirection ends it, as Redis does (the queued command is
// answered TRYAGAIN and EXEC EXECABORT, or EXEC is answered TRYAGAIN). A
// read of the connection that has to wait for the budget drops its own
// transaction's copy first.
//
// The keyless commands held before the first keyed command (sent nowhere
// yet) are charged to the same budget, within the same bound, until that
// command sends them (their charge becomes the copy's) or EXEC, DISCARD,
// a reset or the close ends the transaction. They cannot be dropped as
// the copy is: a command that does not fit is refused as Redis refuses a
// command it has no memory to queue (answered an error, errTxQueue, and
// EXEC EXECABORT), and a read of the connection that has to wait for the
// budget drops them with the transaction (the command read is answered
// errTxQueue), so that a connection never waits for memory its own
// transaction holds. As on Redis, nothing more is held once the
// transaction is to abort.

// txState is a connection's transaction.
type txState struct {
	dc        rueidis.DedicatedClient
	done      func() // gives the dedicated connection back
	slot      int    // bound slot; -1 none yet
	inMulti   bool
	multiSent bool // MULTI was sent upstream
	watching  bool
	aborted   bool    // a queued command failed: EXEC answers EXECABORT
	watchLost bool    // the watched slot moved: EXEC answers nil
	asking    bool    // WATCH went to the node importing the slot (ASK)
	held      []txCmd // keyless commands queued before the slot is known
	heldSize  int64   // bytes of held charged to the memory budget
	refuse    bool    // held was dropped for a read: its command is refused
	sent      []txCmd // the commands queued upstream, to send again
	kept      int64   // bytes of sent charged to the memory budget
	uncopied  bool    // sent was dropped: a redirection aborts
	shapes    []nullShape
}

// txCmd is a command queued upstream in a transaction.
type txCmd struct {
	strs []string
	key  int
}

// size is what the copy of q holds: its arguments, their string headers
// and its own entry.
func (q *txCmd) size() int64 {
	n := int64(unsafe.Sizeof(*q)) + int64(len(q.strs))*int64(unsafe.Sizeof(""))
	for _, s := range q.strs {
		n += int64(len(s))
	}
	return n
}

// own copies the arguments of q that point into the read buffer (see
// strings), so that the buffer is not held past the batch by bytes the
// charge does not count.
func (q *txCmd) own() {
	cloned := false
	for i, s := range q.strs {
		if len(s) >= bigArg {
			if !cloned {
				q.strs, cloned = slices.Clone(q.strs), true
			}
			q.strs[i] = strings.Clone(s)
		}
	}
}

// keep adds q to the copy of the transaction, charging it to the memory
// budget; when it does not fit (the budget has no room now, or the copy
// would pass QueryBufferLimit), the copy is dropped.
func (t *txState) keep(c *conn, q txCmd) {
	if t.uncopied {
		return
	}
	n := q.size()
	if t.kept+n > int64(c.s.cfg.QueryBufferLimit) || !c.s.input.tryReserve(n) {
		t.forget(c)
		return
	}
	q.own()
	t.kept += n
	t.sent = append(t.sent, q)
}

// hold adds q, a keyless command queued before the transaction's slot is
// known, to the commands held, charging it to the memory budget. It
// reports false, holding nothing, when q does not fit (the budget has no
// room now, or what is held would pass QueryBufferLimit).
func (t *txState) hold(c *conn, q txCmd) bool {
	n := q.size()
	if t.heldSize+n > int64(c.s.cfg.QueryBufferLimit) || !c.s.input.tryReserve(n) {
		return false
	}
	q.own()
	t.heldSize += n
	t.held = append(t.held, q)
	return true
}

// unhold forgets the commands held and gives their charge back.
func (t *txState) unhold(c *conn) {
	c.s.input.release(t.heldSize)
	t.held, t.heldSize = nil, 0
}

// adopt makes the commands held, now sent upstream, the start of the
// copy, their charge with them (the copy is empty until then, and what is
// held is within its bound); without a copy, the charge is given back.
func (t *txState) adopt(c *conn) {
	if t.uncopied {
		t.unhold(c)
		return
	}
	t.sent = append(t.sent, t.held...)
	t.kept += t.heldSize
	t.held, t.heldSize = nil, 0
}

// giveWay makes room in the memory budget for n bytes of the connection's
// input, before its read waits, from what its open transaction keeps:
// first the copy (see keep); then the commands held, which cannot be
// dropped without the transaction: it is to abort, and the command being
// read is refused (errTxQueue). It reports whether n bytes were reserved.
func (t *txState) giveWay(c *conn, n int64) bool {
	if !t.inMulti {
		return false
	}
	t.forget(c)
	if c.s.input.tryReserve(n) {
		return true
	}
	if t.heldSize == 0 {
		return false
	}
	t.unhold(c)
	t.aborted, t.refuse = true, true
	return c.s.input.tryReserve(n)
}

// forget drops the copy of the transaction and gives its charge back: a
// redirection then aborts the transaction.
func (t *txState) forget(c *conn) {
	c.s.input.release(t.kept)
	t.kept, t.sent, t.uncopied = 0, nil, true
}

// maxTxMoves bounds how often one command of a transaction follows a
// redirection before its client is answered TRYAGAIN.
const maxTxMoves = 5

// redirected returns the node a MOVED or ASK reply names.
func redirected(res *rueidis.RedisResult) (addr string, ask, ok bool) {
	var re *rueidis.RedisError
	if !errors.As(res.Error(), &re) {
		return "", false, false
	}
	if addr, ok = re.IsMoved(); ok {
		return addr, false, true
	}
	addr, ok = re.IsAsk()
	return addr, ok, ok
}

// drop gives back the transaction's upstream connection, leaving its
// state: DISCARD or UNWATCH when needed (a connection that fails to is
// closed rather than reused).
func (t *txState) drop(c *conn) {
	if t.dc == nil {
		return
	}
	var cmd []string
	switch {
	case t.multiSent:
		cmd = []string{"DISCARD"}
	case t.watching:
		cmd = []string{"UNWATCH"}
	}
	if cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.Timeout)
		err := t.dc.Do(ctx, t.dc.B().Arbitrary(cmd...).Build()).Error()
		cancel()
		if err != nil {
			t.dc.Close()
		}
	}
	t.done()
	t.dc, t.done, t.multiSent = nil, nil, false
}

// rebind moves the transaction to a dedicated connection to the node at
// addr. A node rueidis has no connection to yet (one that joined the
// cluster) is reached through a keyed command to the slot, whose MOVED
// makes rueidis connect to it.
func (t *txState) rebind(ctx context.Context, c *conn, addr string) error {
	t.drop(c)
	up := c.s.upstream(c.proto)
	n := up.Nodes()[addr]
	if n == nil && t.slot >= 0 {
		up.Do(ctx, up.B().Exists().Key(keyInSlot(uint16(t.slot))).Build())
		n = up.Nodes()[addr]
	}
	if n == nil {
		return fmt.Errorf("no connection to %s, where the cluster moved slot %d", addr, t.slot)
	}
	t.dc, t.done = n.Dedicate()
	return nil
}

// resend sends the transaction again on the node at addr: ASKING (for
// ask), MULTI, every command queued so far, and EXEC when exec is set. It
// follows further redirections, at most maxTxMoves in all, and returns
// the results of the queued commands (and EXEC), or the error reply for
// the client.
func (t *txState) resend(ctx context.Context, c *conn, addr string, ask, exec bool) ([]rueidis.RedisResult, string) {
	for moves := 1; ; moves++ {
		if err := t.rebind(ctx, c, addr); err != nil {
			return nil, upstreamError(err)
		}
		var cmds []rueidis.Completed
		if ask {
			cmds = append(cmds, t.dc.B().Arbitrary("ASKING").Build())
		}
		cmds = append(cmds, t.dc.B().Arbitrary("MULTI").Build())
		for _, q := range t.sent {
			cmds = append(cmds, c.build(q.strs, q.key))
		}
		if exec {
			cmds = append(cmds, t.dc.B().Arbitrary("EXEC").Build())
		}
		res := t.dc.DoMulti(ctx, cmds...)
		if ask {
			res = res[1:]
		}
		if e := resultError(&res[0]); e != "" {
			return nil, e
		}
		t.multiSent = true
		res = res[1:]
		again := false
		for i := range res {
			if addr, ask, again = redirected(&res[i]); again {
				break
			}
		}
		if !again {
			if exec {
				t.multiSent = false
			}
			return res, ""
		}
		if moves == maxTxMoves {
			return nil, errRedirect
		}
	}
}

// moved answers the queued command whose reply was a redirection to addr:
// the transaction goes to that node (see above), or, when it WATCHes, is
// left to fail at EXEC; without its copy it aborts (TRYAGAIN now,
// EXECABORT at EXEC), as Redis aborts it.
func (c *conn) moved(ctx context.Context, addr string, ask bool) {
	t := &c.tx
	switch {
	case t.watching:
		t.watchLost = true
		c.out = appendStatus(c.out, "QUEUED")
		return
	case t.uncopied:
		t.aborted = true
		c.out = appendErr(c.out, errRedirect)
		return
	}
	res, e := t.resend(ctx, c, addr, ask, false)
	if e != "" {
		t.aborted = true
		c.out = appendErr(c.out, e)
		return
	}
	for i := 0; i < len(res)-1; i++ {
		if res[i].Error() != nil {
			t.aborted = true // already answered QUEUED; EXEC aborts
		}
	}
	c.noteQueued(&res[len(res)-1])
}

const execAbort = "EXECABORT Transaction discarded because of previous errors."

// errTxQueue answers a command of a transaction that the memory budget
// has no room to hold (see above); Redis answers OOM to a command it has
// no memory to queue, and EXECABORT at EXEC.
const errTxQueue = "ERR hotcount proxy: no room to queue the command (resp_memory_budget, at most resp_query_buffer_limit per transaction); EXEC will answer EXECABORT"

// release ends the transaction: DISCARD or UNWATCH upstream when needed
// (a connection that fails to is closed rather than reused), then gives
// the dedicated connection back.
func (t *txState) release(c *conn) {
	t.drop(c)
	c.s.input.release(t.kept)
	t.unhold(c)
	*t = txState{slot: -1}
}

// acquire binds a dedicated upstream connection; the first command sent
// on it decides its slot.
func (t *txState) acquire(c *conn, slot int) {
	t.dc, t.done = c.s.upstream(c.proto).Dedicate()
	t.slot = slot
}

func (c *conn) multi(args [][]byte) {
	t := &c.tx
	switch {
	case len(args) != 1:
		c.out = appendErr(c.out, wrongArity("multi"))
		return
	case t.inMulti:
		c.out = appendErr(c.out, "ERR MULTI calls can not be nested")
		return
	}
	c.s.input.release(t.kept)
	t.unhold(c)
	// A transaction that WATCHes is never sent again (its EXEC answers
	// nil when its slot moves): it keeps no copy.
	t.inMulti, t.aborted, t.refuse, t.sent, t.kept, t.uncopied, t.shapes = true, false, false, nil, 0, t.watching, nil
	if t.dc == nil {
		c.out = appendOK(c.out)
		return
	}
	// WATCHing: the connection is bound already.
	ctx, cancel := c.timeout()
	defer cancel()
	cmds := []rueidis.Completed{t.dc.B().Arbitrary("MULTI").Build()}
	if t.asking {
		// The watch is on the node importing the slot: ASKING lets
		// the transaction run there.
		cmds = append([]rueidis.Completed{t.dc.B().Arbitrary("ASKING").Build()}, cmds...)
	}
	all := t.dc.DoMulti(ctx, cmds...)
	res := all[len(all)-1]
	if res.Error() == nil {
		t.multiSent = true
	}
	c.appendResult(&res, nil)
}

// txQueue queues one command of a transaction: checks what Redis checks
// when queuing (known command, arity), refuses counter keys and keys of a
// second slot, and sends it on the transaction's connection.
func (c *conn) txQueue(name string, ci *cmdInfo, args [][]byte, strs []string) {
	t := &c.tx
	fail := func(msg string) {
		t.aborted = true
		c.out = appendErr(c.out, msg)
	}
	switch {
	case t.refuse:
		// Its read dropped what the transaction held (see giveWay).
		t.refuse = false
		fail(errTxQueue)
		return
	case ci == nil:
		fail(unknownCommand(args))
		return
	case !ci.arityOK(len(args)):
		fail(wrongArity(ci.name))
		return
	case ci.noMulti:
		fail("ERR Command not allowed inside a transaction")
		return
	case local[name] != nil && name != "ping" && name != "echo" && name != "unwatch":
		fail("ERR " + strings.ToUpper(name) + " inside MULTI is not supported by the hotcount proxy")
		return
	}
	keys, ok := ci.keyIndexes(args, c.keybuf[:0])
	c.keybuf = keys
	if !ok {
		if keys, ok = c.getKeys(strs); !ok {
			t.aborted = true
			return
		}
	}
	for _, k := range keys {
		if c.s.ownKey(strs[k]) {
			fail(ownKeyErr(strs[k]))
			return
		}
		if _, isCounter := c.s.counters.Namespace(strs[k]); isCounter {
			fail(counterInMulti(name, strs[k]))
			return
		}
	}
	slot, same := c.slotOf(strs, keys)
	if !same {
		fail(crossSlotErr)
		return
	}
	shape := shapeOf(ci.baseName(), args).inTx()
	if len(keys) == 0 && !t.multiSent {
		// A transaction that is to abort holds nothing more, as Redis
		// queues nothing more of it.
		if !t.aborted {
			if !t.hold(c, txCmd{strs, -1}) {
				fail(errTxQueue)
				return
			}
			t.shapes = append(t.shapes, shape)
		}
		c.out = appendStatus(c.out, "QUEUED")
		return
	}
	if len(keys) > 0 && t.slot >= 0 && int(slot) != t.slot && c.s.cluster {
		fail(crossSlotErr)
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	key := -1
	if len(keys) > 0 {
		key = keys[0]
	}
	t.shapes = append(t.shapes, shape)
	switch {
	case t.watchLost:
		c.out = appendStatus(c.out, "QUEUED") // EXEC answers nil
		return
	case t.aborted:
		// EXEC answers EXECABORT: nothing more goes upstream or into
		// the copy, as Redis queues nothing more of the transaction.
		c.out = appendStatus(c.out, "QUEUED")
		return
	}
	cmd := c.build(strs, key)
	if t.multiSent {
		t.keep(c, txCmd{strs, key})
		res := t.dc.Do(ctx, cmd)
		if addr, ask, ok := redirected(&res); ok {
			c.moved(ctx, addr, ask)
			return
		}
		c.noteQueued(&res)
		return
	}
	// The first keyed command: bind, and send MULTI and what was held.
	if t.dc == nil {
		t.acquire(c, int(slot))
	}
	cmds := []rueidis.Completed{t.dc.B().Arbitrary("MULTI").Build()}
	for _, h := range t.held {
		cmds = append(cmds, c.build(h.strs, -1))
	}
	t.adopt(c)
	cmds = append(cmds, cmd)
	t.keep(c, txCmd{strs, key})
	res := t.dc.DoMulti(ctx, cmds...)
	if e := resultError(&res[0]); e != "" {
		fail(e)
		return
	}
	t.multiSent = true
	for i := 1; i < len(res); i++ {
		if addr, ask, ok := redirected(&res[i]); ok {
			c.moved(ctx, addr, ask)
			return
		}
	}
	for i := 1; i < len(res)-1; i++ {
		if res[i].Error() != nil {
			t.aborted = true // already answered QUEUED; EXEC aborts
		}
	}
	c.noteQueued(&res[len(res)-1])
}

// noteQueued answers a queued command's upstream reply (QUEUED or the
// error that makes Redis abort the transaction). Any error aborts it here
// too, an error reply of the node included: EXEC then answers EXECABORT
// without going upstream, so that a transaction sent again to a new owner
// (see resend), where the command may queue without the error, never runs
// a command its client was answered an error for.
func (c *conn) noteQueued(res *rueidis.RedisResult) {
	if res.Error() != nil {
		c.tx.aborted = true
	}
	c.appendResult(res, nil)
}

func (c *conn) exec(args [][]byte) {
	t := &c.tx
	switch {
	case len(args) != 1:
		c.out = appendErr(c.out, wrongArity("exec"))
		return
	case !t.inMulti:
		c.out = appendErr(c.out, "ERR EXEC without MULTI")
		return
	case t.aborted:
		c.out = appendErr(c.out, execAbort)
		t.release(c)
		return
	case t.watchLost:
		c.out = appendNullArray(c.out, c.proto)
		t.release(c)
		return
	}
	ctx, cancel := c.timeout()
	defer cancel()
	shape := nullShape{kind: shapeExec, queued: t.shapes}
	switch {
	case t.multiSent:
		res := t.dc.Do(ctx, t.dc.B().Arbitrary("EXEC").Build())
		t.multiSent = false
		// A slot moved since the commands were queued: Redis ran none
		// of them. Without the copy, the client is answered TRYAGAIN
		// (appendResult).
		if addr, ask, ok := redirected(&res); ok && (t.watching || !t.uncopied) {
			if t.watching {
				c.out = appendNullArray(c.out, c.proto)
				break
			}
			all, e := t.resend(ctx, c, addr, ask, true)
			if e != "" {
				c.out = appendErr(c.out, e)
				break
			}
			res = all[len(all)-1]
		}
		c.appendResult(&res, &shape)
	case t.dc == nil && len(t.held) == 0:
		c.out = appendArray(c.out, 0)
	default:
		// Only keyless commands: any node runs them.
		if t.dc == nil {
			t.acquire(c, -1)
		}
		cmds := []rueidis.Completed{t.dc.B().Arbitrary("MULTI").Build()}
		for _, h := range t.held {
			cmds = append(cmds, c.build(h.strs, -1))
		}
		cmds = append(cmds, t.dc.B().Arbitrary("EXEC").Build())
		res := t.dc.DoMulti(ctx, cmds...)
		if e := resultError(&res[0]); e != "" {
			c.out = appendErr(c.out, e)
		} else {
			c.appendResult(&res[len(res)-1], &shape)
		}
	}
	t.watching = false // EXEC ends every WATCH
	t.release(c)
}

func (c *conn) discard(args [][]byte) {
	t := &c.tx
	switch {
	case len(args) != 1:
		c.out = appendErr(c.out, wrongArity("discard"))
		return
	case !t.inMulti:
		c.out = appendErr(c.out, "ERR DISCARD without MULTI")
		return
	}
	if t.multiSent {
		ctx, cancel := c.timeout()
		res := t.dc.Do(ctx, t.dc.B().Arbitrary("DISCARD").Build())
		cancel()
		t.multiSent = false
		t.watching = false
		c.appendResult(&res, nil)
	} else {
		c.out = appendOK(c.out)
	}
	t.release(c)
}

func (c *conn) watch(args [][]byte) {
	t := &c.tx
	switch {
	case len(args) < 2:
		c.out = appendErr(c.out, wrongArity("watch"))
		return
	case t.inMulti:
		c.out = appendErr(c.out, "ERR WATCH inside MULTI is not allowed")
		return
	}
	strs := c.strings(args)
	keys := make([]int, 0, len(args)-1)
	for i := 1; i < len(args); i++ {
		if _, isCounter := c.s.counters.Namespace(strs[i]); isCounter {
			c.out = appendErr(c.out, notForCounters("watch", strs[i]))
			return
		}
		keys = append(keys, i)
	}
	slot, same := c.slotOf(strs, keys)
	if !same || (t.dc != nil && t.slot >= 0 && int(slot) != t.slot && c.s.cluster) {
		c.out = appendErr(c.out, crossSlotErr)
		return
	}
	if t.dc == nil {
		t.acquire(c, int(slot))
	}
	ctx, cancel := c.timeout()
	defer cancel()
	res := t.dc.Do(ctx, c.build(strs, 1))
	for moves := 1; ; moves++ {
		addr, ask, ok := redirected(&res)
		if !ok || moves > maxTxMoves {
			break
		}
		if t.watching {
			// Keys watched before on the old owner: the watch cannot
			// move with the slot.
			t.watchLost = true
			c.out = appendOK(c.out)
			return
		}
		if err := t.rebind(ctx, c, addr); err != nil {
			res = rueidis.NewErrorResult(err)
			break
		}
		cmds := []rueidis.Completed{c.build(strs, 1)}
		if ask {
			cmds = append([]rueidis.Completed{t.dc.B().Arbitrary("ASKING").Build()}, cmds...)
		}
		all := t.dc.DoMulti(ctx, cmds...)
		res = all[len(all)-1]
		t.asking = ask
	}
	if res.Error() == nil {
		t.watching = true
	}
	c.appendResult(&res, nil)
	if !t.watching {
		t.release(c)
	}
}

func (c *conn) unwatch(args [][]byte) {
	if len(args) != 1 {
		c.out = appendErr(c.out, wrongArity("unwatch"))
		return
	}
	if c.tx.dc != nil && !c.tx.inMulti {
		c.tx.release(c)
	}
	c.out = appendOK(c.out)
}
