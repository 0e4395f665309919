// Package dirlock keeps two processes from working on one data folder in
// ways that would overwrite each other.
//
// # Algorithm
//
// A lock is an flock(2) on the file LockFile in the folder, taken without
// waiting. The embedded store lives inside one process, so a process that
// serves counters from it takes the lock exclusively: no other process may
// use the folder at the same time. A process that only shares the folder's
// SQLite durable store (behind a real Redis Cluster, where many processes
// may write the same store) takes it shared: any number of those run
// together, but none beside an exclusive holder.
//
// The kernel drops an flock when its holder exits, however it exits, so a
// lock left by a killed process never blocks a restart: the file stays,
// the lock does not. The exclusive holder writes its PID into the file so
// that a refused process can name it.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the name of the lock file in a data folder.
const LockFile = "hotcount.lock"

// ErrLocked: another process holds the folder's lock.
var ErrLocked = errors.New("data folder in use by another process")

// Lock is a held lock on a data folder.
type Lock struct {
	f *os.File
}

// Exclusive locks dir for this process alone, creating dir and the lock
// file when missing. It fails with ErrLocked (naming the folder and, when
// known, the holder's PID) while another process holds a lock on dir.
func Exclusive(dir string) (*Lock, error) { return take(dir, syscall.LOCK_EX) }

// Shared locks dir beside other shared holders; it fails with ErrLocked
// while a process holds dir exclusively.
func Shared(dir string) (*Lock, error) { return take(dir, syscall.LOCK_SH) }

func take(dir string, how int) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, locked(dir, path)
		}
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	if how == syscall.LOCK_EX {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return &Lock{f: f}, nil
}

// locked describes a refused lock: the folder and, when the file names a
// live process, its PID.
func locked(dir, path string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	b, _ := os.ReadFile(path)
	if s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "pid "); ok {
		if pid, err := strconv.Atoi(s); err == nil && pid > 0 && syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("%w: %s is held by process %d (one process per data folder that holds the embedded store)", ErrLocked, abs, pid)
		}
	}
	return fmt.Errorf("%w: %s is held by another process (one process per data folder that holds the embedded store)", ErrLocked, abs)
}

// Release drops the lock; it is idempotent. The exclusive holder's PID is
// wiped first so that it is never taken for a live holder's.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0)
	return f.Close() // closing the last descriptor drops the flock
}
