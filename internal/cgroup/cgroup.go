// Package cgroup puts processes under a CPU quota with Linux control
// groups, so that one machine can stand in for nodes of a known, limited
// capacity.
//
// # Hierarchies
//
// Find reads /proc/self/mountinfo for a hierarchy with the cpu controller:
// a cgroup v2 mount whose cgroup.controllers lists "cpu" (preferred), or a
// cgroup v1 mount with the cpu option. A group is a directory under the
// mount; its quota is "MAX PERIOD" (microseconds) in cpu.max on v2, and
// cpu.cfs_quota_us and cpu.cfs_period_us on v1. Under such a quota the
// processes of the group together run for at most MAX of every PERIOD of
// CPU time; the kernel throttles them for the rest of the period and
// counts the periods in which it did (nr_throttled in cpu.stat).
//
// On v2 a controller only reaches a group when every ancestor enables it
// for its children (+cpu in cgroup.subtree_control), and a group with
// processes of its own cannot enable controllers for its children; Create
// enables cpu from the mount down and reports that case as an error.
//
// Creating groups needs the right to write the hierarchy (root, or a
// delegated subtree). Where that is missing, Find or Create return an
// error that wraps ErrUnsupported or the permission error and names the
// path that could not be written.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Named errors. Test with errors.Is.
var (
	// ErrUnsupported: no mounted cgroup hierarchy offers the cpu controller.
	ErrUnsupported = errors.New("cgroup: no cgroup hierarchy with the cpu controller")
	// ErrInvalidQuota: a CPU share that cannot be expressed as a quota.
	ErrInvalidQuota = errors.New("cgroup: invalid CPU quota")
	// ErrInvalidName: a group name that is not a relative path inside the
	// hierarchy.
	ErrInvalidName = errors.New("cgroup: invalid group name")
)

// Quota limits and defaults.
const (
	// DefaultPeriod is the accounting period of a quota when the share
	// allows it (the kernel's default CFS period).
	DefaultPeriod = 100 * time.Millisecond
	// MinMax is the least CPU time per period the kernel accepts.
	MinMax = time.Millisecond
	// MaxPeriod is the longest period the kernel accepts.
	MaxPeriod = time.Second
)

// Remove retries a group that is still busy this many times, removeWait
// apart.
const (
	removeTries = 50
	removeWait  = 100 * time.Millisecond
)

// Version is the cgroup version of a hierarchy.
type Version int

// The versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Hierarchy is a mounted cgroup hierarchy with the cpu controller.
type Hierarchy struct {
	// Version is V1 or V2.
	Version Version
	// Mount is where the hierarchy is mounted, e.g. /sys/fs/cgroup/cpu.
	Mount string
}

// String describes h, e.g. "cgroup v1 at /sys/fs/cgroup/cpu".
func (h Hierarchy) String() string { return fmt.Sprintf("cgroup v%d at %s", h.Version, h.Mount) }

// Find returns the hierarchy that carries the cpu controller on this
// machine: cgroup v2 when its root offers cpu, else cgroup v1's cpu
// hierarchy. It wraps ErrUnsupported when there is none.
func Find() (Hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Hierarchy{}, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer f.Close()
	return find(f, func(mount string) bool {
		b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
		return err == nil && slices.Contains(strings.Fields(string(b)), "cpu")
	})
}

