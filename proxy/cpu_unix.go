//go:build unix

package proxy

import (
	"fmt"
	"syscall"
)

// cpuLines is INFO's CPU section: the proxy process's own CPU time, and
// that of its waited-for children, in seconds (getrusage, as Redis).
func cpuLines() []string {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	return []string{
		"used_cpu_sys:" + tv(self.Stime),
		"used_cpu_user:" + tv(self.Utime),
		"used_cpu_sys_children:" + tv(children.Stime),
		"used_cpu_user_children:" + tv(children.Utime),
	}
}
