//go:build !unix

package rdmanet

import "unsafe"

// pageSize is the alignment of connection memory where it does not come
// from mmap.
const pageSize = 4096

// mapAnon returns n bytes of zeroed, page-aligned memory from Go's heap.
// Without mmap only the pure-Go iwarp provider runs, which reaches
// registered memory through its Go slice, so memory the collector owns is
// fine: Go's heap objects do not move. The slice starts inside a larger
// allocation so that it can be page-aligned, as rings are on every
// system.
func mapAnon(n int) ([]byte, error) {
	b := make([]byte, n+pageSize)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (pageSize - 1))
	return b[off : off+n : off+n], nil
}

// unmapAnon leaves b to the garbage collector.
func unmapAnon([]byte) {}
