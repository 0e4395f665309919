package proxy

import (
	"context"
	"errors"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

const (
	// readChunk is the initial read buffer and the least free space a
	// read gets.
	readChunk = 16 << 10
	// shrinkAbove: a read buffer larger than this is given back once it
	// is empty.
	shrinkAbove = 1 << 20
	// slowWriteAt: replies larger than this are written under a deadline
	// (writeTimeout), so that a client that stops reading cannot hold a
	// connection goroutine forever.
	slowWriteAt  = 64 << 10
	writeTimeout = 30 * time.Second
)

// conn is one client connection. Its goroutine reads what the client
// sent, splits it into commands with redcon's parser, runs them in order
// and writes the replies, one write per batch of pipelined commands.
type conn struct {
	s       *Server
	nc      net.Conn
	id      int64
	addr    string
	laddr   string
	created time.Time

	meta struct { // read by other connections (CLIENT LIST)
		sync.Mutex
		name, libName, libVer string
		lastCmd               string
		proto                 int
		unblock               func(error) // ends the blocking command now running (CLIENT UNBLOCK), or nil
	}
	lastActive atomic.Int64 // unix ns of the last command
	stopping   atomic.Bool  // stop was called

	raw     syscall.RawConn // the socket's descriptor (serveRaw), or nil
	done    bool            // serveRaw: the connection ends
	recheck bool            // serveRaw: the read deadline is set (rawRecheck)
	rbuf    []byte          // unparsed input
	held    int64           // bytes of rbuf reserved in the memory budget
	need    int             // length of the unfinished command, when known
	aliased bool            // strings of the batch point into rbuf
	pending []byte          // input read while a command blocked, parsed next
	argbuf  [][]byte        // arguments of the batch being run (alias rbuf)
	out     []byte          // replies not yet written
	scratch []byte          // message serialization (appendMessage)
	keybuf  []int
	group   group // pass-through commands of the batch not yet sent

	proto  int // 2 or 3
	authed bool
	tx     txState
	quit   bool

	ctx    context.Context // ends when the connection or the server ends
	cancel context.CancelFunc
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:       s,
		nc:      nc,
		id:      s.nextID.Add(1),
		addr:    nc.RemoteAddr().String(),
		laddr:   nc.LocalAddr().String(),
		created: s.cfg.Clock.Now(),
		proto:   2,
		authed:  s.cfg.Password == "",
		rbuf:    make([]byte, 0, readChunk),
		raw:     rawConn(nc),
	}
	c.tx.slot = -1
	c.meta.proto = 2
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	return c
}

// stop makes the connection end after the batch it is running: its read
// returns at once.
func (c *conn) stop() {
	c.stopping.Store(true)
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
}

// serve runs the connection until the client leaves, sends QUIT, breaks
// the protocol or the server shuts down.
func (c *conn) serve() {
	defer func() {
		c.cancel()
		c.tx.release(c)
		_ = c.nc.Close()
		c.s.input.release(c.held)
		c.held = 0
	}()
	if c.raw != nil {
		c.serveRaw(c.raw)
		return
	}
	for {
		if cap(c.rbuf)-len(c.rbuf) < readChunk/4 && !c.growBuffer() {
			return
		}
		n, err := c.nc.Read(c.rbuf[len(c.rbuf):cap(c.rbuf)])
		c.rbuf = c.rbuf[:len(c.rbuf)+n]
		if n > 0 && !c.handleInput() {
			return
		}
		if err != nil {
			return
		}
	}
}

// growBuffer makes room to read: it doubles the buffer, or makes it as
// large as the unfinished command is known to be (a bulk argument's
// length, as Redis does), up to what QueryBufferLimit needs, reserving
// the growth from the memory budget. So a connection reserves a large
// argument whole before reading it, or waits. It returns false when the
// budget had no room in time: the connection is answered an error and
// must close.
func (c *conn) growBuffer() bool {
	size := max(2*cap(c.rbuf), readChunk, c.need+readChunk/4)
	if limit := c.s.cfg.QueryBufferLimit + readChunk; size > limit {
		size = max(limit, len(c.rbuf)+readChunk)
	}
	if !c.setBufferCap(size) {
		c.out = appendErr(c.out, errBudget)
		_ = c.write()
		return false
	}
	nb := make([]byte, len(c.rbuf), size)
	copy(nb, c.rbuf)
	c.rbuf = nb
	return true
}

