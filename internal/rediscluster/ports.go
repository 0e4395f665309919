package rediscluster

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

// PortsEnv names the environment variable that sets the range ports are
// picked from, as "lo-hi" (both included), e.g. HOTCOUNT_TEST_PORTS=20000-29999.
// A cluster node's bus port is its port + 10000, so hi may be at most
// 55535. Ports given explicitly (NodeOptions.Port, ClusterOptions.BasePort)
// are not bound by it.
const PortsEnv = "HOTCOUNT_TEST_PORTS"

// maxPickedPort is the highest port whose bus port is a valid port.
const maxPickedPort = 65535 - busOffset

// portRange returns the half-open range ports are picked from: the one
// PortsEnv sets, or [portLow, ephemeral low - busOffset).
func portRange() (lo, hi int, err error) {
	if v, ok := os.LookupEnv(PortsEnv); ok {
		lo, hi, err := parsePorts(v)
		if err != nil {
			return 0, 0, err
		}
		return lo, hi + 1, nil
	}
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
		return fallbackLow, fallbackHigh, nil
	}
	return portLow, hi, nil
}

// parsePorts parses a PortsEnv value "lo-hi" into its inclusive bounds.
func parsePorts(v string) (lo, hi int, err error) {
	bad := func(why string) (int, int, error) {
		return 0, 0, fmt.Errorf("%w: %s=%q: %s; want lo-hi with 1 <= lo <= hi <= %d, e.g. %s=20000-29999",
			ErrBadPorts, PortsEnv, v, why, maxPickedPort, PortsEnv)
	}
	a, b, ok := strings.Cut(strings.TrimSpace(v), "-")
	if !ok {
		return bad("no '-' between the bounds")
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	switch {
	case err1 != nil || err2 != nil:
		return bad("the bounds must be whole numbers")
	case lo < 1 || hi > maxPickedPort:
		return bad(fmt.Sprintf("out of range (a bus port is port+%d)", busOffset))
	case lo > hi:
		return bad("lo is above hi")
	}
	return lo, hi, nil
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

// FreePort returns a random free port on 127.0.0.1 in the range pickPort
// uses (PortsEnv), one this process has not handed out before, e.g. for a
// node's TLS port.
func FreePort() (int, error) { return pickPort(false) }

// pickPort returns a random free port whose bus port (when bus is set) is
// free too, and that this process has not handed out before.
func pickPort(bus bool) (int, error) {
	lo, hi, err := portRange()
	if err != nil {
		return 0, err
	}
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
