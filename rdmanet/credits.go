package rdmanet

// credits is the flow control of the control channel, kept apart from
// everything else so it can be tested alone.
//
// iWARP has no receiver-not-ready retry: a Send that finds no posted
// receive terminates the connection. So a side may have at most as many
// control Sends outstanding as the peer has receives posted. The peer's
// Hello announces how many it posted (the initial credits); every Send
// uses one; every control message carries a grant: how many receives its
// sender re-posted since its previous message, which returns that many
// credits to the other side.
//
// Two rules keep this from deadlocking:
//
//	R1  The last credit is kept for a message that carries a grant: a
//	    message without one needs two credits.
//	R2  When un-granted re-posts reach K/2 (K = receives a side keeps
//	    posted), that side sends a message even if it has nothing else to
//	    say (a grant-only message).
//
// Why it cannot deadlock. Call c_X the credits X holds and u_X the
// receives X re-posted but not yet granted. With nothing in flight, every
// receive of Y is either a credit of X or an un-granted re-post of Y:
//
//	c_X + u_Y = K_Y   and   c_Y + u_X = K_X.          (conservation)
//
// Suppose both sides are stuck with something to send and nothing in
// flight. (a) Both c_X = 0 and c_Y = 0 is impossible: look at the last
// message delivered, say from Y to X. Y sent nothing after it (it would be
// delivered later), so c_Y never dropped again; if sending it took c_Y to
// 0, then by R1 it carried a grant ≥ 1 and X, which sent nothing after
// receiving it, still holds c_X ≥ 1. (b) If c_X = 0 then u_Y = K_Y ≥ K_Y/2,
// so by R2 Y wants to send a grant; it can, since c_Y ≥ 1 by (a) and u_Y ≥
// 1 makes it a grant-carrying message (R1 is satisfied with one credit).
// (c) If X is stuck with c_X = 1 (its message has no grant, u_X = 0), then
// c_Y = K_X ≥ 2 and u_Y = K_Y − 1 ≥ K_Y/2 for K_Y ≥ 2, so Y sends a grant
// by R2 and X then holds two credits. In every case somebody can send, and
// each grant only raises the other side's credits, so progress continues.
// K ≥ 2 is enforced by the handshake (MinCredits).
type credits struct {
	// avail is how many Sends we may still post (c above).
	avail int
	// ungranted counts receives we re-posted since our last message (u).
	ungranted int
	// k is how many control receives we keep posted.
	k int
}

// canSend reports whether a message may be posted now (R1).
func (c *credits) canSend() bool {
	return c.avail >= 2 || (c.avail == 1 && c.ungranted > 0)
}

// grantDue reports R2: un-granted re-posts reached K/2.
func (c *credits) grantDue() bool { return c.ungranted > 0 && c.ungranted >= c.k/2 }

// sent records a posted message and returns the grant it must carry.
func (c *credits) sent() uint16 {
	g := c.ungranted
	c.avail--
	c.ungranted = 0
	return uint16(g)
}

// received records a grant from the peer.
func (c *credits) received(grant uint16) { c.avail += int(grant) }

// reposted records one of our control receives being posted again.
func (c *credits) reposted() { c.ungranted++ }
