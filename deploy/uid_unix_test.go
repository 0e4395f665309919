//go:build unix

package deploy

import (
	"os"
	"syscall"
)

// fileUID is the owner of a file (-1 when unknown).
func fileUID(st os.FileInfo) int {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}
