package rdmanet

import (
	"fmt"
	"log/slog"
	"syscall"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// handle applies one event of the Conn's EVD. The EVD carries all three
// streams of the EP (receive and request completions, connection events),
// so their relative order is preserved. Nothing here allocates: events
// are values, control messages are decoded from the registered slots in
// place, and receives are re-posted with preallocated triplets.
func (c *Conn) handle(ev *dat.Event) {
	switch ev.Number {
	case dat.DTOCompletionEvent:
		if ev.DTO.Op == dat.DTOReceive {
			c.onRecv(ev)
		} else {
			c.onSendDone(ev)
		}
	case dat.ConnectionEventEstablished:
		c.onEstablished(ev)
	case dat.ConnectionEventPeerRejected, dat.ConnectionEventNonPeerRejected, dat.ConnectionEventUnreachable,
		dat.ConnectionEventTimedOut, dat.ConnectionEventAcceptCompletionErr:
		c.mu.Lock()
		c.moveLocked(lcFailed)
		c.mu.Unlock()
		c.setupDone(connectError(ev))
	case dat.ConnectionEventDisconnected, dat.ConnectionEventBroken:
		c.onDisconnected(ev)
	case dat.SoftwareEvent:
		c.pr.kickPosted.Store(false) // a kick (see progress)
	}
}

// setupDone reports the handshake outcome once.
func (c *Conn) setupDone(err error) {
	select {
	case c.setup <- err:
	default:
	}
}

func (c *Conn) onEstablished(ev *dat.Event) {
	if c.listener == nil {
		// Dialer: the server's Hello is the accept's private data.
		h, err := handshake.ParseHello(ev.Conn.PrivateData)
		if err != nil {
			c.mu.Lock()
			c.moveLocked(lcFailed)
			c.mu.Unlock()
			c.ep.Disconnect(dat.CloseAbrupt)
			c.setupDone(handshakeError(false, err.(*handshake.Error)))
			return
		}
		c.setPeer(h)
		// The iWARP initiator must send the first FPDU (RFC 5044 §7.1.2);
		// our first control message is it. It waits for the
		// application's first call (firstmsg.go) unless dialAddr lets it
		// go.
		c.firstDue = true
		c.firstHeld.Store(true)
	}
	c.established()
	c.setupDone(nil)
	if l := c.listener; l != nil {
		l.deliver(c)
	}
}

// onRecv handles a control message: it updates positions, credits and
// FIN, re-posts the receive and counts it for the next grant.
func (c *Conn) onRecv(ev *dat.Event) {
	slot := int(ev.DTO.Cookie)
	if ev.DTO.Status != dat.DTOSuccess {
		c.giveBackSlot(slot) // the arena's, whatever became of the message
		if ev.DTO.Status != dat.DTOErrFlushed {
			c.fail(fmt.Errorf("rdmanet: control receive failed: status %d", ev.DTO.Status))
		}
		return // flushed: the connection is going; its event follows
	}
	// A receive that an RDMA Write with Immediate consumed holds no
	// message: its length is the Write's, its announcement the value.
	if !c.validSlot(slot) || !ev.DTO.WithImm && ev.DTO.Length > ctrlSlot {
		c.fail(errProtocol("control message of %d bytes", ev.DTO.Length))
		return
	}
	var err error
	c.mu.Lock()
	if ev.DTO.WithImm {
		err = c.applyImmLocked(ev.DTO.Imm)
	} else {
		var m wire.Control
		if m, err = wire.Parse(c.recvSlot(slot)[:ev.DTO.Length]); err != nil {
			err = errProtocol("%v", err)
		} else {
			// Apply (and copy inline data out) before the slot is
			// posted again.
			err = c.applyLocked(&m)
		}
	}
	c.mu.Unlock()
	if err == nil {
		if err = c.postRecv(slot); err == nil {
			c.mu.Lock()
			c.cc.reposted()
			c.mu.Unlock()
		}
	} else {
		c.giveBackSlot(slot)
	}
	if err != nil {
		c.fail(err)
	}
}

// applyLocked checks a peer's message against what it may say and applies
// it. A peer that moves a position backwards, overfills our ring, claims
// consumption of bytes never written, writes after FIN or grants credits
// it cannot have is cut off: trusting it would corrupt the stream. So is
// one that resizes rings against the rules (see resize.go).
func (c *Conn) applyLocked(m *wire.Control) error {
	inline := m.Inline
	if m.Seq != c.ctrlIn {
		return errProtocol("control message %d, expected %d", m.Seq, c.ctrlIn)
	}
	if m.HasSwitch() {
		// First: the positions below may be in the new ring.
		if err := c.applySwitchLocked(m.Switch, m.Prod-uint64(len(inline))); err != nil {
			return err
		}
	}
	if m.HasOffer() {
		if err := c.applyOfferLocked(m.Offer); err != nil {
			return err
		}
	}
	switch {
	case m.Prod-uint64(len(inline)) < c.rProd || m.Prod-uint64(len(inline)) < c.recv.cur.start || !c.recv.valid(m.Prod, c.rCons):
		return errProtocol("producer position %d (ours: %d consumed of a %d-byte ring)", m.Prod, c.rCons, c.recv.size())
	case c.rFIN && m.Prod != c.rProd:
		return errProtocol("data after FIN")
	case m.Cons < c.sPeerCons || m.Cons > c.sProd:
		return errProtocol("consumer position %d (we wrote %d)", m.Cons, c.sProd)
	case c.cc.avail+int(m.Grant) > int(c.peer.Credits):
		return errProtocol("grant of %d exceeds the %d receives announced", m.Grant, c.peer.Credits)
	}
	c.ctrlIn++
	c.st.ctrlRecv++
	if len(inline) > 0 {
		// The bytes [prod−L, prod) are free ring space the peer wrote
		// into the message instead; the reader sees none of it before
		// rProd moves below.
		// (They are in the current ring: checked above.)
		cur := &c.recv.cur
		a, b := cur.r.Segments(m.Prod-uint64(len(inline)), uint64(len(inline)))
		k := copy(cur.reg.buf[a.Off:a.End()], inline)
		copy(cur.reg.buf[b.Off:b.End()], inline[k:])
	}
	c.rProd, c.sPeerCons = m.Prod, m.Cons
	c.noteWindowLocked()
	c.cc.received(m.Grant)
	if m.FIN() {
		c.rFIN = true
	}
	if c.readShut {
		c.rCons = c.rProd // CloseRead: discard, and give the space back
		if old := c.recv.retire(c.rCons); old != nil {
			c.retired = append(c.retired, old)
		}
	}
	return nil
}

// onSendDone handles a send-side completion. Completions arrive in post
// order, so the one for sequence number n retires every request up to n,
// including the suppressed RDMA Writes before it, and frees their staging
// space.
func (c *Conn) onSendDone(ev *dat.Event) {
	if ev.DTO.Status != dat.DTOSuccess {
		// A flush means the connection is going down, and its event
		// (which decides between EOF-then-EPIPE and a reset) follows;
		// anything else is a transport failure.
		if ev.DTO.Status != dat.DTOErrFlushed {
			c.fail(&peerError{errno: syscall.ECONNRESET, cause: fmt.Errorf("DTO op %d failed: status %d", ev.DTO.Op, ev.DTO.Status)})
		}
		return
	}
	c.mu.Lock()
	seq := ev.DTO.Cookie
	if seq >= c.completed && seq < c.posted {
		c.completed = seq + 1
		c.stCons = max(c.stCons, c.stageEnd[seq%uint64(c.cfg.sendDepth)])
		c.retireStageLocked()
	}
	c.mu.Unlock()
}

// onDisconnected handles the end of the connection. If we were closing it,
// Close is waiting. Otherwise the peer closed or the transport broke:
// Reads return what the ring holds, then io.EOF if a FIN came first and a
// reset error if not; Writes fail.
//
// A peer that went away without its FIN, or a broken transport, is a
// failure: counted in Stats and logged at Info. A graceful end is logged
// at Debug.
func (c *Conn) onDisconnected(ev *dat.Event) {
	c.mu.Lock()
	var ended error // how the transport ended, if this event says so
	closing := c.closedLocked()
	if c.err == nil {
		switch {
		case ev.Number == dat.ConnectionEventBroken:
			c.err = &peerError{errno: brokenErrno(ev.Conn.Err), cause: ev.Conn.Err}
		case c.rFIN:
			c.err = errPeerClosed
		default:
			c.err = errReset
		}
		if !closing { // our own Close's disconnect is no failure
			ended = c.err
		}
		if ended != nil && ended != errPeerClosed {
			c.transportFailedLocked(ended)
		}
	}
	wasHandshake := c.lc == lcHandshake
	if !c.moveLocked(lcPeerGone) {
		c.moveLocked(lcFailed) // in the handshake; closing Conns stay so
	}
	c.mu.Unlock()
	if wasHandshake {
		c.setupDone(errReset)
	}
	switch {
	case ended == nil || wasHandshake:
		// Close or a failure came first (and was logged), or the dial
		// or accept that waits for the handshake reports it.
	case ended == errPeerClosed:
		c.logDebug("rdmanet: peer closed")
	default:
		c.logInfo("rdmanet: peer reset", slog.String("reason", failureReason(ended)), slog.String("error", ended.Error()))
	}
	c.wakeAll()
}
