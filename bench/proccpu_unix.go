//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used:
// the generator's own cost, every instance and the samplers included.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
