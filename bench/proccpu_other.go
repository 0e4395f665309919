//go:build !unix

package bench

import "time"

// processCPU is not measured here: the report leaves the generator's CPU
// out.
func processCPU() (time.Duration, error) { return 0, errNoCPU }
