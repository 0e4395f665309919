package proxy

import (
	"context"
	"strings"

	"github.com/redis/rueidis"
)

// Transactions. MULTI/EXEC and WATCH need one upstream connection for the
// whole transaction, so a client's transaction runs on a rueidis dedicated
// connection bound to the slot of the first key it names; every key of the
// transaction must be in that slot (as Redis Cluster requires). MULTI is
// answered at once; it is sent upstream together with the first keyed
// command (keyless commands queued before that are held and sent with
// it), so that the dedicated connection is bound to the right slot.

// txState is a connection's transaction.
type txState struct {
	dc        rueidis.DedicatedClient
	done      func() // gives the dedicated connection back
	slot      int    // bound slot; -1 none yet
	inMulti   bool
	multiSent bool // MULTI was sent upstream
	watching  bool
	aborted   bool       // a queued command failed: EXEC answers EXECABORT
	held      [][]string // keyless commands queued before the slot is known
	shapes    []nullShape
}

const execAbort = "EXECABORT Transaction discarded because of previous errors."

// release ends the transaction: DISCARD or UNWATCH upstream when needed
// (a connection that fails to is closed rather than reused), then gives
// the dedicated connection back.
func (t *txState) release(c *conn) {
	if t.dc != nil {
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
	}
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
	t.inMulti, t.aborted, t.held, t.shapes = true, false, nil, nil
	if t.dc == nil {
		c.out = appendOK(c.out)
		return
	}
	// WATCHing: the connection is bound already.
	ctx, cancel := c.timeout()
	defer cancel()
	res := t.dc.Do(ctx, t.dc.B().Arbitrary("MULTI").Build())
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
			fail(notForCounters(name+" inside MULTI", strs[k]))
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
		t.held = append(t.held, strs)
		t.shapes = append(t.shapes, shape)
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
	cmd := c.build(strs, key)
	t.shapes = append(t.shapes, shape)
	if t.multiSent {
		res := t.dc.Do(ctx, cmd)
		c.noteQueued(&res)
		return
	}
	// The first keyed command: bind, and send MULTI and what was held.
	if t.dc == nil {
		t.acquire(c, int(slot))
	}
	cmds := []rueidis.Completed{t.dc.B().Arbitrary("MULTI").Build()}
	for _, h := range t.held {
		cmds = append(cmds, c.build(h, -1))
	}
	t.held = nil
	cmds = append(cmds, cmd)
	res := t.dc.DoMulti(ctx, cmds...)
	if e := resultError(&res[0]); e != "" {
		fail(e)
		return
	}
	t.multiSent = true
	for i := 1; i < len(res)-1; i++ {
		if res[i].Error() != nil {
			t.aborted = true // already answered QUEUED; EXEC aborts
		}
	}
	c.noteQueued(&res[len(res)-1])
}

// noteQueued answers a queued command's upstream reply (QUEUED or the
// error that makes Redis abort the transaction).
func (c *conn) noteQueued(res *rueidis.RedisResult) {
	if res.NonRedisError() != nil {
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
	}
	ctx, cancel := c.timeout()
	defer cancel()
	shape := nullShape{kind: shapeExec, queued: t.shapes}
	switch {
	case t.multiSent:
		res := t.dc.Do(ctx, t.dc.B().Arbitrary("EXEC").Build())
		t.multiSent = false
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
			cmds = append(cmds, c.build(h, -1))
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
