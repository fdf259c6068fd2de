//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"sync"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// PD is an ibv_pd. It implements driver.PD.
type PD struct {
	ia *IA
	pd *C.struct_ibv_pd
	// mrs holds the PD's regions by lkey (*MR), so that an inline post
	// can check its segments as the device would (post.go): the device
	// reads no region for inline data.
	mrs sync.Map

	mu     sync.Mutex
	closed bool
}

var _ driver.PD = (*PD)(nil)

// pdOf unwraps a PD of this package.
func pdOf(x driver.PD) (*PD, bool) {
	switch p := x.(type) {
	case *PD:
		return p, true
	case windowPD:
		return p.PD, true
	}
	return nil, false
}

// accessFlags maps DAT privileges to ibv_access_flags. Verbs refuses
// remote write without local write, so remote write implies it.
func accessFlags(a driver.Access) C.int {
	var f C.int
	if a&(driver.AccessLocalWrite|driver.AccessRemoteWrite) != 0 {
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&driver.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&driver.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

// Register registers buf with ibv_reg_mr. buf may be Go heap memory or
// memory from AllocRegion; doc.go explains why Go heap memory is safe here
// and what the caller must guarantee (buf stays reachable, which the MR
// itself also ensures, and is not a stack-allocated array).
func (pd *PD) Register(buf []byte, access driver.Access) (driver.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("verbs: register: zero-length region: %w", driver.ErrNotSupported)
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("verbs: register: PD closed: %w", net.ErrClosed)
	}
	// The address goes to C as an integer: C (and the kernel, which pins
	// the pages) keep it, which cgo does not allow for a Go pointer
	// value. Validity comes from the MR holding buf (below) and from
	// Go's non-moving heap, not from cgo's pointer passing.
	va := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	flags := accessFlags(access)
	if pd.ia.lim.windows {
		// Any region may get a window bound over it (C10-73: only one
		// registered with MW_BIND), and registration is the only time
		// to say so.
		flags |= C.IBV_ACCESS_MW_BIND
	}
	var mr *C.struct_ibv_mr
	if rc := C.shim_reg_mr(pd.pd, C.uintptr_t(va), C.size_t(len(buf)), flags, &mr); rc != 0 {
		return nil, fmt.Errorf("verbs: %w", localError(fmt.Sprintf("ibv_reg_mr(%d bytes)", len(buf)), errnoOf(rc)))
	}
	m := &MR{pd: pd, mr: mr, buf: buf, va: uint64(va), size: uint64(len(buf))}
	pd.mrs.Store(m.LKey(), m)
	return m, nil
}

// covers reports whether s lies in one of the PD's regions under its key.
func (pd *PD) covers(s driver.SGE) bool {
	v, ok := pd.mrs.Load(s.LKey)
	if !ok {
		return false
	}
	m := v.(*MR)
	off := s.Addr - m.va
	return s.Addr >= m.va && off <= m.size && uint64(s.Length) <= m.size-off
}

// Close deallocates the PD. Package dat has closed its regions and QPs.
func (pd *PD) Close() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil
	}
	if rc := C.shim_dealloc_pd(pd.pd); rc != 0 {
		// EBUSY: regions, QPs or SRQs still use it.
		return fmt.Errorf("verbs: ibv_dealloc_pd: %w", errnoOf(rc))
	}
	pd.closed = true
	return nil
}

// MR is an ibv_mr. It implements driver.MR.
type MR struct {
	pd *PD
	mr *C.struct_ibv_mr
	// buf keeps the registered memory reachable, so the garbage collector
	// cannot free it while the adapter may still access it.
	buf  []byte
	va   uint64
	size uint64 // len(buf) at registration; read without locks (covers)

	closeOnce sync.Once
	closeErr  error
}

var _ driver.MR = (*MR)(nil)

// LKey is the ibv_mr lkey.
func (m *MR) LKey() uint32 { return uint32(m.mr.lkey) }

// RKey is the ibv_mr rkey (the STag on iWARP).
func (m *MR) RKey() uint32 { return uint32(m.mr.rkey) }

// Addr is the virtual address of buf[0], which is the registered address.
func (m *MR) Addr() uint64 { return m.va }

// Close deregisters the region; afterwards buf is ordinary memory again.
func (m *MR) Close() error {
	m.closeOnce.Do(func() {
		// Out of the table first: no inline post may use the region
		// once it is going away.
		m.pd.mrs.Delete(m.LKey())
		if rc := C.shim_dereg_mr(m.mr); rc != 0 {
			m.closeErr = fmt.Errorf("verbs: ibv_dereg_mr: %w", errnoOf(rc))
			m.pd.mrs.Store(m.LKey(), m) // still registered
			return
		}
		m.buf = nil
	})
	return m.closeErr
}
