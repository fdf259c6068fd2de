package rdmanet

import (
	"sync"
	"time"
)

// The janitor gives an idle adaptive connection's memory back: once
// nothing has moved either way for idleShrinkAfter, the receive ring is
// replaced by one of DefaultBufferSize (offered to the writer like any
// other; see resize.go) and the staging buffer by a small one. It is one
// goroutine for the whole process, which exists only while some
// connection has grown, and it wakes every janitorTick. Idle connections
// at their initial size cost it nothing.
//
// The shrink completes when the peer adopts the offer, which it does the
// next time it polls the connection: a peer blocked in Read (an idle
// server, or a client waiting for a response) does so at once. A writer
// that found its own writeMu held at that moment adopts it at its
// janitor's next tick.
const (
	janitorTick     = 500 * time.Millisecond
	idleShrinkAfter = 2 * time.Second
)

var janitor struct {
	mu      sync.Mutex
	running bool
	wake    chan struct{} // cap 1: a grown Conn went away
}

func init() { janitor.wake = make(chan struct{}, 1) }

// noteGrown makes sure the janitor runs: c's memory grew.
func noteGrown() {
	janitor.mu.Lock()
	if !janitor.running {
		janitor.running = true
		go runJanitor()
	}
	janitor.mu.Unlock()
}

// janitorForget tells the janitor a Conn went, so that it stops at once
// when no grown Conn is left (tests check that no goroutine outlives the
// connections).
func janitorForget() { wake(janitor.wake) }

func runJanitor() {
	t := time.NewTicker(janitorTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-janitor.wake:
		}
		janitor.mu.Lock()
		grown := registry.grownConns()
		if len(grown) == 0 {
			janitor.running = false
			janitor.mu.Unlock()
			return
		}
		janitor.mu.Unlock()
		for _, c := range grown {
			c.shrinkIfIdle()
		}
	}
}

// grownConns lists the live Conns with more memory than they started with.
func (r *liveSet) grownConns() []*Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cs []*Conn
	for c := range r.conns {
		if c.grown() {
			cs = append(cs, c)
		}
	}
	return cs
}

// grown reports whether c holds more than its initial buffers, or is
// about to, or has a peer's offer to adopt (which frees the peer's).
func (c *Conn) grown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	init := uint64(c.cfg.bufSize)
	return c.recv.size() > init || c.recv.prev != nil || c.offer != nil || c.offering ||
		c.stage.size() > init || c.stage.prev != nil || c.hasOffer
}

// shrinkIfIdle counts c's idle ticks and, past idleShrinkAfter, shrinks
// what grew.
func (c *Conn) shrinkIfIdle() {
	if c.enter() != nil {
		return // closed: its memory goes with it
	}
	defer c.leave()
	init := uint64(c.cfg.bufSize)
	c.mu.Lock()
	pending := c.hasOffer
	c.mu.Unlock()
	if pending {
		c.adoptOffer() // one that found writeMu held (see adoptOffer)
	}
	c.mu.Lock()
	moved := c.rProd != c.idleMark[0] || c.sProd != c.idleMark[1]
	c.idleMark = [2]uint64{c.rProd, c.sProd}
	if moved {
		c.idleTicks = 0
	} else {
		c.idleTicks++
	}
	idle := time.Duration(c.idleTicks)*janitorTick >= idleShrinkAfter
	offer := idle && c.recv.size() > init && c.rCons == c.rProd && c.canOfferLocked()
	if offer {
		c.offering = true
	}
	c.mu.Unlock()
	if offer {
		c.offerRing(init)
	}
	if idle {
		c.shrinkStage()
	}
}

// shrinkStage replaces a grown staging buffer that nothing is in flight
// from with one of the initial size, unless a Write is in progress.
func (c *Conn) shrinkStage() {
	if !c.writeMu.TryLock() {
		return
	}
	defer c.writeMu.Unlock()
	c.mu.Lock()
	live := c.lc == lcOpen || c.lc == lcClosing
	shrink := c.stage.size() > uint64(c.cfg.bufSize) && c.stage.prev == nil && live
	if shrink && c.stCons != c.stProd {
		// The last requests were posted without asking for a
		// completion, which an idle writer will not ask for either: a
		// message that does brings the staging space back, and the
		// next tick shrinks.
		if c.signaled < c.posted {
			c.syncDue = true
		}
		shrink = false
	}
	sync := c.syncDue
	c.mu.Unlock()
	if sync {
		c.flushControl()
	}
	if !shrink {
		return
	}
	reg, err := regionFrom(c.ia, &c.mem.stgHome, c.cfg.bufSize, stagePriv)
	if err != nil {
		return // keep the big one
	}
	c.mu.Lock()
	c.stage.switchTo(reg, c.stProd)
	c.retireStageLocked() // nothing in flight: the old one goes at once
	c.mu.Unlock()
	c.freeRetired()
}
