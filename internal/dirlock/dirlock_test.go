package dirlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExclusiveAndShared(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a, err := Exclusive(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, take := range map[string]func(string) (*Lock, error){"exclusive": Exclusive, "shared": Shared} {
		_, err := take(dir)
		abs, _ := filepath.Abs(dir)
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), abs) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
			t.Fatalf("%s beside an exclusive holder: %v; want ErrLocked naming %s and pid %d", name, err, abs, os.Getpid())
		}
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	s1, err := Shared(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Shared(dir)
	if err != nil {
		t.Fatalf("two shared holders: %v", err)
	}
	if _, err := Exclusive(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("exclusive beside shared holders: %v", err)
	}
	s1.Release()
	s2.Release()
	b, err := Exclusive(dir)
	if err != nil {
		t.Fatalf("exclusive after every holder released: %v", err)
	}
	b.Release()
}

// TestStaleLockNeverBlocks: a lock held by a process that was killed is
// gone with it.
func TestStaleLockNeverBlocks(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) not installed")
	}
	dir := t.TempDir()
	holder := exec.Command(flock, "--exclusive", "--close", filepath.Join(dir, LockFile), "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := Exclusive(dir)
		if errors.Is(err, ErrLocked) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// flock(1) has not taken it yet: let go and look again.
		l.Release()
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) // flock(1) and its sleep
	holder.Wait()
	l, err := Exclusive(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Release()
}
