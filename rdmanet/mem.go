package rdmanet

import (
	"slices"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat"
)

// region is page-aligned memory from mmap, registered as an LMR. Mapping
// it outside Go's heap keeps the garbage collector away from memory the
// adapter (or the peer) writes, and the pages go back to the system the
// moment the connection closes.
//
// A connection maps its initial receive ring, staging buffer and control
// slots as one mapping (connMemory): one mmap and one munmap per
// connection instead of three, which matters to dial time and to the
// kernel's per-process mapping limit (vm.max_map_count) at 10,000
// connections. A region carved from it has a home slot: freed, it gives
// its pages back to the slot, and a later region of the same size (a ring
// shrinking back to its initial size) reuses them. Regions of other sizes
// have mappings of their own.
type region struct {
	buf  []byte
	lmr  *dat.LMR
	addr uint64 // registered address of buf[0]
	lkey uint32
	rkey uint32
	home *homeSlot // nil: buf is the region's own mapping
}

// homeSlot holds a piece of a connection's mapping while no region uses it.
type homeSlot struct{ free atomic.Pointer[[]byte] }

func roundPage(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

func newRegion(s *sharedIA, size int, priv dat.MemPriv) (*region, error) {
	buf, err := mapAnon(roundPage(size))
	if err != nil {
		return nil, err
	}
	r, err := register(s, buf, priv, nil)
	if err != nil {
		unmapAnon(buf)
	}
	return r, err
}

// regionFrom returns a region of size bytes, from home's pages if they are
// free and of that size, else from a mapping of its own.
func regionFrom(s *sharedIA, home *homeSlot, size int, priv dat.MemPriv) (*region, error) {
	if p := home.free.Load(); p != nil && len(*p) == roundPage(size) && home.free.CompareAndSwap(p, nil) {
		r, err := register(s, *p, priv, home)
		if err != nil {
			home.free.Store(p)
		}
		return r, err
	}
	return newRegion(s, size, priv)
}

// register makes buf an LMR.
func register(s *sharedIA, buf []byte, priv dat.MemPriv, home *homeSlot) (*region, error) {
	lmr, err := s.ia.CreateLMR(s.pz, buf, priv)
	if err != nil {
		return nil, err
	}
	p, err := lmr.Query()
	if err != nil {
		lmr.Free()
		return nil, err
	}
	return &region{buf: buf, lmr: lmr, addr: p.Addr, lkey: p.Context, rkey: p.RMRContext, home: home}, nil
}

// triplet names n bytes at offset off for a DTO.
func (r *region) triplet(off, n uint64) dat.LMRTriplet {
	return dat.LMRTriplet{Addr: r.addr + off, Length: uint32(n), Context: r.lkey}
}

// free deregisters the region and unmaps it, or gives its pages back to
// its home slot. Nothing may touch it afterwards: callers make sure the EP
// is gone, or the peer writes it no more, and no Read or Write is inside it.
func (r *region) free() {
	if r == nil {
		return
	}
	r.lmr.Free()
	if r.home != nil {
		b := r.buf
		r.home.free.Store(&b)
	} else {
		unmapAnon(r.buf)
	}
	r.buf = nil
}

// connMemory is the one mapping a connection starts with: its initial
// receive ring and staging buffer, each in its home slot while no region
// uses it, and its control slots, registered for as long as the mapping
// lives (ctrl).
//
// When its connection is gone the mapping goes back to its IA, which
// keeps a few for the next connections (getMemory, putMemory): a new
// connection then neither maps nor faults in fresh pages, nor registers
// its control slots, and its predecessor did not unmap them (munmap is
// the dearer half: it flushes the other threads' TLBs). The receive ring
// is registered afresh for every connection all the same: it is the one
// region a peer may write, and a former peer must not find its old key
// valid on someone else's ring. The staging buffer and the control slots
// are local-only (no peer ever learns their keys), so keeping the control
// slots' registration exposes nothing; the staging buffer is registered
// per connection because its region moves with resizing (resize.go).
// Reused memory is not cleared: a Read only ever returns bytes the
// current peer wrote, and the staging buffer and control slots are
// written before they are sent from.
type connMemory struct {
	mapping                     []byte
	bufSize                     int // the ring's and staging buffer's size
	ringHome, stgHome, ctrlHome homeSlot
	ctrl                        *region
}

// maxIdleMemory bounds the connection memory an IA keeps mapped for
// reuse: about 18 connections' worth at DefaultBufferSize.
const maxIdleMemory = 1 << 20

// ctrlPriv is what the control slots are registered for: receives land
// in them and Sends go from them, both local accesses.
const ctrlPriv = dat.MemPrivLocalRead | dat.MemPrivLocalWrite

// getMemory returns connection memory with a receive ring and staging
// buffer of bufSize bytes each and ctrlSize bytes of control slots: one
// the IA kept, or a new mapping.
func (s *sharedIA) getMemory(bufSize, ctrlSize int) (*connMemory, error) {
	s.mu.Lock()
	for i := len(s.idleMem) - 1; i >= 0; i-- {
		if m := s.idleMem[i]; m.bufSize == bufSize && len(m.ctrl.buf) == roundPage(ctrlSize) {
			s.idleMem = slices.Delete(s.idleMem, i, i+1)
			s.idleBytes -= len(m.mapping)
			s.mu.Unlock()
			return m, nil
		}
	}
	s.mu.Unlock()
	m := &connMemory{bufSize: bufSize}
	pieces, err := m.carve(bufSize, bufSize, ctrlSize)
	if err != nil {
		return nil, err
	}
	if m.ctrl, err = register(s, pieces[2], ctrlPriv, &m.ctrlHome); err != nil {
		m.unmap()
		return nil, err
	}
	m.ringHome.free.Store(&pieces[0])
	m.stgHome.free.Store(&pieces[1])
	return m, nil
}

// putMemory takes back the memory of a connection that is gone: nothing
// uses its regions any more (the EP is freed) and every region carved
// from it has been freed. The IA keeps it if it has room, else it is
// released.
func (s *sharedIA) putMemory(m *connMemory) {
	if m == nil {
		return
	}
	whole := m.ctrl != nil && m.ringHome.free.Load() != nil && m.stgHome.free.Load() != nil
	s.mu.Lock()
	if whole && s.idleBytes+len(m.mapping) <= maxIdleMemory {
		s.idleMem = append(s.idleMem, m)
		s.idleBytes += len(m.mapping)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	m.release()
}

// dropIdleMemory releases the memory the IA kept, before the IA closes.
func (s *sharedIA) dropIdleMemory() {
	s.mu.Lock()
	idle := s.idleMem
	s.idleMem, s.idleBytes = nil, 0
	s.mu.Unlock()
	for _, m := range idle {
		m.release()
	}
}

// release deregisters the control slots and unmaps the memory; every
// other region in it must be freed.
func (m *connMemory) release() {
	m.ctrl.free()
	m.ctrl = nil
	m.unmap()
}

// carve maps sizes[i] bytes (each rounded to pages) in one mapping and
// returns the pieces.
func (m *connMemory) carve(sizes ...int) ([][]byte, error) {
	total := 0
	for _, n := range sizes {
		total += roundPage(n)
	}
	buf, err := mapAnon(total)
	if err != nil {
		return nil, err
	}
	m.mapping = buf
	pieces := make([][]byte, len(sizes))
	for i, n := range sizes {
		n = roundPage(n)
		pieces[i], buf = buf[:n:n], buf[n:]
	}
	return pieces, nil
}

// unmap releases the mapping; every region in it must be freed.
func (m *connMemory) unmap() {
	if m.mapping != nil {
		unmapAnon(m.mapping)
		m.mapping = nil
	}
}
