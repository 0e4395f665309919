//go:build !unix

package deploy

import "os"

// fileUID is the owner of a file (-1 when unknown).
func fileUID(os.FileInfo) int { return -1 }
