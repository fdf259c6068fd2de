package rdmanet

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// A spare is a connection dialed ahead for the next dup-connect dial to a
// peer. Every iWARP connection needs its own TCP connection and MPA
// exchange, so a dup_connect saves nothing of a fresh dial by itself;
// what makes the next one fast is having it made already. A program that
// dups a connection (Conn.Dup, or a Dialer dialing an address it has a
// live connection to) is likely to do it again, so once a connection has
// been made through dup-connect, the IA dials spares (spareDepth) to
// that peer in the background, once the connection that dial returned
// has had its first exchange (see spareGate); the next dup-connect dial
// with the same setup takes the oldest (waiting for it if it is still
// being dialed, which is sooner than a dial of its own) and another
// spare is dialed.
// Programs that never dup never get one. The spare is a plain connection on the wire,
// so any server takes it; the server accepts it when it is dialed. It
// lives as long as the connection it was dialed from (its template):
// closing that closes the spare. A spare that cannot be dialed ends the
// spares of its template.
type spare struct {
	tmpl   *Conn  // the connection whose dup made it
	cfg    Dialer // the configuration it is dialed with
	remote string // its peer's address, as the IA's spares list it
	ap     netip.AddrPort
	ctx    context.Context
	done   chan struct{} // closed when its dial has ended
	exited chan struct{} // closed when its goroutine has ended (or it was dropped before it had one)
	cancel context.CancelFunc
	// started is set once its dial was started, or it was dropped
	// before (see spareGate): whoever sets it owns what follows.
	started atomic.Bool
	c       *Conn // the connection once dialed, until taken or dropped; guarded by sharedIA.mu
}

// A spareGate holds back the dials of the spares that a dup-connect dial
// asked for until the connection it returns (its after) has had its
// first exchange: its first Read (or WriteTo) has returned, or it is
// closing; or for spareWait at most, for a connection that is not read
// at once. Those dials are for a later dial, and this connection's
// caller waits now: dialed at once, a spare's connect, MPA exchange and
// the server's work to accept it met the connection's first message and
// its answer on both ends, on a machine whose cores they share (on two
// shared cores, BenchmarkDialDup's dial and echo took 115-120 µs with
// the spare dialed at once, 91 µs with it dialed after the echo). A dial
// that finds a held spare the oldest starts it at once (takeSpare).
type spareGate struct {
	s      *sharedIA
	spares []*spare
	timer  *time.Timer
}

// spareWait bounds how long a spareGate holds its spares back.
const spareWait = time.Millisecond

// testSpareWait replaces spareWait in tests that must not see the timer
// open a gate; nil outside them.
var testSpareWait atomic.Pointer[time.Duration]

// open starts the gate's spares' dials, those not started yet.
func (g *spareGate) open() {
	g.timer.Stop()
	g.kick()
}

// kick starts the dials of the gate's spares not started yet (the timer's
// part of open).
func (g *spareGate) kick() {
	for _, sp := range g.spares {
		g.s.kickSpare(sp)
	}
}

// openSpares opens the gate of the spares held back for c, if any.
func (c *Conn) openSpares() {
	if c.spareGate.Load() != nil {
		if g := c.spareGate.Swap(nil); g != nil {
			g.open()
		}
	}
}

// kickSpare starts sp's dial unless it was started already, or dropped.
func (s *sharedIA) kickSpare(sp *spare) {
	if sp.started.CompareAndSwap(false, true) {
		go s.dialSpare(sp)
	}
}

// spareGrace is how long closing a template waits at least for a spare's
// dial in progress to finish before it aborts it, and maxSpareGrace how
// long at most: see spareGraceFor.
const (
	spareGrace    = 100 * time.Millisecond
	maxSpareGrace = time.Second
)

// spareGraceFor is how long closing tmpl waits for its spares' dials in
// progress: spareGrace, or three times what tmpl's own dial took where
// that is longer. A spare's dial takes about as long as its template's,
// and on a slow fabric (a software device in a loaded machine takes
// hundreds of milliseconds) a fixed grace cut off spares about to come
// up, which their server then saw reset.
func spareGraceFor(tmpl *Conn) time.Duration {
	return min(max(spareGrace, 3*tmpl.setupTook), maxSpareGrace)
}

// spareTimeout bounds a spare's dial: a dial waiting for the spare gives
// up on it after that at the latest and dials itself.
const spareTimeout = 5 * time.Second

// spareable reports whether a dial with configuration d may use spares:
// one whose socket hooks or local address would make its connection
// differ from a spare's does not.
func spareable(d *Dialer) bool {
	return d.Control == nil && d.ControlContext == nil && d.LocalAddr == nil &&
		testHelloHook.Load() == nil && testLegacy.Load() == nil
}

// sameSetup reports whether connections dialed with a and b are alike:
// the options that shape a connection once it is up are equal.
func sameSetup(a, b *Dialer) bool {
	return a.BufferSize == b.BufferSize && a.Poll == b.Poll && a.Logger == b.Logger &&
		a.KeepAlive == b.KeepAlive && a.KeepAliveConfig == b.KeepAliveConfig
}

// spareDepth is how many spares a peer gets at most: the next dial's
// and the one after. With only one, a program that dups in a loop waits
// for most of a dial each time, as the spare is dialed while the previous
// connection is used and closed.
const spareDepth = 2

