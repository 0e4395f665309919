package rediscluster

import (
	"errors"
	"syscall"
)

// Windows has no redis-server 7 and no POSIX signals; the package builds so
// that the command builds, and every start fails at the signal or lookup.

func foregroundAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func daemonAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// processGone reports every process gone: pids cannot be probed here.
func processGone(int) bool { return true }

// isRedisProcess reports false: pids cannot be probed here.
func isRedisProcess(int) bool { return false }

// signalProcess is not supported.
func signalProcess(int, syscall.Signal) error { return errors.ErrUnsupported }
