package rediscluster

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int
		why    string // in the error; "" = valid
	}{
		{"20000-29999", 20000, 29999, ""},
		{" 21000 - 21000 ", 21000, 21000, ""},
		{"1-55535", 1, 55535, ""},
		{"", 0, 0, "no '-'"},
		{"20000", 0, 0, "no '-'"},
		{"20000:29999", 0, 0, "no '-'"},
		{"a-b", 0, 0, "whole numbers"},
		{"20000-", 0, 0, "whole numbers"},
		{"-5-10", 0, 0, "whole numbers"},
		{"0-100", 0, 0, "out of range"},
		{"50000-60000", 0, 0, "out of range"},
		{"30000-20000", 0, 0, "lo is above hi"},
	} {
		lo, hi, err := parsePorts(tc.in)
		if tc.why == "" {
			if err != nil || lo != tc.lo || hi != tc.hi {
				t.Errorf("parsePorts(%q) = %d, %d, %v; want %d, %d", tc.in, lo, hi, err, tc.lo, tc.hi)
			}
			continue
		}
		if !errors.Is(err, ErrBadPorts) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), PortsEnv) {
			t.Errorf("parsePorts(%q) = %v; want ErrBadPorts naming %s and saying %q", tc.in, err, PortsEnv, tc.why)
		}
	}
}

// TestPortsEnv: picked ports obey HOTCOUNT_TEST_PORTS, and a bad value
// stops a node from starting with a clear error. (Not parallel: it sets
// the environment.)
func TestPortsEnv(t *testing.T) {
	t.Setenv(PortsEnv, "23100-23199")
	for range 20 {
		p, err := pickPort(true)
		if err != nil {
			t.Fatal(err)
		}
		if p < 23100 || p > 23199 {
			t.Fatalf("picked port %d outside %s=23100-23199", p, PortsEnv)
		}
	}
	ctx := testCtx(t, 30*time.Second)
	n, err := StartNode(ctx, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if n.Port < 23100 || n.Port > 23199 {
		t.Errorf("node started on port %d, outside the range set", n.Port)
	}

	t.Setenv(PortsEnv, "7000")
	if n, err := StartNode(ctx, NodeOptions{}); !errors.Is(err, ErrBadPorts) {
		if n != nil {
			n.Stop()
		}
		t.Fatalf("StartNode with %s=7000: %v, want ErrBadPorts", PortsEnv, err)
	}
}
