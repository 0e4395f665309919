//go:build unix && !linux

package rediscluster

import (
	"errors"
	"syscall"
)

// foregroundAttr is a plain attribute set: without Linux's parent-death
// signal, children of a crashed test process must be stopped by hand.
func foregroundAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// daemonAttr puts the child in its own session so that it outlives us.
func daemonAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// processGone reports whether pid no longer exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// isRedisProcess reports whether pid is alive; the command line cannot be
// checked portably.
func isRedisProcess(pid int) bool { return !processGone(pid) }

// signalProcess sends sig to pid.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
