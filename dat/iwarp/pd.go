package iwarp

import (
	"fmt"
	"net"
	"sync"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// PD is a protection domain. It keeps the regions registered in it so that
// the data path can check that an STag named by a peer belongs to the QP's
// PD (siw reports "STag not associated" otherwise).
type PD struct {
	ia *IA

	mu     sync.Mutex
	closed bool
	mrs    map[uint32]*MR // by STag
}

var (
	_ driver.PD              = (*PD)(nil)
	_ driver.WindowAllocator = (*PD)(nil)
)

// Register registers buf. The region's address is the real address of
// buf[0], so DTO segments and peers name memory exactly as with verbs; the
// MR keeps buf referenced until Close.
func (pd *PD) Register(buf []byte, access driver.Access) (driver.MR, error) {
	mr := &MR{pd: pd, buf: buf, access: access}
	// The address is only an identifier for the data path, which always
	// goes back to mr.buf; Go's heap does not move objects, and buf has
	// escaped to the heap by being stored in mr.
	mr.va = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("iwarp: register: PD closed: %w", net.ErrClosed)
	}
	stag, ok := pd.ia.stags.alloc(mr)
	if !ok {
		return nil, fmt.Errorf("iwarp: register: %d regions exist: %w", maxMRs, driver.ErrResources)
	}
	pd.mrs[stag] = mr
	return mr, nil
}

// lookup returns the region of this PD named by stag, or nil.
func (pd *PD) lookup(stag uint32) *MR {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.mrs[stag]
}

// Close frees the PD.
func (pd *PD) Close() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	pd.closed = true
	return nil
}

// MR is a registered memory region. Its STag doubles as LKey and RKey (as
// in siw): 24-bit index << 8 | 8-bit random key, never 0.
type MR struct {
	pd     *PD
	buf    []byte
	va     uint64
	stag   uint32
	access driver.Access

	closeOnce sync.Once
}

var _ driver.MR = (*MR)(nil)

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.stag }

// RKey is the remote key: the STag peers put in RDMA Write, Read Request
// and Read Response headers.
func (mr *MR) RKey() uint32 { return mr.stag }

// Addr is the virtual address of the region's first byte (the tagged
// offset peers use for it).
func (mr *MR) Addr() uint64 { return mr.va }

// Close deregisters the region. It is idempotent.
func (mr *MR) Close() error {
	mr.closeOnce.Do(func() {
		mr.pd.mu.Lock()
		delete(mr.pd.mrs, mr.stag)
		mr.pd.mu.Unlock()
		mr.pd.ia.stags.release(mr.stag)
	})
	return nil
}

// slice returns the bytes of [va, va+n) inside the region, or ok=false when
// the range is outside it (the data path's bounds check).
func (mr *MR) slice(va uint64, n uint32) (b []byte, ok bool) {
	if va < mr.va || va-mr.va > uint64(len(mr.buf)) || uint64(n) > uint64(len(mr.buf))-(va-mr.va) {
		return nil, false
	}
	off := va - mr.va
	return mr.buf[off : off+uint64(n)], true
}
