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
//
// flock(1) takes the lock, forks, and its child closes the locked file
// (--close) before it runs the command: until then the child shares the
// lock, and a child killed in that moment may still hold it after
// flock(1) itself has been waited for. The command marks that it runs, and
// the test kills only after the mark, when flock(1) alone holds the lock.
func TestStaleLockNeverBlocks(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) not installed")
	}
	dir := t.TempDir()
	ready := filepath.Join(t.TempDir(), "running")
	holder := exec.Command(flock, "--exclusive", "--close", filepath.Join(dir, LockFile), "sh", "-c", `touch "$0" && exec sleep 600`, ready)
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
			holder.Wait()
			t.Fatal("flock(1) never ran its command")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := Exclusive(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("while flock(1) holds the lock: %v, want ErrLocked", err)
	}
	syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) // flock(1) and its sleep
	holder.Wait()
	l, err := Exclusive(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Release()
}
