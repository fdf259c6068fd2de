package rdmanet

import (
	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// Control messages are encoded by internal/wire (see there for the
// layout). Positions are cumulative, so a message supersedes every earlier
// one and the sender may coalesce: one message reports any number of
// Writes and any amount of consumption. RC ordering makes prod safe to use
// at once: the RDMA Writes it covers were posted before this Send on the
// same QP and have landed before the Send is delivered.
//
// Inline data is the small-write path: a Write of at most
// wire.MaxInline bytes that can go at once (a control credit, room in the
// peer's ring) travels inside the control message instead of as an RDMA
// Write plus a control message, halving the work requests, and on iWARP
// the FPDUs and syscalls, of request/response traffic. It uses ring space
// exactly as an RDMA Write would; only the copy into the ring moves to
// the receiver. Each side's receive slots are wire.SlotSize bytes
// (protocol version 1).
const ctrlSlot = wire.SlotSize

// The control region holds K receive slots, unless the receives come from
// the IA's arena (ctrlpool.go), followed by S send slots (one per
// send-queue entry: a control Send with sequence number n uses send slot
// n mod S, which is free again because at most S send-side requests are
// outstanding).
func (c *Conn) recvSlot(i int) []byte {
	if c.arena != nil {
		return c.arena.slot(i)
	}
	return c.ctrl.buf[i*ctrlSlot : (i+1)*ctrlSlot]
}

// ownRecvs is how many receive slots the Conn's own region holds.
func (c *Conn) ownRecvs() int {
	if c.arena != nil {
		return 0
	}
	return c.cfg.recvs
}

// validSlot reports whether a receive completion names one of our slots.
func (c *Conn) validSlot(i int) bool {
	if c.arena != nil {
		return c.arena.valid(i)
	}
	return i >= 0 && i < c.cfg.recvs
}

func (c *Conn) sendSlotOff(seq uint64) uint64 {
	return uint64(c.ownRecvs()+int(seq%uint64(c.cfg.sendDepth))) * ctrlSlot
}

// giveBackSlot posts arena slot i back without counting it for a grant:
// the message in it was not applied (a failed receive, a bad message, a
// Conn going away), but the slot is the arena's and its supply must not
// shrink (ctrlpool.go). Own receive slots stay with the dying Conn.
func (c *Conn) giveBackSlot(i int) {
	if c.arena != nil && c.arena.valid(i) {
		c.arena.post(i)
	}
}

// postRecv (re-)posts control receive slot i, to the arena or our EP.
func (c *Conn) postRecv(i int) error {
	if c.arena != nil {
		return c.arena.post(i)
	}
	c.recvIOV[0] = c.ctrl.triplet(uint64(i*ctrlSlot), ctrlSlot)
	return c.ep.PostRecv(c.recvIOV[:], uint64(i), dat.CompletionDefault)
}

// wantControlLocked reports whether the peer should hear from us: new
// data to announce, a FIN, credit to return, a grant due (R2), or the
// dialer's first message unless it is held (firstmsg.go). Callers hold
// c.mu.
func (c *Conn) wantControlLocked() bool {
	return c.sProd != c.sProdSent ||
		(c.finWanted && !c.finSent) ||
		(c.firstDue && !c.firstHeld.Load()) || c.offerUnsent || c.switchUnsent || c.syncDue ||
		c.returnDueLocked() ||
		c.cc.grantDue()
}

// flushControl sends one control message if one is wanted and allowed
// (credits, a free send-queue entry). Every reason to send is cumulative
// state, so a message that cannot go now is not lost: the next call
// (after a completion, a grant, a Read or a Write) sends it.
func (c *Conn) flushControl() {
	c.postMu.Lock()
	c.flushControlPosting()
	c.postMu.Unlock()
}

// flushControlPosting is flushControl for callers holding c.postMu.
func (c *Conn) flushControlPosting() {
	c.mu.Lock()
	if !c.wantControlLocked() {
		c.mu.Unlock()
		return
	}
	if !c.canControlLocked() {
		c.driveLocked()
		c.mu.Unlock()
		return
	}
	c.postControlLocked(nil)
}

// driveLocked makes sure a control message that cannot go yet (no
// credit, or a full send queue) goes once it can. Without a goroutine of
// its own, a Conn makes progress only while someone waits on it; a Write
// that returned, or a Read that consumed the ring, with its message still
// pending would leave the peer waiting for it (the data it announces, the
// credit or space it returns) for as long as the application does not
// call in again. So a goroutine drives the Conn until the message is out
// or the Conn ends; it exists only while such a message is pending.
// Callers hold c.mu.
func (c *Conn) driveLocked() {
	if c.driving || c.err != nil || (c.lc != lcOpen && c.lc != lcClosing) {
		return
	}
	c.driving = true
	c.refs++ // the driver is inside the Conn until it leaves
	go c.drive()
}

// drive is the goroutine driveLocked starts.
func (c *Conn) drive() {
	defer func() {
		c.mu.Lock()
		c.driving = false
		c.mu.Unlock()
		c.leave()
	}()
	for {
		k := c.pr.kicks.Load()
		c.flushControl()
		c.mu.Lock()
		over := !c.wantControlLocked() || c.err != nil || (c.lc != lcOpen && c.lc != lcClosing)
		c.mu.Unlock()
		if over {
			return
		}
		if c.poll(k) {
			continue
		}
		select {
		case <-c.cwake:
		case <-c.done:
			return
		}
	}
}

// canControlLocked reports whether a control message may be posted now.
// Callers hold c.mu.
func (c *Conn) canControlLocked() bool {
	// Open, or closing an open Conn: the FIN goes after the data.
	return (c.lc == lcOpen || c.lc == lcClosing) && c.err == nil &&
		c.posted-c.completed < uint64(c.cfg.sendDepth) && c.cc.canSend()
}

// postControlLocked builds and posts a control message carrying the
// current state and payload (inline data already counted in sProd).
// Callers hold c.postMu and c.mu, have checked canControlLocked, and lose
// c.mu.
func (c *Conn) postControlLocked(payload []byte) {
	seq := c.posted
	c.posted++
	c.stageEnd[seq%uint64(c.cfg.sendDepth)] = c.stProd
	grant, num := c.messageOutLocked()
	m := wire.Control{Prod: c.sProd, Cons: c.rCons, Grant: grant, Seq: num, Inline: payload}
	if c.finWanted {
		m.Flags |= wire.FlagFIN
		c.finSent = true
	}
	if c.offerUnsent {
		m.Flags |= wire.FlagOffer
		m.Offer = wire.Offer{Addr: c.offer.addr, Key: c.offer.rkey, Size: uint32(len(c.offer.buf))}
		c.offerUnsent = false
	}
	if c.switchUnsent {
		m.Flags |= wire.FlagSwitch
		m.Switch = c.switchPos
		c.switchUnsent = false
	}
	c.rReported, c.firstDue, c.syncDue = c.rCons, false, false
	if h := testControl.Load(); h != nil {
		// A copy, so that m itself does not escape (and allocate) in
		// every call.
		tm := m
		(*h)(c, &tm)
		m = tm
	}
	off := c.sendSlotOff(seq)
	b, err := wire.Append(c.ctrl.buf[off:off:off+ctrlSlot], &m)
	if err != nil {
		// Callers size payloads by wire.InlineRoom, so this is a bug in
		// rdmanet; the connection cannot go on without the message.
		c.mu.Unlock()
		c.fail(err)
		return
	}
	c.ctrlIOV[0] = c.ctrl.triplet(off, uint64(len(b)))
	flags := dat.CompletionSuppress
	if c.signalDueLocked() {
		flags = dat.CompletionDefault
		c.signaled = c.posted
	}
	c.mu.Unlock()
	c.sends.add(dat.SendRequest{Op: dat.DTOSend, IOV: c.ctrlIOV[:], Cookie: seq, Flags: flags})
	if !c.sends.open {
		c.submitSends()
	}
}

// messageOutLocked records a message to the peer, a control Send or an
// immediate announcement (imm.go): it takes a credit and returns the
// grant the message carries and its sequence number, and it announces
// everything written so far. Callers hold c.mu.
func (c *Conn) messageOutLocked() (grant uint16, seq uint32) {
	grant, seq = c.cc.sent(), c.ctrlOut
	c.ctrlOut++
	c.st.ctrlSent++
	c.sProdSent = c.sProd
	return grant, seq
}

// signalDueLocked decides whether a control Send asks for a completion.
// A completion retires every request posted before it (they complete in
// order), so one now and then is enough to recycle send-queue entries
// and staging space: the writer waits only when one of them is used up,
// and a completion is requested well before that (a quarter of either
// in use since the last signaled request). The FIN is always signaled:
// Close waits for it. Skipping the rest halves the events a stream of
// small Writes wakes the dispatcher for. Callers hold c.mu.
func (c *Conn) signalDueLocked() bool {
	return c.finSent || c.syncDue ||
		c.posted-c.signaled >= uint64(c.cfg.sendDepth/4) ||
		c.stProd-c.stageAtSignal() >= c.stage.size()/4
}

// stageAtSignal is the staging position the last signaled request covers.
func (c *Conn) stageAtSignal() uint64 {
	if c.signaled == 0 {
		return 0
	}
	return c.stageEnd[(c.signaled-1)%uint64(c.cfg.sendDepth)]
}

// returnDueLocked decides whether our consumer position should go to the
// peer now (ring.ReturnDue), with batches sized from the current ring.
// (Between two processes, batches of half or an eighth of the ring moved
// neither 64 KiB nor 1 MiB writes beyond the noise, and neither did a
// Read that returns credit as it copies, a piece of the ring at a time,
// which cost 8% more CPU per byte at 1 MiB, p=0.022.)
// Callers hold c.mu.
func (c *Conn) returnDueLocked() bool {
	size := c.recv.size()
	return c.recv.cur.r.ReturnDue(c.rProd, max(c.rCons, c.recv.cur.start), max(c.rReported, c.recv.cur.start), size/4, size/32)
}

// extFlagsLocked are the extensions the next control message carries,
// which take room from its inline data. Callers hold c.mu.
func (c *Conn) extFlagsLocked() uint8 {
	var f uint8
	if c.offerUnsent {
		f |= wire.FlagOffer
	}
	if c.switchUnsent {
		f |= wire.FlagSwitch
	}
	return f
}
