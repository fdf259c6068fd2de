package iwarp

import (
	"fmt"
	"net"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Sender batching limits. A batch is one writev: the FPDUs of as many
// messages as are ready (whole messages, back to back), up to these
// bounds. A message larger than a batch continues in the next one before
// anything else is sent, so segments of two messages never interleave.
const (
	maxBatchBytes = 1 << 20
	maxBatchFPDUs = 128
	// fpduOverhead is the most header and trailer bytes one FPDU takes in
	// the arena: a Read Request (48) or a Terminate, plus 3 pad + 4 CRC.
	fpduOverhead = wire.ReadRequestHeaderLen + 7
)

// txItem is a message the sender is putting on the wire.
type txItem struct {
	wr *sendWR // Send, Write or Read Request; nil for a Read Response
	// read marks a Read Request. Once it is marked sent (finishLocked),
	// wr may be completed and recycled by the receiver at any moment, so
	// the writer must not look at it any more.
	read bool
	rr   readResp
	msn  uint32 // untagged MSN of a Send or Read Request
	off  uint32 // payload bytes already framed
	// cursor into wr.seg for the next payload byte
	seg, segOff int
}

func (it *txItem) total() uint32 {
	if it.wr == nil {
		return uint32(len(it.rr.src))
	}
	if it.read {
		return 0
	}
	return it.wr.total
}

// sender is the write side's state, used by whoever holds the writer
// token (see connection). It frames messages into FPDUs whose headers and
// trailers live in a per-connection arena and whose payload is the
// caller's registered memory itself: net.Buffers{hdr, payload pieces...,
// trailer, hdr, ...} goes to the kernel in one writev, with the CRC
// computed over the pieces in place. Steady-state sending allocates
// nothing.
type sender struct {
	c     *connection
	bufs  net.Buffers // the batch's iovecs
	wbuf  net.Buffers // what is left to write of them; a field so it does not escape
	arena []byte
	// items are the messages taken off the queues and not yet completely
	// written, in wire order; the first may be partly written. The batch
	// being written completes the first done of them; partial means its
	// iovecs (wbuf) are not all written yet.
	items   []txItem
	done    int
	partial bool
	msn     [2]uint32

	raw rawWriter // non-blocking writev (platform specific)

	segTagged, segUntagged int // payload bytes per non-last segment
}

// inlineMax bounds the requests PostSend frames and writes itself (see
// QP.PostSend). A small request is latency-bound (a request/response
// protocol): writing it at once saves the hand-off to a sender goroutine.
// Larger ones are usually part of a stream, where a sender goroutine
// writing the requests queued meanwhile with one writev per batch, in
// parallel with the poster, beats a writev per request in the poster's
// goroutine: 4 KiB RDMA Writes, 8 outstanding, run at about 2 µs each
// that way and about 5 µs written inline.
const inlineMax = 2 << 10

func newSender(c *connection) *sender {
	// The arena, iovecs and items grow with the first batches and are
	// kept (a steady stream allocates nothing); a connection that never
	// sends much never pays for the largest batch. Growing the arena
	// mid-batch is safe: the iovecs taken from it keep the old array.
	s := &sender{c: c}
	if c.mulpdu != 0 {
		s.setSegments(c.mulpdu)
	}
	return s
}

// setSegments sizes non-last segments for a MULPDU of mulpdu. They carry
// a multiple of 8 payload bytes, so they need no pad (both header sizes
// are multiples of 4) and stay aligned.
func (s *sender) setSegments(mulpdu int) {
	s.segTagged = (mulpdu - (wire.TaggedHeaderLen - wire.ULPDULengthLen)) &^ 7
	s.segUntagged = (mulpdu - (wire.UntaggedHeaderLen - wire.ULPDULengthLen)) &^ 7
}

// smallest is the payload any MULPDU the data path may use (at least
// MinMULPDU) carries in one segment, behind the longer (untagged) header.
const smallest = (MinMULPDU - (wire.UntaggedHeaderLen - wire.ULPDULengthLen)) &^ 7

// segments returns the payload bytes per non-last segment for a message
// of total bytes, tagged or not. With mulpdu=auto the MULPDU follows the
// connection's MSS, which takes a system call to learn: it is asked only
// for the first message that could need more than one segment, so that
// setting a connection up and exchanging small messages (rdmanet's
// control messages, a first byte) costs none.
func (s *sender) segments(total uint32, tagged bool) int {
	if s.segTagged == 0 {
		if total <= smallest {
			return smallest // one segment, whatever the MULPDU
		}
		s.setSegments(autoMULPDU(s.c.tc))
	}
	if tagged {
		return s.segTagged
	}
	return s.segUntagged
}

// stepResult is what one sender step did.
type stepResult uint8

const (
	stepProgress stepResult = iota // a batch went out
	stepIdle                       // nothing can be sent now
	stepBlocked                    // non-blocking: the socket took only part of the batch
	stepDead                       // the connection is ending
	stepDrained                    // graceful drain finished
	stepFailed                     // the socket failed
)

// sendLoop is a sender goroutine. It is started with the writer token
// (connection.kickLocked, handOffLocked) when there is work the inline
// path of PostSend could not do: a request too large for it, a batch the
// socket did not take at once, Read Responses, Reads and fenced requests
// that had to wait, a graceful drain. It writes with blocking writevs,
// batching whatever is queued meanwhile, and exits as soon as there is
// nothing left to do, so an idle connection has no sender goroutine.
func (c *connection) sendLoop() {
	defer c.senders.Done()
	s := c.tx
	q := c.q
	q.mu.Lock()
	for {
		switch s.pickLocked(true) {
		case stepIdle, stepDead:
			// Dead: the teardown takes the token and finishes the FPDU a
			// failed write may have cut, before its Terminate.
			c.releaseLocked()
			q.mu.Unlock()
			return
		case stepDrained:
			// FIN ends the stream's write side: the token is kept, so
			// nothing is ever written again.
			c.finSent = true
			c.idle.Broadcast()
			q.mu.Unlock()
			_ = c.tc.CloseWrite()
			close(c.drained)
			return
		}
		q.mu.Unlock()
		st := s.send(true)
		q.mu.Lock()
		switch st {
		case stepProgress:
			s.finishLocked()
		case stepFailed:
			c.releaseLocked()
			q.mu.Unlock()
			return
		}
	}
}

// pickLocked prepares the next batch: nothing to do if a cut batch is
// still being written, else it takes the messages to send off the queues.
// The caller holds q.mu and the writer token. block is false for the
// inline path, which takes at most inlineMax bytes. stepProgress means
// there is something to send.
func (s *sender) pickLocked(block bool) stepResult {
	c := s.c
	if s.partial {
		return stepProgress
	}
	if c.dead {
		return stepDead
	}
	budget := maxBatchBytes
	if !block {
		budget = inlineMax
	}
	for i := range s.items {
		budget -= int(s.items[i].total() - s.items[i].off)
	}
	for c.gate && budget > 0 && len(s.items) < maxBatchFPDUs {
		it, ok := s.nextLocked()
		if !ok {
			break
		}
		s.items = append(s.items, it)
		budget -= int(it.total())
	}
	if len(s.items) > 0 {
		return stepProgress
	}
	if block && c.draining && !c.finSent && c.drainedLocked() {
		return stepDrained
	}
	return stepIdle
}

// send frames the picked messages (unless a cut batch is pending) and
// writes the batch: blocking (a sender goroutine) or with a single
// non-blocking attempt (inline from PostSend). Called without q.mu, with
// the writer token. stepProgress means the batch is written; the caller
// then completes it with finishLocked.
func (s *sender) send(block bool) stepResult {
	c := s.c
	if !s.partial {
		// Frame whole messages, in order, until the batch is full; the
		// first message that does not fit is continued by the next batch.
		s.bufs, s.arena = s.bufs[:0], s.arena[:0]
		nfpdu, nbytes := 0, 0
		s.done = 0
		for i := range s.items {
			if !s.frame(&s.items[i], &nfpdu, &nbytes) {
				break
			}
			s.done++
		}
		s.wbuf = s.bufs
		s.partial = true
	}
	ok, err := s.write(block)
	if err != nil {
		c.fail(fmt.Errorf("iwarp: send: %w", err), nil)
		_ = c.tc.Close() // make sure the receiver stops too
		return stepFailed
	}
	if !ok {
		return stepBlocked
	}
	s.partial = false
	clear(s.bufs) // drop references to user memory
	return stepProgress
}

// finishLocked completes the Sends and Writes of the batch just written:
// their last byte is with TCP (siw completes them then too: TCP delivers
// them or the connection fails). A Read completes when its Response has
// been placed. Called with q.mu held, by the token holder.
func (s *sender) finishLocked() {
	c := s.c
	for i := range s.done {
		it := &s.items[i]
		switch {
		case it.wr == nil:
		case !it.read:
			c.completeSendLocked(it.wr)
		case it.wr.answered:
			// The Response came before this: complete it now, after
			// what was written ahead of it.
			c.completeSendLocked(it.wr)
		default:
			it.wr.sent = true
		}
	}
	n := copy(s.items, s.items[s.done:])
	clear(s.items[n:])
	s.items = s.items[:n]
	s.done = 0
}

// write puts s.wbuf on the socket: all of it (block), or as much as the
// socket takes now. ok reports that nothing is left.
func (s *sender) write(block bool) (ok bool, err error) {
	raceRelease(s.c.raceTx)
	if block {
		_, err = s.wbuf.WriteTo(s.c.tc)
		return err == nil, err
	}
	return s.writeNow()
}

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 {
		b := (*v)[0]
		if len(b) > n {
			(*v)[0] = b[n:]
			return
		}
		n -= len(b)
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}

// nextLocked takes the next message to send: a pending Read Response
// first (the peer's Read is waiting for it), else the oldest queued WR if
// ORD and fencing allow it to start. Called with q.mu held.
func (s *sender) nextLocked() (txItem, bool) {
	c := s.c
	if c.rresp.len() > 0 {
		return txItem{rr: c.rresp.pop()}, true
	}
	if !c.startableLocked() {
		return txItem{}, false
	}
	w := c.pending.pop()
	it := txItem{wr: w}
	switch w.op {
	case driver.OpRDMARead:
		c.reads.push(w)
		it.read = true
		s.msn[1]++
		it.msn = s.msn[1]
	case driver.OpSend:
		s.msn[0]++
		it.msn = s.msn[0]
	}
	return it, true
}

// frame appends the FPDUs of it to the batch, from it.off on, until the
// message is complete (true) or the batch is full (false, it.off records
// the progress). A batch always takes at least one FPDU.
func (s *sender) frame(it *txItem, nfpdu, nbytes *int) bool {
	if it.read {
		if *nfpdu >= maxBatchFPDUs {
			return false
		}
		w := it.wr
		h := wire.Header{Last: true, Opcode: wire.OpReadRequest, MSN: it.msn}
		start := len(s.arena)
		s.arena, _ = h.Append(s.arena, wire.ReadRequestBodyLen)
		rr := wire.ReadRequest{SinkSTag: w.sinkSTag, SinkTO: w.sinkTO, Size: w.total, SourceSTag: w.remote.RKey, SourceTO: w.remote.Addr}
		s.arena = rr.Append(s.arena)
		head := s.arena[start:]
		var crc wire.CRC
		if s.c.crc {
			crc = crc.Update(head)
		}
		s.bufs = append(s.bufs, head)
		s.trailer(len(head)-wire.ULPDULengthLen, crc)
		*nfpdu++
		return true
	}

	var h wire.Header
	var base uint64
	switch {
	case it.wr == nil:
		h = wire.Header{Opcode: wire.OpReadResponse, STag: it.rr.sinkSTag}
		base = it.rr.sinkTO
	case it.wr.op == driver.OpRDMAWrite:
		h = wire.Header{Opcode: wire.OpWrite, STag: it.wr.remote.RKey}
		base = it.wr.remote.Addr
	default:
		h = wire.Header{Opcode: wire.OpSend, MSN: it.msn}
		if it.wr.flags&driver.SendSolicited != 0 {
			h.Opcode = wire.OpSendSE
		}
	}
	total := it.total()
	segMax := s.segments(total, h.Opcode.Tagged())
	for {
		if *nfpdu >= maxBatchFPDUs || (*nfpdu > 0 && *nbytes >= maxBatchBytes) {
			return false
		}
		n := min(uint32(segMax), total-it.off)
		h.Last = it.off+n == total
		if h.Opcode.Tagged() {
			h.TO = base + uint64(it.off)
		} else {
			h.MO = it.off
		}
		start := len(s.arena)
		s.arena, _ = h.Append(s.arena, int(n))
		head := s.arena[start:]
		s.bufs = append(s.bufs, head)
		var crc wire.CRC
		if s.c.crc {
			crc = crc.Update(head)
		}
		crc = s.payload(it, n, crc)
		s.trailer(len(head)-wire.ULPDULengthLen+int(n), crc)
		it.off += n
		*nfpdu++
		*nbytes += int(n)
		if h.Last {
			if it.wr == nil {
				// The Read Request is answered once its Response's last
				// FPDU is framed: that is before the peer can see its last
				// byte and send its next Request (see connection.irdUsed).
				s.c.irdUsed.Add(-1)
			}
			return true
		}
	}
}

// payload appends the next n payload bytes of it as iovecs pointing into
// the source memory, extending crc over them when CRC is on.
func (s *sender) payload(it *txItem, n uint32, crc wire.CRC) wire.CRC {
	if it.wr == nil {
		p := it.rr.src[it.off : it.off+n]
		if n > 0 {
			s.bufs = append(s.bufs, p)
		}
		if s.c.crc {
			crc = crc.Update(p)
		}
		return crc
	}
	w := it.wr
	for n > 0 {
		seg := w.seg[it.seg]
		k := min(int(n), len(seg)-it.segOff)
		p := seg[it.segOff : it.segOff+k]
		s.bufs = append(s.bufs, p)
		if s.c.crc {
			crc = crc.Update(p)
		}
		n -= uint32(k)
		it.segOff += k
		if it.segOff == len(seg) {
			it.seg++
			it.segOff = 0
		}
	}
	return crc
}

// trailer appends pad and CRC for a ULPDU of ulpduLen bytes.
func (s *sender) trailer(ulpduLen int, crc wire.CRC) {
	start := len(s.arena)
	s.arena = wire.AppendTrailer(s.arena, ulpduLen, crc, s.c.crc)
	s.bufs = append(s.bufs, s.arena[start:])
}