// setBufferCap accounts for a read buffer of size bytes in the memory
// budget: the bytes beyond the first readChunk are reserved (or given
// back). It fails when the budget has no room in time.
func (c *conn) setBufferCap(size int) bool {
	want := int64(max(size-readChunk, 0))
	switch {
	case want > c.held:
		// What its open transaction keeps gives way to its input (see
		// txState.giveWay) before the connection waits.
		if n := want - c.held; !c.s.input.tryReserve(n) && !c.tx.giveWay(c, n) {
			if !c.s.input.reserve(n, c.s.cfg.Timeout, c.stopping.Load, &c.s.stats) {
				return false
			}
		}
	case want < c.held:
		c.s.input.release(c.held - want)
	}
	c.held = want
	return true
}

// protocolError is malformed or oversized input; the client gets
// "-ERR Protocol error: ..." and the connection is closed, as in Redis.
type protocolError string

func (e protocolError) Error() string { return "Protocol error: " + string(e) }

// handleInput runs every complete command in the read buffer and writes
// the replies. It returns false when the connection must close.
func (c *conn) handleInput() bool {
	for {
		ok, again := c.handleBatch()
		if !ok {
			return false
		}
		if again {
			continue
		}
		if len(c.pending) == 0 {
			return true
		}
		c.rbuf = append(c.rbuf, c.pending...)
		c.pending = c.pending[:0]
	}
}

// handleBatch runs the complete commands in the read buffer and writes
// their replies. again is true when complete commands may remain: before
// authentication, commands are parsed and run one at a time, because
// Redis parses with smaller bounds until AUTH has run.
func (c *conn) handleBatch() (ok, again bool) {
	data := c.rbuf
	c.argbuf = c.argbuf[:0]
	c.need = 0
	var bounds [64][2]int
	cmds := bounds[:0]
	var perr error
	lim := parseLimits{maxBulk: c.s.cfg.MaxBulkLen, unauth: !c.authed}
	for len(data) > 0 {
		start := len(c.argbuf)
		n, args, need, err := parseRequest(data, c.argbuf[start:], lim)
		if err != nil {
			perr = err
			break
		}
		if n == 0 {
			c.need = need
			break
		}
		data = data[n:]
		if len(args) == 0 {
			continue
		}
		c.argbuf = append(c.argbuf[:start], args...)
		cmds = append(cmds, [2]int{start, len(c.argbuf)})
		if lim.unauth {
			again = len(data) > 0
			break
		}
	}
	if perr == nil && len(data) > c.s.cfg.QueryBufferLimit {
		perr = protocolError("")
	}
	c.runAll(cmds)
	if perr != nil && !c.quit {
		c.s.stats.protocolErrors.Add(1)
		msg := "ERR " + perr.Error()
		if perr == protocolError("") {
			msg = errQueryBuffer
		}
		c.out = appendErr(c.out, msg)
		c.quit = true
	}
	if !c.write() {
		return false, false
	}
	// Keep the unfinished command at the front of the buffer: a new one
	// when strings of this batch point into the old (see strings).
	if c.aliased {
		c.aliased = false
		nb := make([]byte, len(data), max(readChunk, len(data)+readChunk/4))
		copy(nb, data)
		c.rbuf = nb
		if !c.setBufferCap(cap(nb)) {
			return false, false
		}
	} else if len(data) == 0 && cap(c.rbuf) > shrinkAbove {
		c.rbuf = make([]byte, 0, readChunk)
		c.setBufferCap(readChunk)
	} else {
		n := copy(c.rbuf, data)
		c.rbuf = c.rbuf[:n]
	}
	clear(c.argbuf[:cap(c.argbuf)]) // drop references into the buffer
	return !c.quit, again && !c.quit
}

// runAll runs a batch of commands. A panic (a bug) is answered with an
// error, counted, logged, and closes the connection, whose state may be
// broken; other connections go on.
func (c *conn) runAll(cmds [][2]int) {
	defer func() {
		if v := recover(); v != nil {
			c.s.stats.panics.Add(1)
			c.s.cfg.Logger.Error("proxy: panic serving a connection", "panic", v, "stack", string(debug.Stack()))
			c.out = appendErr(c.out, "ERR hotcount proxy: internal error")
			c.group.reset()
			c.quit = true
		}
	}()
	for _, b := range cmds {
		if c.quit {
			break
		}
		c.run(c.argbuf[b[0]:b[1]])
	}
	c.flushGroup()
}

