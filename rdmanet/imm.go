package rdmanet

import (
	"sync/atomic"

	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// Data announcements as immediate data. On InfiniBand and RoCE a chunk's
// last RDMA Write can carry its announcement (wire.Imm: how far prod
// moves, and a grant) as an RDMA Write with Immediate, so no control Send
// follows it: one work request, one completion and one receive per chunk
// instead of two requests. iWARP (RFC 5040) has no immediate data, so
// there, and with a peer whose Hello lacks handshake.FlagWriteImm, every
// announcement stays a control Send.
//
// An immediate announcement is a control message in every respect but
// its encoding: it consumes one of the peer's control receives and one
// credit (rule R1 holds for it as for a Send), takes the next control
// sequence number, and the receiver rebuilds a full control message from
// it (the peer's consumer position unchanged) and checks it by the same
// rules (applyLocked). What an immediate value cannot say goes by Send:
// the first message, consumption that is due back, FIN, ring offers and
// switches, a re-sync, a grant or an advance too large for its fields.

// immLocked reports whether immediate announcements were negotiated: both
// Hellos set handshake.FlagWriteImm. Callers hold c.mu.
func (c *Conn) immLocked() bool {
	f := c.helloFlags & c.peer.Flags
	return f&handshake.FlagWriteImm != 0
}

// announceImmLocked decides whether the RDMA Writes being posted, which
// end at sProd, announce themselves. If they may, it records the
// announcement as postControlLocked records a control message and returns
// the immediate value. Callers hold c.postMu and c.mu, have counted the
// Writes in posted and sProd, and post them right after.
func (c *Conn) announceImmLocked() (uint32, bool) {
	if h := testImmForce.Load(); !c.immLocked() && (h == nil || !(*h)(c)) {
		return 0, false
	}
	if !c.canControlLocked() || c.finWanted || c.firstDue || c.offerUnsent || c.switchUnsent || c.syncDue || c.returnDueLocked() {
		return 0, false
	}
	adv := c.sProd - c.sProdSent
	if adv > wire.MaxImmAdvance {
		return 0, false // (a uint32 conversion below must not wrap)
	}
	v, err := wire.AppendImm(wire.Imm{Grant: uint16(min(c.cc.ungranted, wire.MaxImmGrant+1)), Advance: uint32(adv)})
	if err != nil {
		return 0, false // a field does not fit: a Send says it instead
	}
	if h := testImm.Load(); h != nil {
		(*h)(c, &v)
	}
	c.messageOutLocked()
	c.st.immWrites++
	return v, true
}

// applyImmLocked checks and applies an announcement the peer sent as
// immediate data. Callers hold c.mu.
func (c *Conn) applyImmLocked(v uint32) error {
	if !c.immLocked() {
		return errProtocol("RDMA Write with Immediate, which the handshake did not negotiate")
	}
	im, err := wire.ParseImm(v)
	if err != nil {
		return errProtocol("%v", err)
	}
	m := wire.Control{Prod: c.rProd + uint64(im.Advance), Cons: c.sPeerCons, Grant: im.Grant, Seq: c.ctrlIn}
	return c.applyLocked(&m)
}

// Test hooks, nil outside tests: testImm edits each immediate value a
// Conn sends, and testImmForce makes a Conn announce with immediate data
// although the handshake did not negotiate it, so tests can play a peer
// that breaks the rules. Atomic, as the other hooks (conn.go): a test
// sets them while connections of earlier tests may still send.
var (
	testImm      atomic.Pointer[func(*Conn, *uint32)]
	testImmForce atomic.Pointer[func(*Conn) bool]
)
