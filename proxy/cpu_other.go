//go:build !unix

package proxy

// cpuLines is INFO's CPU section; without getrusage the figures are 0.
func cpuLines() []string {
	return []string{
		"used_cpu_sys:0.000000",
		"used_cpu_user:0.000000",
		"used_cpu_sys_children:0.000000",
		"used_cpu_user_children:0.000000",
	}
}