// write sends the replies of the batch.
func (c *conn) write() bool {
	if len(c.out) == 0 {
		return true
	}
	if len(c.out) > slowWriteAt {
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	_, err := c.nc.Write(c.out)
	if len(c.out) > slowWriteAt {
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	if cap(c.out) > shrinkAbove {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err == nil
}

// group is a run of pass-through commands, each in one slot, sent to the
// cluster together (rueidis pipelines them per node) and answered in
// order.
type group struct {
	cmds   []rueidis.Completed
	shapes []nullShape
	noSlot bool // its commands have no key (see queue)
}

func (g *group) reset() {
	clear(g.cmds)
	g.cmds = g.cmds[:0]
	g.shapes = g.shapes[:0]
}

// flushGroup sends the pending pass-through commands and appends their
// replies.
func (c *conn) flushGroup() {
	g := &c.group
	if len(g.cmds) == 0 {
		return
	}
	// No timer per group: rueidis bounds the wait for a non-blocking
	// command by ConnWriteTimeout (Config.Timeout), pinging a connection
	// with replies outstanding and closing it when the ping does not come
	// back in time, which fails its commands. A context with a deadline
	// per command cost a timer each (about 6% of the proxy's CPU under
	// redis-benchmark).
	up := c.s.upstream(c.proto)
	if len(g.cmds) == 1 {
		res := up.Do(c.ctx, g.cmds[0])
		c.appendResult(&res, &g.shapes[0])
	} else {
		res := up.DoMulti(c.ctx, g.cmds...)
		for i := range res {
			c.appendResult(&res[i], &g.shapes[i])
		}
	}
	g.reset()
}

// appendResult appends one upstream result: the reply as Redis wrote it,
// or an error that says the cluster could not be reached.
func (c *conn) appendResult(res *rueidis.RedisResult, shape *nullShape) {
	if err := res.NonRedisError(); err != nil {
		c.s.stats.upstreamErrors.Add(1)
		c.out = appendErr(c.out, upstreamError(err))
		return
	}
	msg, rerr := res.ToMessage()
	if rerr != nil {
		if e, _ := msg.ToString(); redirection(e) {
			c.out = appendErr(c.out, errRedirect)
			return
		}
	}
	out, err := appendMessage(c.out, &msg, c.proto, shape, &c.scratch)
	if err != nil {
		c.s.stats.upstreamErrors.Add(1)
		c.out = appendErr(c.out, "ERR hotcount proxy: "+err.Error())
		return
	}
	c.out = out
}

// upstreamError is the reply for a failed round trip to the cluster.
func upstreamError(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "ERR hotcount proxy: the cluster did not answer in time"
	case errors.Is(err, context.Canceled):
		return "ERR hotcount proxy: shutting down"
	}
	return "ERR hotcount proxy: cluster unavailable: " + err.Error()
}

// watchClient runs f with a context that ends when the client hangs up,
// for commands that may block for long (BLPOP, XREAD BLOCK): the
// connection's goroutine is busy in f, so a second one reads meanwhile,
// from a duplicate of the socket when the first holds its read side
// (watchConn). What it reads (the client may pipeline more) is kept in
// c.pending and parsed after the current batch.
func (c *conn) watchClient(f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	wc, release, ok := c.watchConn()
	if !ok {
		f(ctx) // not watched: ends with the command or the server
		return
	}
	defer release()
	var (
		wg         sync.WaitGroup
		stop, gone atomic.Bool
		extra      []byte
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := wc.Read(buf)
			if n > 0 {
				if len(extra)+n > c.s.cfg.QueryBufferLimit {
					gone.Store(true)
					cancel()
					return
				}
				extra = append(extra, buf[:n]...)
			}
			if err != nil {
				if !stop.Load() {
					gone.Store(true) // the client left, or the server stops
					cancel()
				}
				return
			}
		}
	}()
	f(ctx)
	stop.Store(true)
	_ = wc.SetReadDeadline(time.Unix(1, 0))
	wg.Wait()
	if wc == c.nc {
		c.s.mu.Lock()
		if !c.s.closing {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		c.s.mu.Unlock()
	}
	if gone.Load() {
		c.quit = true
	}
	c.pending = append(c.pending, extra...)
}
