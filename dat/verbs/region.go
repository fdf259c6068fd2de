//go:build verbs && linux && cgo

package verbs

import (
	"fmt"
	"syscall"
)

// AllocRegion returns n bytes of anonymous mmap'd memory, outside the Go
// heap, for registration. Go heap memory can be registered too (see
// doc.go); mmap'd memory is for regions that should not be part of the
// heap at all: very large ones (no GC accounting), ones handed across
// fork, or ones that must survive independently of Go references. Free it
// with FreeRegion after its MR is closed.
func AllocRegion(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: alloc region: size %d", n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("verbs: alloc region of %d bytes: %w", n, err)
	}
	return b, nil
}

// FreeRegion unmaps memory from AllocRegion. Every MR on it must be
// closed first.
func FreeRegion(b []byte) error {
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("verbs: free region: %w", err)
	}
	return nil
}
