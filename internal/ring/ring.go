// Package ring is the arithmetic of a single-producer, single-consumer byte
// ring: no memory, no I/O, no locking. rdmanet uses it for the receive ring
// a peer RDMA-writes into and for the local staging buffer Writes copy to.
//
// Positions are monotonically increasing uint64 byte counts, never offsets:
// the producer position P counts every byte ever produced, the consumer
// position C every byte ever consumed. P−C is the fill level and P mod Size
// the offset where the next byte goes. Counting instead of wrapping offsets
// makes "empty" (P == C) and "full" (P−C == Size) distinct without a
// spare byte, and lets two machines exchange positions without agreeing on
// anything but the size. 2^64 bytes is never reached; the subtractions are
// modular anyway, so even that would only need P−C ≤ Size to keep holding.
package ring

// Ring describes a ring of Size bytes. The zero Ring is unusable; Size
// need not be a power of two.
type Ring struct {
	Size uint64
}

// Segment is a contiguous piece of a ring's buffer: Len bytes from offset
// Off.
type Segment struct {
	Off, Len uint64
}

// End is the offset just past the segment.
func (s Segment) End() uint64 { return s.Off + s.Len }

// Used is the number of bytes produced and not yet consumed.
func Used(prod, cons uint64) uint64 { return prod - cons }

// Valid reports whether prod and cons can describe this ring: the consumer
// is not ahead of the producer and the producer is at most Size ahead. A
// peer's report that breaks this is a protocol violation.
func (r Ring) Valid(prod, cons uint64) bool {
	return r.Size > 0 && prod-cons <= r.Size && cons <= prod
}

// Free is the number of bytes the producer may still produce. It is 0 for
// an invalid pair, so a corrupted position can never make the producer
// overwrite unread data.
func (r Ring) Free(prod, cons uint64) uint64 {
	if !r.Valid(prod, cons) {
		return 0
	}
	return r.Size - (prod - cons)
}

// Offset is where position pos lives in the buffer.
func (r Ring) Offset(pos uint64) uint64 { return pos % r.Size }

// Segments splits the n bytes starting at position pos into at most two
// contiguous segments: the first runs to the end of the buffer at most, the
// second (Len 0 when there is no wrap) starts at offset 0. n must not
// exceed Size.
func (r Ring) Segments(pos, n uint64) (first, second Segment) {
	if n > r.Size {
		n = r.Size
	}
	off := r.Offset(pos)
	if tail := r.Size - off; n > tail {
		return Segment{off, tail}, Segment{0, n - tail}
	}
	return Segment{off, n}, Segment{}
}

// Readable returns the segments holding the unconsumed bytes [cons, prod).
func (r Ring) Readable(prod, cons uint64) (first, second Segment) {
	if !r.Valid(prod, cons) {
		return Segment{}, Segment{}
	}
	return r.Segments(cons, prod-cons)
}

// Writable returns the segments of free space [prod, cons+Size).
func (r Ring) Writable(prod, cons uint64) (first, second Segment) {
	return r.Segments(prod, r.Free(prod, cons))
}

// Contiguous is how many bytes can be handled at pos without wrapping,
// limited to n.
func (r Ring) Contiguous(pos, n uint64) uint64 {
	return min(n, r.Size-r.Offset(pos))
}

// ReturnDue decides when a consumer reports its position to the producer
// (returns credit). reported is the last position it reported, prod the
// producer position it has been told of.
//
// Credit goes back in batches: once batch bytes were consumed since the
// last report, so a streaming producer hears about space a few times per
// ring rather than once per read. The exception is a producer that, as far
// as its last report goes, sees a full ring (prod−reported == Size): it is
// blocked, or about to be, so the consumer reports as soon as it consumed
// urgent bytes (urgent ≤ batch; a floor above one byte avoids answering
// every tiny read with a message while the producer streams — TCP's silly
// window avoidance, for the same reason). Neither rule can stall the pair:
// a full ring that the consumer stops reading below urgent still holds
// Size−urgent unread bytes, and reading them all crosses batch.
func (r Ring) ReturnDue(prod, cons, reported, batch, urgent uint64) bool {
	if cons <= reported {
		return false
	}
	unreported := cons - reported
	if unreported >= batch {
		return true
	}
	return prod-reported >= r.Size && unreported >= urgent
}
