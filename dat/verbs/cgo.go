//go:build verbs && linux && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "shim.h"
*/
import "C"

import (
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// noErrnoRC is the shims' result for a call that failed without setting
// errno.
const noErrnoRC = -C.SHIM_NO_ERRNO

// errnoOf turns a shim result (0, -errno or -SHIM_NO_ERRNO) into an
// error: nil, a syscall.Errno, or ErrNoErrno.
func errnoOf(rc C.int) error { return rcError(int(rc)) }

func rcError(rc int) error {
	switch rc {
	case 0:
		return nil
	case noErrnoRC:
		return ErrNoErrno
	}
	return syscall.Errno(-rc)
}

// silentFailure runs the shims' errno pattern around a call that fails
// without setting errno, after an earlier call left stale in errno. For
// the tests: the result must be ErrNoErrno, never stale.
func silentFailure(stale syscall.Errno) error {
	return errnoOf(C.shim_test_silent_failure(C.int(stale)))
}

// ipBytes returns ip as 4 bytes for IPv4 (including v4-mapped) or 16.
func ipBytes(ip net.IP) []byte {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip.To16()
}

// cBytes returns a pointer to b's first byte for a C call that only reads
// it during the call (nil for an empty slice).
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// idAddr reads the local or peer address of a CM id.
func idAddr(id *C.struct_rdma_cm_id, remote bool) *net.TCPAddr {
	var ip [16]byte
	var port C.uint16_t
	r := C.int(0)
	if remote {
		r = 1
	}
	n := C.shim_id_addr(id, r, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port)
	switch n {
	case 4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), ip[:4]...)), Port: int(port)}
	case 16:
		a := netip.AddrFrom16(ip)
		return &net.TCPAddr{IP: a.AsSlice(), Port: int(port)}
	}
	return nil
}
