package rdmanet

import "fmt"

// lifecycle is where a Conn is in its life: one state, guarded by Conn.mu,
// instead of a flag per fact. Its transitions are the table below, which
// the tests quote; to names a state that is not reachable from the current
// one, moveLocked refuses (and leaves the state alone).
//
// The transport's end and the user's Close are folded into one sequence:
// once Close is called, how the transport ended no longer matters to any
// caller except teardown, which reads it from Conn.err (set whenever the
// transport ends, by the peer, by a failure or by abandon).
type lifecycle uint8

const (
	// lcHandshake: the Conn exists, its EP is connecting or accepting.
	lcHandshake lifecycle = iota
	// lcOpen: established; Reads and Writes move data.
	lcOpen
	// lcPeerGone: established, then the transport ended without our
	// Close (the peer disconnected, or it broke). Reads drain the ring,
	// then report EOF or the reset; Writes fail.
	lcPeerGone
	// lcFailed: the handshake failed; the Conn never reached its user.
	lcFailed
	// lcClosing: Close (or abandon) was called: every call fails with
	// net.ErrClosed, and teardown drains, disconnects and frees.
	lcClosing
	// lcClosed: torn down; only the memory waits for the last Read or
	// Write to leave.
	lcClosed
)

var lifecycleNames = [...]string{"handshake", "open", "peer-gone", "failed", "closing", "closed"}

func (s lifecycle) String() string {
	if int(s) < len(lifecycleNames) {
		return lifecycleNames[s]
	}
	return fmt.Sprintf("lifecycle(%d)", uint8(s))
}

// lifecycleMoves lists, for each state, the states it may move to.
var lifecycleMoves = [...][]lifecycle{
	lcHandshake: {lcOpen, lcFailed, lcClosing},
	lcOpen:      {lcPeerGone, lcClosing},
	lcPeerGone:  {lcClosing},
	lcFailed:    {lcClosing},
	lcClosing:   {lcClosed},
	lcClosed:    nil,
}

// canMove reports whether the table allows from → to.
func canMove(from, to lifecycle) bool {
	for _, s := range lifecycleMoves[from] {
		if s == to {
			return true
		}
	}
	return false
}

// moveLocked moves c to state to if the table allows it from where c is,
// and reports whether it did. Callers hold c.mu.
func (c *Conn) moveLocked(to lifecycle) bool {
	if !canMove(c.lc, to) {
		return false
	}
	c.lc = to
	return true
}

// closedLocked reports whether Close (or abandon) was called. Callers
// hold c.mu.
func (c *Conn) closedLocked() bool { return c.lc >= lcClosing }
