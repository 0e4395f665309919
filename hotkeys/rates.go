package hotkeys

// RateSource estimates a key's write rate, in writes per second.
type RateSource interface {
	// Rate returns key's estimated writes per second; 0 when unknown.
	Rate(key string) float64
}

// Scaled estimates cluster-wide rates from local ones: Local's rate times
// Processes. It is right when writes are spread evenly over the processes
// (a load balancer in front of identical processes), and it needs no
// coordination; see Shared for uneven spreads.
type Scaled struct {
	// Local gives this process's rates (normally the Sketch).
	Local RateSource
	// Processes is the number of processes writing; values below 1 count
	// as 1.
	Processes int
}

// Rate returns Local's rate of key times Processes.
func (s Scaled) Rate(key string) float64 {
	return s.Local.Rate(key) * float64(max(s.Processes, 1))
}
