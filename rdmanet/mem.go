package rdmanet

import (
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdmanet/dat"
)

// region is page-aligned memory from mmap, registered as an LMR. Mapping
// it outside Go's heap keeps the garbage collector away from memory the
// adapter (or the peer) writes, and the pages go back to the system the
// moment the connection closes.
type region struct {
	buf  []byte
	lmr  *dat.LMR
	addr uint64 // registered address of buf[0]
	lkey uint32
	rkey uint32
}

var pageSize = unix.Getpagesize()

func newRegion(s *sharedIA, size int, priv dat.MemPriv) (*region, error) {
	size = (size + pageSize - 1) &^ (pageSize - 1)
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	lmr, err := s.ia.CreateLMR(s.pz, buf, priv)
	if err != nil {
		unix.Munmap(buf)
		return nil, err
	}
	p, err := lmr.Query()
	if err != nil {
		lmr.Free()
		unix.Munmap(buf)
		return nil, err
	}
	return &region{buf: buf, lmr: lmr, addr: p.Addr, lkey: p.Context, rkey: p.RMRContext}, nil
}

// triplet names n bytes at offset off for a DTO.
func (r *region) triplet(off, n uint64) dat.LMRTriplet {
	return dat.LMRTriplet{Addr: r.addr + off, Length: uint32(n), Context: r.lkey}
}

// free deregisters and unmaps the region. Nothing may touch it afterwards:
// callers make sure the EP is gone and no Read or Write is inside it.
func (r *region) free() {
	if r == nil {
		return
	}
	r.lmr.Free()
	unix.Munmap(r.buf)
	r.buf = nil
}