// find picks the hierarchy from a mountinfo listing; v2Has reports
// whether a cgroup2 mount offers the cpu controller.
func find(mountinfo io.Reader, v2Has func(mount string) bool) (Hierarchy, error) {
	var v1 []string
	var v2 []string
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		mount := unescapeMount(f[4])
		switch g[0] {
		case "cgroup2":
			v2 = append(v2, mount)
		case "cgroup":
			if slices.Contains(strings.Split(g[2], ","), "cpu") {
				v1 = append(v1, mount)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Hierarchy{}, fmt.Errorf("%w: reading mountinfo: %w", ErrUnsupported, err)
	}
	for _, m := range v2 {
		if v2Has(m) {
			return Hierarchy{Version: V2, Mount: m}, nil
		}
	}
	if len(v1) > 0 {
		return Hierarchy{Version: V1, Mount: v1[0]}, nil
	}
	return Hierarchy{}, ErrUnsupported
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Quota is a CPU share: the processes of a group run at most Max of CPU
// time in every Period.
type Quota struct {
	Max, Period time.Duration
}

// QuotaOf returns the quota for a share of one CPU (0.1 is 10%): Max is
// share × Period, with Period DefaultPeriod, or longer when Max would
// fall below MinMax. The share must be positive and small enough that
// Max fits the period's bounds.
func QuotaOf(share float64) (Quota, error) {
	if !(share > 0) || share > 1000 {
		return Quota{}, fmt.Errorf("%w: share %v of one CPU (want more than 0)", ErrInvalidQuota, share)
	}
	period := DefaultPeriod
	if d := time.Duration(float64(MinMax) / share); d > period {
		period = d.Round(time.Microsecond)
	}
	if period > MaxPeriod {
		return Quota{}, fmt.Errorf("%w: %s of one CPU is less than %v per %v", ErrInvalidQuota, percent(share), MinMax, MaxPeriod)
	}
	return Quota{Max: time.Duration(share * float64(period)).Round(time.Microsecond), Period: period}, nil
}

// ParseCPU parses a share of one CPU written as a percentage, "10%" or
// "250%" (two and a half CPUs), into a Quota.
func ParseCPU(s string) (Quota, error) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return Quota{}, fmt.Errorf("%w: %q: write the share of one CPU as a percentage, e.g. 10%%", ErrInvalidQuota, s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil {
		return Quota{}, fmt.Errorf("%w: %q: %w", ErrInvalidQuota, s, err)
	}
	return QuotaOf(v / 100)
}

// Share returns Max / Period: the part of one CPU the quota allows.
func (q Quota) Share() float64 {
	if q.Period <= 0 {
		return 0
	}
	return float64(q.Max) / float64(q.Period)
}

// String writes the quota as "10% (10ms per 100ms)".
func (q Quota) String() string {
	return fmt.Sprintf("%s (%v per %v)", percent(q.Share()), q.Max, q.Period)
}

func percent(share float64) string {
	return strconv.FormatFloat(share*100, 'g', 4, 64) + "%"
}

// path returns the directory of group name, which must be a clean
// relative path.
func (h Hierarchy) path(name string) (string, error) {
	if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == "." ||
		strings.HasPrefix(name, "../") || name == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return filepath.Join(h.Mount, filepath.FromSlash(name)), nil
}

// Create makes group name (and its missing parents) and sets its quota.
// It is idempotent: an existing group gets the new quota.
func (h Hierarchy) Create(name string, q Quota) error {
	dir, err := h.path(name)
	if err != nil {
		return err
	}
	if q.Max < MinMax || q.Period < MinMax || q.Period > MaxPeriod {
		return fmt.Errorf("%w: %v", ErrInvalidQuota, q)
	}
	if h.Version == V2 {
		if err := h.enableCPU(name); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup: create %s: %w", dir, err)
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	if h.Version == V2 {
		return write(filepath.Join(dir, "cpu.max"), us(q.Max)+" "+us(q.Period))
	}
	// v1 checks the quota against the period in force: lift the quota
	// first, so that any new period is accepted, then set both.
	if err := write(filepath.Join(dir, "cpu.cfs_quota_us"), "-1"); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "cpu.cfs_period_us"), us(q.Period)); err != nil {
		return err
	}
	return write(filepath.Join(dir, "cpu.cfs_quota_us"), us(q.Max))
}

// enableCPU makes the cpu controller reach group name on v2: +cpu in the
// cgroup.subtree_control of the mount and of every ancestor of name,
// creating the ancestors.
func (h Hierarchy) enableCPU(name string) error {
	parts := strings.Split(name, "/")
	dir := h.Mount
	for i := range parts {
		ctl := filepath.Join(dir, "cgroup.subtree_control")
		b, err := os.ReadFile(ctl)
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if !slices.Contains(strings.Fields(string(b)), "cpu") {
			if err := write(ctl, "+cpu"); err != nil {
				if errors.Is(err, syscall.EBUSY) {
					return fmt.Errorf("%w (the group %s holds processes of its own, so it cannot hand the cpu controller to groups below it)", err, dir)
				}
				return err
			}
		}
		if i == len(parts)-1 {
			return nil
		}
		dir = filepath.Join(dir, parts[i])
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: create %s: %w", dir, err)
		}
	}
	return nil
}

