package rdmanet

import (
	"sync/atomic"
	"time"
)

// The dialer's first message. An iWARP initiator must send the first FPDU
// of a connection (RFC 5044 §7.1.2), so the server can send nothing until
// a message of ours arrives. A dial that sent one of its own for that
// would cost a message and a wake-up of the server, which receives and
// applies it, only for the client's first Write to follow with another a
// moment later; and most clients write first (a request). So a dialed
// Conn holds its first message back (firstHeld) for the application's
// first call: a Write's message carries it along with the data, and a
// Read, WriteTo or ReadFrom, which may wait for the server, or any Close,
// sends it at once. A client that does not call in within firstHold (one
// that waits for something else first) gets it sent by a timer, so a
// server that speaks first is held up by that much at most; its data is
// queued meanwhile, not lost.
//
// Spares (spare.go) send theirs at once: nobody calls them until a dial
// takes them. The listener's side never holds anything: only the
// initiator must speak first.
const firstHold = time.Millisecond

// testFirstHold replaces firstHold in tests that must not see the timer
// fire; nil outside them.
var testFirstHold atomic.Pointer[time.Duration]

// armFirst starts the timer that sends a held first message of a dial
// that returns to its caller.
func (c *Conn) armFirst() {
	c.mu.Lock()
	if c.firstHeld.Load() {
		hold := firstHold
		if h := testFirstHold.Load(); h != nil {
			hold = *h
		}
		c.firstTimer = time.AfterFunc(hold, c.firstExpired)
	}
	c.mu.Unlock()
}

// firstExpired is the timer's: the application did not call in.
func (c *Conn) firstExpired() {
	if c.enter() != nil {
		return // closed meanwhile; Close sent what was due
	}
	c.releaseFirst()
	c.leave()
}

// unholdFirst ends the hold, so that the next control message is the
// first one, and reports whether it was held.
func (c *Conn) unholdFirst() bool {
	if !c.firstHeld.Load() {
		return false
	}
	c.mu.Lock()
	held := c.firstHeld.Swap(false)
	t := c.firstTimer
	c.firstTimer = nil
	c.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	return held
}

// releaseFirst ends the hold and sends the first message now.
func (c *Conn) releaseFirst() {
	if c.unholdFirst() {
		c.flushControl()
	}
}
