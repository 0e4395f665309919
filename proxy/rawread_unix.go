//go:build unix

package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// rawRecheck bounds how long an end of input that came with the last
// data goes unseen (see onReadable).
const rawRecheck = 100 * time.Millisecond

// rawConn returns the file descriptor access of a TCP or Unix socket, nil
// for other connections (which serve reads with net.Conn.Read).
func rawConn(nc net.Conn) syscall.RawConn {
	var sc syscall.Conn
	switch nc := nc.(type) {
	case *net.TCPConn:
		sc = nc
	case *net.UnixConn:
		sc = nc
	default:
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// serveRaw runs the connection on its file descriptor: see onReadable.
// It returns when the client leaves, the connection must close, or it is
// stopped.
func (c *conn) serveRaw(rc syscall.RawConn) {
	for !c.done {
		err := rc.Read(c.onReadable)
		if err == nil {
			continue // c.done
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || c.stopping.Load() {
			return
		}
		// The recheck deadline (see onReadable): the next rc.Read reads
		// first, and waits without a deadline if the socket is empty.
		c.recheck = false
		_ = c.nc.SetReadDeadline(time.Time{})
		if c.stopping.Load() { // stop's deadline was just undone
			return
		}
	}
}

// onReadable is called by the runtime's poller with the connection's
// descriptor, first at once and then each time the socket becomes
// readable. It reads, runs the commands and writes their replies, and
// returns false to wait for more input, true when the connection ends.
//
// net.Conn.Read, after a read that returned data, costs a second read
// that finds the socket empty before it waits: the poller is
// edge-triggered, and each Read forgets what it saw before it. Here the
// wait keeps what the poller saw since the last one, so a read that
// returned less than it had room for (the socket held no more data then;
// data that arrives later is seen by the poller) is followed by a wait,
// not by a read. Under one command at a time per client that is one read
// system call per command instead of two.
//
// The one thing such a read does not show is an end of input that came
// with the data (a client that writes and shuts down its side at once):
// nothing arrives after it to wake the poller. So a wait after such a
// read has a deadline, rawRecheck later, at which the socket is read
// once more (serveRaw); the deadline is set once and stays while
// commands keep coming, so it costs a timer per rawRecheck, not per
// command.
func (c *conn) onReadable(fd uintptr) bool {
	for {
		if cap(c.rbuf)-len(c.rbuf) < readChunk/4 && !c.growBuffer() {
			c.done = true
			return true
		}
		room := cap(c.rbuf) - len(c.rbuf)
		n, err := syscall.Read(int(fd), c.rbuf[len(c.rbuf):cap(c.rbuf)])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return false
		case err != nil, n <= 0:
			c.done = true
			return true
		}
		c.rbuf = c.rbuf[:len(c.rbuf)+n]
		if !c.handleInput() {
			c.done = true
			return true
		}
		if n < room {
			if !c.recheck {
				c.recheck = true
				_ = c.nc.SetReadDeadline(time.Now().Add(rawRecheck))
				if c.stopping.Load() { // stop's deadline was just undone
					c.done = true
					return true
				}
			}
			return false
		}
	}
}

// watchConn returns a connection that reads the client's socket while a
// command blocks (watchClient), and the function that releases it. The
// connection's own goroutine holds the socket's read side (serveRaw), so
// it is a duplicate of the descriptor, with a poller registration of its
// own. When the descriptor cannot be duplicated, ok is false.
func (c *conn) watchConn() (nc net.Conn, release func(), ok bool) {
	rc := c.raw
	if rc == nil {
		return c.nc, func() {}, true
	}
	dup := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		syscall.ForkLock.RLock() // no child inherits it
		if dup, derr = syscall.Dup(int(fd)); derr == nil {
			syscall.CloseOnExec(dup)
		}
		syscall.ForkLock.RUnlock()
	}); err != nil || derr != nil {
		return nil, nil, false
	}
	f := os.NewFile(uintptr(dup), "client")
	wc, err := net.FileConn(f) // a duplicate of its own
	_ = f.Close()
	if err != nil {
		return nil, nil, false
	}
	return wc, func() { _ = wc.Close() }, true
}