// Add moves process pid (all its threads) into group name.
func (h Hierarchy) Add(name string, pid int) error {
	dir, err := h.path(name)
	if err != nil {
		return err
	}
	return write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid))
}

// Procs returns the processes in group name.
func (h Hierarchy) Procs(name string) ([]int, error) {
	dir, err := h.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup: %s/cgroup.procs: %q is not a pid", dir, f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// Quota returns the quota of group name; limited is false when the group
// has none (its processes may use every CPU).
func (h Hierarchy) Quota(name string) (q Quota, limited bool, err error) {
	dir, err := h.path(name)
	if err != nil {
		return Quota{}, false, err
	}
	var maxS, periodS string
	if h.Version == V2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return Quota{}, false, fmt.Errorf("cgroup: %w", err)
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return Quota{}, false, fmt.Errorf("cgroup: %s/cpu.max: unexpected %q", dir, b)
		}
		maxS, periodS = f[0], f[1]
		if maxS == "max" {
			maxS = "-1"
		}
	} else {
		b1, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		b2, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err := errors.Join(err1, err2); err != nil {
			return Quota{}, false, fmt.Errorf("cgroup: %w", err)
		}
		maxS, periodS = strings.TrimSpace(string(b1)), strings.TrimSpace(string(b2))
	}
	m, err1 := strconv.ParseInt(maxS, 10, 64)
	p, err2 := strconv.ParseInt(periodS, 10, 64)
	if err1 != nil || err2 != nil {
		return Quota{}, false, fmt.Errorf("cgroup: %s: quota %q, period %q are not numbers", dir, maxS, periodS)
	}
	q = Quota{Max: time.Duration(m) * time.Microsecond, Period: time.Duration(p) * time.Microsecond}
	return q, m >= 0, nil
}

// Stat is the bandwidth accounting of a group (cpu.stat).
type Stat struct {
	// Periods is the number of periods in which the group ran.
	Periods int64 `json:"nr_periods"`
	// Throttled is the number of those periods in which it hit its quota.
	Throttled int64 `json:"nr_throttled"`
}

// Stat returns the bandwidth accounting of group name.
func (h Hierarchy) Stat(name string) (Stat, error) {
	dir, err := h.path(name)
	if err != nil {
		return Stat{}, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return Stat{}, fmt.Errorf("cgroup: %w", err)
	}
	var st Stat
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			st.Periods = n
		case "nr_throttled":
			st.Throttled = n
		}
	}
	return st, nil
}

// Remove deletes group name, then each of its parents that is left
// empty, up to and including the first element of name. The group's
// processes must have exited (or moved); while the kernel still counts one
// that has just exited, Remove retries for up to five seconds. A missing
// group is not an error.
func (h Hierarchy) Remove(name string) error {
	dir, err := h.path(name)
	if err != nil {
		return err
	}
	// A process that has just exited may stay in its group for a moment
	// (its threads are still being torn down): retry while busy.
	for try := 0; ; try++ {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			break
		}
		if !errors.Is(err, syscall.EBUSY) || try == removeTries-1 {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		time.Sleep(removeWait)
	}
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		err := os.Remove(filepath.Join(h.Mount, filepath.FromSlash(p)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil // not empty: other groups live there
		}
	}
	return nil
}

// Check reports whether this process may create groups with a quota under
// parent: it creates and removes a probe group. The error names the path
// that could not be written.
func (h Hierarchy) Check(parent string) error {
	probe := path.Join(parent, "probe-"+strconv.Itoa(os.Getpid()))
	err := h.Create(probe, Quota{Max: MinMax, Period: DefaultPeriod})
	if rmErr := h.Remove(probe); err == nil && rmErr != nil {
		err = rmErr
	}
	return err
}

// write writes s to a control file (one write, as the kernel expects).
func write(file, s string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return fmt.Errorf("cgroup: write %q to %s: %w", s, file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", s, file, err)
	}
	return nil
}
