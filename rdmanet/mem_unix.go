//go:build unix

package rdmanet

import "golang.org/x/sys/unix"

var pageSize = unix.Getpagesize()

// mapAnon maps n bytes (a multiple of the page size) of private,
// zeroed memory outside Go's heap.
func mapAnon(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

// unmapAnon releases a mapping mapAnon made.
func unmapAnon(b []byte) { _ = unix.Munmap(b) }
