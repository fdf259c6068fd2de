package rdmanet

import (
	"io"
	"net"
	"os"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// Write copies b into the staging buffer and RDMA-writes it into the
// peer's ring, announcing it with a control message. It returns once all
// of b is posted (the staging copy is what makes b reusable at once), or
// with an error: the write deadline, Close, CloseWrite, or a dead peer.
// It blocks while the peer's ring or our staging buffer is full.
func (c *Conn) Write(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.enter(); err != nil {
		return 0, c.ioError(opError("write", c.laddr, c.raddr, err))
	}
	defer c.leave()
	if c.unholdFirst() {
		// This Write's message carries the first message; if it sent
		// none (an error, a zero-length Write), this sends it.
		defer c.flushControl()
	}
	if len(b) > 0 && len(b) <= wire.MaxInline {
		// Small writes go inside a control message when they can go at
		// once; otherwise (no credit, a full ring) the RDMA path below
		// waits for room as usual.
		if _, err := c.reserve(0, true); err != nil {
			return 0, c.ioError(opError("write", c.laddr, c.raddr, err))
		}
		if c.writeInline(b) {
			return len(b), nil
		}
	}
	if m := c.directMin(); m > 0 && len(b) >= m {
		if n, err, ok := c.writeDirect(b); ok {
			if err != nil {
				return n, c.ioError(opError("write", c.laddr, c.raddr, err))
			}
			return n, nil
		}
	}
	n := 0
	for n < len(b) {
		k, err := c.reserve(uint64(len(b)-n), true)
		if err != nil {
			return n, c.ioError(opError("write", c.laddr, c.raddr, err))
		}
		// New bytes always go to the current staging region (only the
		// writer, who holds writeMu, replaces it).
		st := &c.stage.cur
		a, s := st.r.Segments(c.stProd, k)
		m := copy(st.reg.buf[a.Off:a.End()], b[n:])
		copy(st.reg.buf[s.Off:s.End()], b[n+m:])
		if !c.postData(k) {
			return n, c.ioError(opError("write", c.laddr, c.raddr, net.ErrClosed))
		}
		n += int(k)
	}
	if len(b) == 0 {
		// A zero-length Write still reports the connection's state.
		if _, err := c.reserve(0, true); err != nil {
			return 0, c.ioError(opError("write", c.laddr, c.raddr, err))
		}
	}
	return n, nil
}

// reserve waits until up to want bytes (at least one) can be written and
// returns how many: bounded by the peer's free ring space, chunk, and for
// staged bytes our free staging space. Callers hold writeMu, which makes
// stProd and sProd theirs.
//
// A reservation that finds no room is a wait, counted in Stats by cause
// with its duration; one that finds room at once reads no clock.
func (c *Conn) reserve(want uint64, staged bool) (uint64, error) {
	var w waitTimer
	quiet := false // the reservation waits: a stream's wait (progress.go)
	defer func() {
		if quiet {
			c.quiet.Add(-1)
		}
	}()
	for {
		k := c.pr.kicks.Load()
		if c.wdl.passed() {
			w.end(c)
			return 0, os.ErrDeadlineExceeded
		}
		c.mu.Lock()
		c.adoptOfferLocked() // we hold writeMu: a pending offer is ours to adopt
		switch {
		case c.closedLocked():
			w.endLocked(c)
			c.mu.Unlock()
			return 0, net.ErrClosed
		case c.writeShut:
			w.endLocked(c)
			c.mu.Unlock()
			return 0, errWriteShut
		case c.err != nil:
			w.endLocked(c)
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if want == 0 {
			c.mu.Unlock()
			return 0, nil
		}
		space := min(c.dst.free(c.sProd, c.sPeerCons), want, chunk(c.dst.r))
		if staged {
			space = min(space, c.stage.free(c.stProd, c.stCons))
		}
		// Up to two RDMA Writes per reservation, and a send-queue entry
		// left for the control message that follows them.
		if c.posted-c.completed+3 > uint64(c.cfg.sendDepth) {
			space = 0
		}
		if space > 0 {
			w.endLocked(c)
		} else {
			w.beginLocked(c)
		}
		c.mu.Unlock()
		if space > 0 {
			return space, nil
		}
		if staged {
			c.growStage()
		}
		if !quiet {
			quiet = true
			c.quiet.Add(1)
		}
		if c.poll(k) {
			continue
		}
		select {
		case <-c.wwake:
		case <-c.wdl.done():
		case <-c.done:
		}
	}
}

// postData RDMA-writes the k staged bytes at stProd to the peer's ring at
// sProd, then announces them (see postWrites).
func (c *Conn) postData(k uint64) bool {
	_, ok := c.postWrites(k, nil, false)
	return ok
}

// postWrites RDMA-writes k bytes to the peer's ring at sProd, then
// announces them: with the last Write's immediate data where that was
// negotiated and can say it (imm.go), else with a control Send; all of it
// in one list (sendlist.go). The bytes come from the staging buffer at stProd, or,
// when direct is set, from the caller's registered buffer it describes
// (a zero-copy Write; see conn_direct.go). Each RDMA Write targets one
// contiguous piece of the peer's ring (split in two at its wrap) and
// gathers from at most two pieces of the source. The Writes are posted
// with SUPPRESS, unless signal asks a completion of the last one: a later
// signalled request (the control Send after them, or one of a later
// chunk) completes only after they did (completions come in post order),
// which releases their staging space. It returns the
// sequence number of the last Write, and reports false, posting nothing,
// when Close came in between reserve and now: its FIN may already be out,
// and no data may follow a FIN.
func (c *Conn) postWrites(k uint64, direct *directSource, signal bool) (uint64, bool) {
	c.postMu.Lock()
	defer c.postMu.Unlock()
	c.mu.Lock()
	if c.finWanted {
		c.mu.Unlock()
		return 0, false
	}
	rpos, lpos := c.sProd, c.stProd
	c.sProd += k
	if direct == nil {
		c.stProd += k
	}
	seq := c.posted
	dst := c.dst
	r1, r2 := dst.r.Segments(rpos, k)
	nwr := uint64(1)
	if r2.Len > 0 {
		nwr = 2
	}
	c.posted += nwr
	last := seq + nwr - 1
	c.st.rdmaWrites += nwr
	if direct == nil {
		c.stageEnd[seq%uint64(c.cfg.sendDepth)] = lpos + r1.Len
		if nwr == 2 {
			c.stageEnd[(seq+1)%uint64(c.cfg.sendDepth)] = lpos + k
		}
	} else {
		// No staging: a completion of these releases none.
		c.stageEnd[seq%uint64(c.cfg.sendDepth)] = lpos
		c.stageEnd[last%uint64(c.cfg.sendDepth)] = lpos
	}
	// The last Write may carry the announcement itself (imm.go). No Send
	// follows it then, so it asks for the completions the Send would have.
	imm, withImm := c.announceImmLocked()
	if withImm && c.signalDueLocked() {
		signal = true
	}
	if signal {
		c.signaled = c.posted
	}
	c.mu.Unlock()
	// The Writes, and the control Send that may follow them, go to the
	// provider as one list (sendlist.go).
	c.sends.open = true
	for i, r := range [2]struct{ off, n uint64 }{{r1.Off, r1.Len}, {r2.Off, r2.Len}} {
		if r.n == 0 {
			break
		}
		iov := c.wrIOV[2*i : 2*i+1]
		if direct != nil {
			iov[0] = direct.take(r.n)
		} else {
			st := &c.stage.cur
			a, b := st.r.Segments(lpos, r.n)
			iov[0] = st.reg.triplet(a.Off, a.Len)
			if b.Len > 0 {
				iov = c.wrIOV[2*i : 2*i+2]
				iov[1] = st.reg.triplet(b.Off, b.Len)
			}
		}
		req := dat.SendRequest{Op: dat.DTORDMAWrite, IOV: iov, Cookie: seq, Flags: dat.CompletionSuppress,
			Remote: dat.RMRTriplet{Addr: dst.addr + r.off, Length: uint32(r.n), Context: dst.key}}
		if signal && seq == last {
			req.Flags = dat.CompletionDefault
		}
		if withImm && seq == last {
			req.Op, req.Imm = dat.DTORDMAWriteImm, imm
		}
		c.sends.add(req)
		seq++
		lpos += r.n
	}
	c.flushControlPosting()
	c.sends.open = false
	c.submitSends() // a failure is the next reserve's to report
	return last, true
}

// ReadFrom reads r into the staging buffer directly and sends it, until
// io.EOF (io.ReaderFrom, used by io.Copy): no intermediate buffer.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.enter(); err != nil {
		return 0, c.ioError(opError("write", c.laddr, c.raddr, err))
	}
	defer c.leave()
	c.releaseFirst() // r may take its time to yield the first bytes
	var total int64
	for {
		k, err := c.reserve(1<<62, true)
		if err != nil {
			return total, c.ioError(opError("write", c.laddr, c.raddr, err))
		}
		// Read into the contiguous part only: one Read call per round.
		st := &c.stage.cur
		a, _ := st.r.Segments(c.stProd, k)
		n, rerr := r.Read(st.reg.buf[a.Off:a.End()])
		if n > 0 {
			if !c.postData(uint64(n)) {
				return total, c.ioError(opError("write", c.laddr, c.raddr, net.ErrClosed))
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr // the source's error, not the connection's
		}
	}
}

// writeInline sends b inside a control message if that is possible right
// now: a control message may be posted, the peer's ring has room, and no
// FIN is due. It reports whether it did.
func (c *Conn) writeInline(b []byte) bool {
	c.postMu.Lock()
	defer c.postMu.Unlock()
	c.mu.Lock()
	if c.finWanted || !c.canControlLocked() || c.dst.free(c.sProd, c.sPeerCons) < uint64(len(b)) ||
		len(b) > wire.InlineRoom(c.extFlagsLocked()) {
		c.mu.Unlock()
		return false
	}
	c.sProd += uint64(len(b))
	c.st.inline++
	c.postControlLocked(b)
	return true
}
