package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFind(t *testing.T) {
	const hybrid = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const combined = `31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
`
	const unified = `29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	const spaced = `31 30 0:28 / /mnt/my\040cgroups rw - cgroup cgroup rw,cpu
`
	const none = `22 1 0:21 / /proc rw - proc proc rw
`
	tests := []struct {
		name      string
		mountinfo string
		v2cpu     bool
		want      Hierarchy
		err       error
	}{
		{"v1 cpu beside a v2 mount without cpu", hybrid, false, Hierarchy{V1, "/sys/fs/cgroup/cpu"}, nil},
		{"v2 with cpu is preferred", hybrid, true, Hierarchy{V2, "/sys/fs/cgroup/unified"}, nil},
		{"v1 cpu,cpuacct", combined, false, Hierarchy{V1, "/sys/fs/cgroup/cpu,cpuacct"}, nil},
		{"v2 only", unified, true, Hierarchy{V2, "/sys/fs/cgroup"}, nil},
		{"v2 without cpu", unified, false, Hierarchy{}, ErrUnsupported},
		{"escaped mount point", spaced, false, Hierarchy{V1, "/mnt/my cgroups"}, nil},
		{"no cgroups", none, false, Hierarchy{}, ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := find(strings.NewReader(tt.mountinfo), func(string) bool { return tt.v2cpu })
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Fatalf("find = %v, %v; want %v, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestParseCPU(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		in   string
		want Quota
		err  bool
	}{
		{"10%", Quota{10 * ms, 100 * ms}, false},
		{" 2.5% ", Quota{2500 * time.Microsecond, 100 * ms}, false},
		{"100%", Quota{100 * ms, 100 * ms}, false},
		{"250%", Quota{250 * ms, 100 * ms}, false},
		{"0.5%", Quota{ms, 200 * ms}, false}, // the period grows so that Max stays 1 ms
		{"0.1%", Quota{ms, time.Second}, false},
		{"0.05%", Quota{}, true}, // would need a 2 s period
		{"0%", Quota{}, true},
		{"-5%", Quota{}, true},
		{"10", Quota{}, true},
		{"ten%", Quota{}, true},
		{"NaN%", Quota{}, true},
		{"", Quota{}, true},
	}
	for _, tt := range tests {
		got, err := ParseCPU(tt.in)
		if tt.err {
			if !errors.Is(err, ErrInvalidQuota) {
				t.Errorf("ParseCPU(%q) = %v, %v; want ErrInvalidQuota", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseCPU(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if s := (Quota{10 * ms, 100 * ms}).String(); s != "10% (10ms per 100ms)" {
		t.Errorf("String = %q", s)
	}
}

// fakeGroup makes the control files of a group in a fake hierarchy.
func fakeGroup(t *testing.T, dir string, files ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFilesV1 and TestFilesV2 check what Create writes and what Quota and
// Stat read, on a fake hierarchy of plain files.
func TestFilesV1(t *testing.T) {
	h := Hierarchy{V1, t.TempDir()}
	dir := filepath.Join(h.Mount, "hc", "node-1")
	fakeGroup(t, dir, "cpu.cfs_quota_us", "cpu.cfs_period_us", "cgroup.procs")
	if err := os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte("nr_periods 40\nnr_throttled 7\nthrottled_time 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	q := Quota{Max: 10 * time.Millisecond, Period: 100 * time.Millisecond}
	if err := h.Create("hc/node-1", q); err != nil {
		t.Fatal(err)
	}
	if a, b := read(t, filepath.Join(dir, "cpu.cfs_quota_us")), read(t, filepath.Join(dir, "cpu.cfs_period_us")); a != "10000" || b != "100000" {
		t.Fatalf("quota %q period %q", a, b)
	}
	if got, limited, err := h.Quota("hc/node-1"); err != nil || !limited || got != q {
		t.Fatalf("Quota = %v, %v, %v", got, limited, err)
	}
	if err := h.Add("hc/node-1", 4242); err != nil || read(t, filepath.Join(dir, "cgroup.procs")) != "4242" {
		t.Fatalf("Add: %v", err)
	}
	if st, err := h.Stat("hc/node-1"); err != nil || st != (Stat{Periods: 40, Throttled: 7}) {
		t.Fatalf("Stat = %+v, %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, limited, err := h.Quota("hc/node-1"); err != nil || limited {
		t.Fatalf("an unlimited group reads limited=%v, %v", limited, err)
	}
}

func TestFilesV2(t *testing.T) {
	h := Hierarchy{V2, t.TempDir()}
	fakeGroup(t, h.Mount, "cgroup.subtree_control")
	fakeGroup(t, filepath.Join(h.Mount, "hc"), "cgroup.subtree_control")
	dir := filepath.Join(h.Mount, "hc", "node-1")
	fakeGroup(t, dir, "cpu.max", "cgroup.procs")
	q := Quota{Max: 2 * time.Millisecond, Period: 100 * time.Millisecond}
	if err := h.Create("hc/node-1", q); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.Mount, filepath.Join(h.Mount, "hc")} {
		if got := read(t, filepath.Join(d, "cgroup.subtree_control")); got != "+cpu" {
			t.Fatalf("%s/cgroup.subtree_control = %q, want +cpu", d, got)
		}
	}
	if got := read(t, filepath.Join(dir, "cpu.max")); got != "2000 100000" {
		t.Fatalf("cpu.max = %q", got)
	}
	if got, limited, err := h.Quota("hc/node-1"); err != nil || !limited || got != q {
		t.Fatalf("Quota = %v, %v, %v", got, limited, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("max 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, limited, err := h.Quota("hc/node-1"); err != nil || limited {
		t.Fatalf("cpu.max \"max\" reads limited=%v, %v", limited, err)
	}
}

func TestNames(t *testing.T) {
	h := Hierarchy{V1, t.TempDir()}
	for _, name := range []string{"", ".", "..", "../x", "/abs", "a//b", "a/../b", "a/"} {
		if err := h.Create(name, Quota{10 * time.Millisecond, 100 * time.Millisecond}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Create(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if err := h.Create("ok", Quota{Max: time.Microsecond, Period: 100 * time.Millisecond}); !errors.Is(err, ErrInvalidQuota) {
		t.Errorf("Create with a quota below MinMax: %v", err)
	}
}

// realHierarchy returns this machine's cpu hierarchy, or skips the test
// saying why the caps cannot be used here.
func realHierarchy(t *testing.T, parent string) Hierarchy {
	t.Helper()
	h, err := Find()
	if err != nil {
		t.Skipf("no CPU caps on this machine: %v", err)
	}
	if err := h.Check(parent); err != nil {
		t.Skipf("no CPU caps for this process on %v: %v", h, err)
	}
	return h
}

// cpuTime returns the CPU time pid has used (/proc/PID/schedstat).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		t.Skipf("no per-process CPU time here: %v", err)
	}
	f := strings.Fields(string(b))
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("schedstat %q: %v", b, err)
	}
	return time.Duration(ns)
}

// TestRealQuota caps a busy process at 10% of one CPU on this machine's
// real hierarchy and checks that it never gets more than that (its CPU
// time over the elapsed time, which a busy machine can only lower) and
// that the kernel throttled it. Where groups cannot be created it skips,
// saying why. A machine so busy that the process never reached its quota
// is tried again a fixed number of times, then skipped.
func TestRealQuota(t *testing.T) {
	const parent = "hotcount-test"
	h := realHierarchy(t, parent)
	name := parent + "/spin-" + strconv.Itoa(os.Getpid())
	q, err := ParseCPU("10%")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Create(name, q); err != nil {
		t.Fatal(err)
	}
	spin := exec.Command("sh", "-c", "while :; do :; done")
	if err := spin.Start(); err != nil {
		t.Skipf("cannot start a busy process: %v", err)
	}
	t.Cleanup(func() {
		_ = spin.Process.Kill()
		_ = spin.Wait()
		if err := h.Remove(name); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	if err := h.Add(name, spin.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if procs, err := h.Procs(name); err != nil || len(procs) != 1 || procs[0] != spin.Process.Pid {
		t.Fatalf("Procs = %v, %v; want [%d]", procs, err, spin.Process.Pid)
	}
	const tries = 5
	for try := 1; try <= tries; try++ {
		st0 := mustStat(t, h, name)
		cpu0, wall0 := cpuTime(t, spin.Process.Pid), time.Now()
		time.Sleep(10 * q.Period)
		cpu, wall := cpuTime(t, spin.Process.Pid)-cpu0, time.Since(wall0)
		st := mustStat(t, h, name)
		// Slack: the window need not start or end on a period boundary,
		// and the kernel hands out quota to each CPU in slices (5 ms by
		// default), so a group may overrun a period slightly. An uncapped
		// spinner would use ten times the quota.
		if limit := 1.25*q.Share()*float64(wall) + 2*float64(q.Max); float64(cpu) > limit {
			t.Fatalf("the capped process used %v of CPU in %v, more than %v allows", cpu, wall, q)
		}
		if st.Throttled > st0.Throttled {
			t.Logf("try %d: %v of CPU in %v; throttled in %d of %d periods", try, cpu, wall, st.Throttled-st0.Throttled, st.Periods-st0.Periods)
			return
		}
		t.Logf("try %d: %v of CPU in %v and never throttled: the machine is busy", try, cpu, wall)
	}
	t.Skipf("the busy process never reached its quota in %d tries: the machine is too busy to show throttling", tries)
}

func mustStat(t *testing.T, h Hierarchy, name string) Stat {
	t.Helper()
	st, err := h.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCheckNamesPath checks that a hierarchy where groups cannot be made
// fails Check with an error naming the path that could not be written.
func TestCheckNamesPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-hierarchy")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []Version{V1, V2} {
		err := Hierarchy{v, file}.Check("hotcount")
		if err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("v%d: Check = %v, want an error naming %s", v, err, file)
		}
	}
}
