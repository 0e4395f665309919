package proxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
)

var errShort = errors.New("short reply line")

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func ioReadFull(br *bufio.Reader, b []byte) (int, error) { return io.ReadFull(br, b) }

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
