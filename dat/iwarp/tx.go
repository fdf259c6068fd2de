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
	wr  *sendWR // Send, Write or Read Request; nil for a Read Response
	rr  readResp
	msn uint32 // untagged MSN of a Send or Read Request
	off uint32 // payload bytes already framed
	// cursor into wr.seg for the next payload byte
	seg, segOff int
}

func (it *txItem) total() uint32 {
	if it.wr == nil {
		return uint32(len(it.rr.src))
	}
	if it.wr.op == driver.OpRDMARead {
		return 0
	}
	return it.wr.total
}

// sender is the state of a connection's sender goroutine, the only writer
// of the socket. It frames messages into FPDUs whose headers and trailers
// live in a per-connection arena and whose payload is the caller's
// registered memory itself: net.Buffers{hdr, payload pieces..., trailer,
// hdr, ...} goes to the kernel in one writev, with the CRC computed over
// the pieces in place. Steady-state sending allocates nothing.
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

// inlineSmall and inlineMax bound the requests PostSend frames and writes
// itself (see QP.PostSend): from any goroutine, and from a completion
// handler delivered by a provider goroutine. Larger requests are left to
// the sender goroutine.
const (
	inlineSmall = 2 << 10
	inlineMax   = 64 << 10
)

func newSender(c *connection) *sender {
	s := &sender{
		c:     c,
		arena: make([]byte, 0, maxBatchFPDUs*fpduOverhead),
		bufs:  make(net.Buffers, 0, 4*maxBatchFPDUs),
		items: make([]txItem, 0, 16),
	}
	// Non-last segments carry a multiple of 8 payload bytes, so they need
	// no pad (both header sizes are multiples of 4) and stay aligned.
	s.segTagged = (c.mulpdu - (wire.TaggedHeaderLen - wire.ULPDULengthLen)) &^ 7
	s.segUntagged = (c.mulpdu - (wire.UntaggedHeaderLen - wire.ULPDULengthLen)) &^ 7
	return s
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

// sendLoop is the sender goroutine. The socket's write side has one owner
// at a time, the holder of the writer token (connection.writing): usually
// this goroutine, which keeps it while there is work, and briefly a
// PostSend caller writing a small request without blocking (QP.PostSend),
// which hands over to this goroutine whatever it cannot finish.
func (c *connection) sendLoop() {
	defer close(c.senderDone)
	s := c.tx
	q := c.q
	gid := goid()
	q.mu.Lock()
	for {
		if c.writing {
			q.mu.Unlock()
			<-c.kick // the inline writer wakes us when it is done
			q.mu.Lock()
			continue
		}
		c.writing = true
		st := s.pickLocked(true)
		q.mu.Unlock()
		if st == stepProgress {
			st = s.send(true)
		}
		switch st {
		case stepDead:
			// Finish the FPDU boundary, then the Terminate. The token is
			// kept: nothing else is ever written.
			if s.partial {
				if ok, _ := s.write(true); !ok {
					return
				}
			}
			q.mu.Lock()
			term := c.term
			q.mu.Unlock()
			if term != nil {
				_, _ = c.tc.Write(term)
			}
			return
		case stepDrained:
			_ = c.tc.CloseWrite()
			close(c.drained)
			return
		case stepFailed:
			return
		}
		q.mu.Lock()
		if st == stepProgress {
			_ = s.finishLocked(true) // delivered just below
		}
		c.writing = false
		q.mu.Unlock()
		// Deliver the completions here rather than through a delivery
		// goroutine (see eventQueue.deliver).
		q.events.deliver(gid)
		if st == stepIdle {
			<-c.kick
		}
		q.mu.Lock()
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
	if block && c.draining && c.queued == 0 && c.reads.len() == 0 && c.rresp.len() == 0 {
		return stepDrained
	}
	return stepIdle
}

// send frames the picked messages (unless a cut batch is pending) and
// writes the batch: blocking (the sender goroutine) or with a single
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

// finishLocked completes the messages of the batch just written. Called
// with q.mu held, by the token holder; with inline the completions are
// only queued, and orphans reports that the caller must see to their
// delivery (see eventQueue.queue).
func (s *sender) finishLocked(inline bool) (orphans bool) {
	c := s.c
	for i := range s.done {
		if w := s.items[i].wr; w != nil && w.op != driver.OpRDMARead {
			w.state = wrDone
		}
	}
	if inline {
		orphans = c.completeDoneInline()
	} else {
		c.completeDone()
	}
	n := copy(s.items, s.items[s.done:])
	clear(s.items[n:])
	s.items = s.items[:n]
	s.done = 0
	return orphans
}

// write puts s.wbuf on the socket: all of it (block), or as much as the
// socket takes now. ok reports that nothing is left.
func (s *sender) write(block bool) (ok bool, err error) {
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
// first (the peer's Read is waiting for it), else the next queued WR if
// ORD and fencing allow it to start. Called with q.mu held.
func (s *sender) nextLocked() (txItem, bool) {
	c := s.c
	if c.rresp.len() > 0 {
		return txItem{rr: c.rresp.pop()}, true
	}
	if c.queued == 0 {
		return txItem{}, false
	}
	w := *c.sq.at(c.sq.len() - c.queued)
	if w.flags&driver.SendFence != 0 && c.reads.len() > 0 {
		return txItem{}, false // BARRIER_FENCE: earlier Reads first
	}
	it := txItem{wr: w}
	switch w.op {
	case driver.OpRDMARead:
		if c.reads.len() >= c.info.ORD {
			return txItem{}, false // ORD reached: wait for a Response
		}
		c.reads.push(w)
		s.msn[1]++
		it.msn = s.msn[1]
	case driver.OpSend:
		s.msn[0]++
		it.msn = s.msn[0]
	}
	w.state = wrActive
	c.queued--
	return it, true
}

// frame appends the FPDUs of it to the batch, from it.off on, until the
// message is complete (true) or the batch is full (false, it.off records
// the progress). A batch always takes at least one FPDU.
func (s *sender) frame(it *txItem, nfpdu, nbytes *int) bool {
	if it.wr != nil && it.wr.op == driver.OpRDMARead {
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
	segMax := s.segTagged
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
		segMax = s.segUntagged
	}
	total := it.total()
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