// takeSpare returns the oldest spare dialed from tmpl for remote with a
// setup like d's, waiting for it while it is being dialed (until ctx
// ends), or nil if there is none that came up.
func (s *sharedIA) takeSpare(ctx context.Context, remote string, tmpl *Conn, d *Dialer) *Conn {
	if !spareable(d) {
		return nil
	}
	for {
		s.mu.Lock()
		var sp *spare
		if sps := s.spares[remote]; len(sps) > 0 {
			sp = sps[0]
		}
		s.mu.Unlock()
		if sp == nil || sp.tmpl != tmpl || !sameSetup(&sp.cfg, d) {
			return nil
		}
		s.kickSpare(sp) // held back (spareGate): wanted now
		select {
		case <-sp.done:
		case <-ctx.Done():
			return nil
		}
		s.mu.Lock()
		// Gone if another dial took it or its template closed.
		ours := s.removeSpareLocked(remote, sp)
		c := sp.c
		sp.c = nil
		s.mu.Unlock()
		switch {
		case !ours || c == nil:
			continue // taken, or its dial failed: the next one, if any
		case c.stale():
			c.Close()
			continue
		}
		// c keeps the configuration it was dialed with (Dup dials with
		// it), which has d's setup.
		return c
	}
}

// removeSpareLocked takes sp off remote's spares; false if it is not
// there. Callers hold s.mu.
func (s *sharedIA) removeSpareLocked(remote string, sp *spare) bool {
	sps := s.spares[remote]
	i := slices.Index(sps, sp)
	if i < 0 {
		return false
	}
	sps = slices.Delete(sps, i, i+1)
	if len(sps) == 0 {
		delete(s.spares, remote)
	} else {
		s.spares[remote] = sps
	}
	return true
}

// startSpare lists spares for remote (at ap) from tmpl, with
// configuration d, until spareDepth of them are there or being dialed,
// and holds their dials back until after has had its first exchange (see
// spareGate). after is the connection the dial asking for them returns.
func (s *sharedIA) startSpare(remote string, ap netip.AddrPort, tmpl *Conn, d *Dialer, after *Conn) {
	if !spareable(d) {
		return
	}
	var held []*spare
	s.mu.Lock()
	for !tmpl.sparesOff && len(s.spares[remote]) < spareDepth {
		if sps := s.spares[remote]; len(sps) > 0 && (sps[0].tmpl != tmpl || !sameSetup(&sps[0].cfg, d)) {
			break // another template's or setup's: they stay until taken or dropped
		}
		ctx, cancel := context.WithTimeout(context.Background(), spareTimeout)
		sp := &spare{tmpl: tmpl, cfg: *d, remote: remote, ap: ap, ctx: ctx,
			done: make(chan struct{}), exited: make(chan struct{}), cancel: cancel}
		s.spares[remote] = append(s.spares[remote], sp)
		s.hold()
		held = append(held, sp)
	}
	s.mu.Unlock()
	if len(held) == 0 {
		return
	}
	wait := spareWait
	if w := testSpareWait.Load(); w != nil {
		wait = *w
	}
	g := &spareGate{s: s, spares: held}
	g.timer = time.AfterFunc(wait, g.kick)
	after.spareGate.Store(g)
}

// dialSpare is the goroutine that dials sp.
func (s *sharedIA) dialSpare(sp *spare) {
	defer close(sp.exited)
	defer s.release()
	defer sp.cancel()
	remote := sp.remote
	c, err := sp.cfg.dialAddr(sp.ctx, sp.ap, nil, sp.tmpl, true)
	s.mu.Lock()
	kept := err == nil && slices.Contains(s.spares[remote], sp)
	if kept {
		sp.c = c
	}
	if err != nil {
		// Nothing to take. A server that is full, or gone, would
		// refuse every spare alike: dialing more would only double the
		// attempts.
		s.removeSpareLocked(remote, sp)
		sp.tmpl.sparesOff = true
	}
	close(sp.done)
	s.mu.Unlock()
	if err == nil && !kept {
		c.Close()
	}
}

// dropSpare closes the spares for remote dialed from tmpl, which is
// closing, and waits until their goroutines have ended. No spare is
// dialed from tmpl after it.
func (s *sharedIA) dropSpare(remote string, tmpl *Conn) {
	s.mu.Lock()
	tmpl.sparesOff = true
	var drop []*spare
	for _, sp := range s.spares[remote] {
		if sp.tmpl == tmpl {
			drop = append(drop, sp)
		}
	}
	var conns []*Conn
	for _, sp := range drop {
		s.removeSpareLocked(remote, sp)
		if sp.c != nil {
			conns = append(conns, sp.c)
			sp.c = nil
		}
	}
	s.mu.Unlock()
	for _, sp := range drop {
		if sp.started.CompareAndSwap(false, true) {
			// Held back and never dialed: nothing to wait for.
			sp.cancel()
			close(sp.done)
			close(sp.exited)
			s.release()
		}
	}
	grace := spareGraceFor(tmpl)
	for _, sp := range drop {
		// A spare's dial about to finish is let finish, and the spare
		// closed as any connection: cut off in its handshake, it would
		// be reset, which a server logs as a failure.
		t := time.NewTimer(grace)
		select {
		case <-sp.done:
		case <-t.C:
		}
		t.Stop()
		sp.cancel()
		<-sp.exited
	}
	for _, c := range conns {
		c.Close()
	}
}

// stale applies what the peer sent to an unused spare, which nobody
// polls, and reports whether the peer has finished with it (a server's
// idle timeout, a server that went away) or it failed: a dial must not
// return a connection that is over.
func (c *Conn) stale() bool {
	c.pollQueued()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closedLocked() || c.err != nil || c.rFIN
}
