package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// busOffset is the distance from a node's port to its cluster bus port.
const busOffset = 10000

// Port range for picked ports: [portLow, ephemeralLow-busOffset), so that
// both a port and its bus port lie below the kernel's ephemeral range.
const (
	portLow          = 15000
	defaultEphemeral = 32768
	minPortSpan      = 1000
	// Used when the ephemeral range leaves too little room below it.
	fallbackLow, fallbackHigh = 20000, 50000
	maxPortTries              = 500
)

var (
	portMu sync.Mutex
	// portsTaken holds every port handed out in this process, so that
	// concurrent starts never pick the same one.
	portsTaken = map[int]bool{}
)

// portRange returns the half-open range ports are picked from.
func portRange() (lo, hi int) {
	eph := defaultEphemeral
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				eph = n
			}
		}
	}
	hi = eph - busOffset
	if hi-portLow < minPortSpan {
		return fallbackLow, fallbackHigh
	}
	return portLow, hi
}

// portFree reports whether port can be listened on at 127.0.0.1.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// pickPort returns a random free port whose bus port (when bus is set) is
// free too, and that this process has not handed out before.
func pickPort(bus bool) (int, error) {
	lo, hi := portRange()
	portMu.Lock()
	defer portMu.Unlock()
	for range maxPortTries {
		p := lo + rand.IntN(hi-lo)
		if portsTaken[p] || !portFree(p) || (bus && !portFree(p+busOffset)) {
			continue
		}
		portsTaken[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("%w: no free port found in [%d,%d) after %d tries", ErrPortInUse, lo, hi, maxPortTries)
}

// checkPort returns ErrPortInUse when a requested port (or its bus port) is
// taken.
func checkPort(port int, bus bool) error {
	if !portFree(port) {
		return fmt.Errorf("%w: 127.0.0.1:%d", ErrPortInUse, port)
	}
	if bus && !portFree(port+busOffset) {
		return fmt.Errorf("%w: cluster bus port 127.0.0.1:%d (port %d)", ErrPortInUse, port+busOffset, port)
	}
	return nil
}
