//go:build unix

package main

import (
	"os"
	"syscall"
)

// blockSize is the file's preferred I/O size (st_blksize), which C's
// stdio sizes its buffer by; 0 if unknown.
func blockSize(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Blksize)
	}
	return 0
}
