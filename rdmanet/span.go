package rdmanet

import "github.com/rdmanet/rdmanet/internal/ring"

// span is one region of a byte ring whose memory can be replaced while the
// stream goes on (the receive ring when it is resized, the staging buffer
// when it grows or shrinks): it holds the stream positions from start on,
// each at ring offset pos mod size.
type span struct {
	reg   *region
	r     ring.Ring
	start uint64
}

// spans is a ring made of at most two spans: cur, and prev while it still
// holds unconsumed bytes, the positions [prev.start, cur.start). The
// producer switches to a new region at its current position; the consumer
// drains the old one first and then retires it.
type spans struct {
	cur  span
	prev *span
}

func newSpans(reg *region) spans {
	return spans{cur: span{reg: reg, r: ring.Ring{Size: uint64(len(reg.buf))}}}
}

// size is the current region's size.
func (s *spans) size() uint64 { return s.cur.r.Size }

// free is how many bytes the producer at prod may still produce, given
// the consumer at cons: only the current region takes new bytes, and the
// previous region's unconsumed bytes do not occupy it.
func (s *spans) free(prod, cons uint64) uint64 { return s.cur.r.Free(prod, max(cons, s.cur.start)) }

// valid reports whether prod and cons can describe the ring (see
// ring.Ring.Valid): the consumer is not past the producer, and neither
// region holds more than its size.
func (s *spans) valid(prod, cons uint64) bool {
	if cons > prod || prod < s.cur.start {
		return false
	}
	if s.prev != nil && cons < s.cur.start && !s.prev.r.Valid(s.cur.start, cons) {
		return false
	}
	return s.cur.r.Valid(prod, max(cons, s.cur.start))
}

// at returns the span holding position pos and how many of the n bytes
// from pos it holds contiguously (up to its wrap, or the end of prev).
func (s *spans) at(pos, n uint64) (*span, ring.Segment) {
	sp := &s.cur
	if s.prev != nil && pos < s.cur.start {
		sp, n = s.prev, min(n, s.cur.start-pos)
	}
	return sp, ring.Segment{Off: sp.r.Offset(pos), Len: sp.r.Contiguous(pos, n)}
}

// switchTo makes reg the current region from position pos on. The
// previous region must have been retired.
func (s *spans) switchTo(reg *region, pos uint64) {
	old := s.cur
	s.prev = &old
	s.cur = span{reg: reg, r: ring.Ring{Size: uint64(len(reg.buf))}, start: pos}
}

// retire drops the previous region once the consumer at cons is past it,
// and returns it for the caller to free (outside its locks); nil if there
// is none to drop.
func (s *spans) retire(cons uint64) *region {
	if s.prev == nil || cons < s.cur.start {
		return nil
	}
	reg := s.prev.reg
	s.prev = nil
	return reg
}

// regions returns the regions to free when the connection goes.
func (s *spans) regions() []*region {
	if s.prev != nil {
		return []*region{s.cur.reg, s.prev.reg}
	}
	return []*region{s.cur.reg}
}

// peerRing is the writer's view of the peer's receive ring: where to
// RDMA-write position pos, and how much room there is.
type peerRing struct {
	r     ring.Ring
	start uint64 // the first position written into this ring
	addr  uint64
	key   uint32
}

// free is the room left given our producer position and the peer's
// reported consumer position; bytes before start went to an earlier ring.
func (p *peerRing) free(prod, cons uint64) uint64 { return p.r.Free(prod, max(cons, p.start)) }

// mappedBytes is the memory the Conn has mapped for its receive ring,
// staging buffer and control slots: its initial mapping, the mappings of
// grown rings and staging buffers (every span, and an offered ring), and
// its share of its IA's shared control receive slots (ctrlpool.go).
func (c *Conn) mappedBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.mem.mapping)
	if c.arena != nil {
		n += slotsFor(c.cfg.recvs) * ctrlSlot
	}
	own := func(r *region) {
		if r != nil && r.home == nil {
			n += len(r.buf)
		}
	}
	for _, s := range [...]*spans{&c.recv, &c.stage} {
		for _, r := range s.regions() {
			own(r)
		}
	}
	own(c.offer)
	return n
}
