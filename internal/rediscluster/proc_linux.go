package rediscluster

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// foregroundAttr makes the kernel kill the child when this process dies.
// (The signal follows the creating thread; the Go runtime keeps its threads
// for the life of the process unless a goroutine exits while locked to one.)
func foregroundAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// daemonAttr puts the child in its own session so that it outlives us.
func daemonAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}

// processGone reports whether pid has exited (missing, or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the last ')' (the command name may contain one).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st == 'Z' || st == 'X'
}

// isRedisProcess reports whether pid is a live redis-server, so that a
// recycled pid from a stale pidfile is never signalled.
func isRedisProcess(pid int) bool {
	if processGone(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("redis-server")) || bytes.Contains(b, []byte("redis-check"))
}

// signalProcess sends sig to pid.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
