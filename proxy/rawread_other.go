//go:build !unix

package proxy

import (
	"net"
	"syscall"
)

// rawConn returns nil: connections are read with net.Conn.Read.
func rawConn(net.Conn) syscall.RawConn { return nil }

// serveRaw is not used where rawConn returns nil.
func (c *conn) serveRaw(syscall.RawConn) {}

// watchConn returns the connection itself: its goroutine reads it with
// net.Conn.Read, which it does not hold while a command blocks.
func (c *conn) watchConn() (nc net.Conn, release func(), ok bool) {
	return c.nc, func() {}, true
}
