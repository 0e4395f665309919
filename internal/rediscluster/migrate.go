package rediscluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MigrateSlot moves slot from the primary src to the primary dst the way
// redis-cli does it: SETSLOT IMPORTING on dst, MIGRATING on src, MIGRATE of
// every key in the slot, then SETSLOT NODE on dst, src and every other
// primary in primaries.
func MigrateSlot(ctx context.Context, slot uint16, src, dst string, primaries []string) error {
	var err error
	do := func(addr string, args ...string) string {
		if err != nil {
			return ""
		}
		var out string
		out, err = Do(ctx, addr, args...)
		if err != nil {
			err = fmt.Errorf("%s %v: %w", addr, args, err)
		}
		return out
	}
	sl := strconv.Itoa(int(slot))
	srcID, dstID := do(src, "CLUSTER", "MYID"), do(dst, "CLUSTER", "MYID")
	do(dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID)
	host, port, _ := net.SplitHostPort(dst)
	for err == nil {
		keys := strings.Fields(do(src, "CLUSTER", "GETKEYSINSLOT", sl, "100"))
		if len(keys) == 0 {
			break
		}
		do(src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)...)
	}
	do(dst, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
	do(src, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
	for _, p := range primaries {
		if p != src && p != dst {
			do(p, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
		}
	}
	return err
}
