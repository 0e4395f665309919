package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSample is one reading of the CPU time of this process and of the
// whole machine, taken around a load window.
type cpuSample struct {
	at     time.Time
	proc   time.Duration // this process (processCPU); procOK says it was read
	procOK bool
	busy   float64 // the machine's busy jiffies (/proc/stat); statOK says they were read
	total  float64
	statOK bool
}

// sampleCPU reads the process's and the machine's CPU time. Either may be
// missing (not Linux, no /proc): the report then leaves it out.
func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if d, err := processCPU(); err == nil {
		s.proc, s.procOK = d, true
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		if busy, total, err := parseProcStat(string(b)); err == nil {
			s.busy, s.total, s.statOK = busy, total, true
		}
	}
	return s
}

// cpuUse is what a window used, in CPUs (1 is one core busy throughout).
type cpuUse struct {
	// generator is this process's CPU over the window; machine the busy
	// CPUs of the whole machine, cpus its CPUs (0 when not read).
	generator, machine float64
	cpus               int
}

// cpuBetween returns the CPU used between two samples.
func cpuBetween(a, b cpuSample, cpus int) cpuUse {
	var u cpuUse
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return u
	}
	if a.procOK && b.procOK {
		u.generator = (b.proc - a.proc).Seconds() / wall
	}
	if a.statOK && b.statOK && b.total > a.total {
		u.machine = float64(cpus) * (b.busy - a.busy) / (b.total - a.total)
		u.cpus = cpus
	}
	return u
}

// parseProcStat returns the busy and total jiffies of the "cpu" line of
// /proc/stat (all CPUs together): idle and iowait are not busy.
func parseProcStat(s string) (busy, total float64, err error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var idle float64
		// user nice system idle iowait irq softirq steal; guest time is
		// already counted in user.
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n < 0 {
				return 0, 0, fmt.Errorf("bench: bad /proc/stat field %q", v)
			}
			total += n
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			}
		}
		return total - idle, total, nil
	}
	return 0, 0, fmt.Errorf("bench: no cpu line in /proc/stat")
}
