package iwarp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// connection is one established MPA connection owned by a QP: the TCP
// stream after the Request/Reply exchange, what the exchange negotiated,
// and the data path's queues. A QP has at most one connection in its life
// (package dat creates a new QP to connect again).
//
// An idle connection costs one goroutine, the receiver (readLoop), which
// parses FPDUs, places payload straight into registered memory, and tears
// the connection down when the stream ends (finish); it may be started
// only once the connection is up and nobody waits on it (rxrole.go). The socket's write
// side belongs to whoever holds the writer token (writing): a PostSend
// caller writing its request inline with one non-blocking writev, a
// sender goroutine (sendLoop) that exists only while there is work the
// inline path could not finish, or, at the end, the teardown. Everything
// they share is guarded by the QP's mutex (irdUsed is atomic). Completions
// go straight into the QP's CQs from where the work finished.
type connection struct {
	q    *QP
	tc   *net.TCPConn
	info ConnInfo

	// Fixed at start from the QP configuration.
	pd       *PD
	srq      *SRQ
	srqHeld  *atomic.Int32 // SRQ receives the QP holds (see takeRecv); nil: no limit
	srqLimit int32
	scq, rcq *CQ // nil: nothing completes there
	tag      uint32
	crc      bool
	mulpdu   int // largest ULPDU_Length this side sends; 0: from the MSS (see sender.segments)
	maxSend  int // send-queue depth
	maxSGE   int // SGEs per Send/Write
	termWait time.Duration

	// canSend is closed once the startup rule allows this side to send
	// FPDUs: at once for the initiator, and for the responder when the
	// initiator's first complete FPDU has arrived (RFC 5044 §7.1.2; siw
	// fails a stream whose Reply is followed by data it did not expect
	// yet). gate mirrors it under the QP lock for the writers.
	canSend     chan struct{}
	canSendOnce sync.Once

	drained  chan struct{} // closed by the sender after a graceful drain (FIN sent)
	quiesced chan struct{} // closed once nothing touches posted memory or completes any more
	closed   chan struct{} // closed when the receiver goroutine is done (socket closed)

	// senders counts sender goroutines; the teardown waits for them.
	// Add happens under q.mu while the connection is not dead, Wait after
	// dead is set, so they never race.
	senders sync.WaitGroup
	// idle is signalled (with q.mu) when the writer token is released
	// or the write side finished after FIN, for the teardown waiting to
	// take it.
	idle sync.Cond

	tx *sender // the write side's state, used by the writer-token holder
	// rx is the read side's state, used by the holder of the receive
	// role: the receive goroutine, or a waiter on the receive CQ
	// (rxrole.go).
	rx  *receiver
	rxc rxCtl
	// sendLoopFn is c.sendLoop, bound once: a go statement calling the
	// method allocates a closure for its receiver every time, one
	// calling a func value without arguments does not.
	sendLoopFn func()

	// Race-detector clocks of the stream's two directions (race_on.go;
	// nil in normal builds).
	raceTx, raceRx *byte
	raceForget     func()

	// irdUsed counts the peer's Read Requests accepted and not answered
	// yet, against the negotiated IRD. The receiver increments it (and
	// alone checks it); the writer decrements it when it frames the last
	// FPDU of a Response, which precedes the write of that FPDU, so a
	// peer that waits for a Response before its next Request never
	// exceeds the IRD because of timing.
	irdUsed atomic.Int32

	// Guarded by q.mu.
	writing  bool // the writer token is taken
	finSent  bool // the graceful drain sent FIN: nothing is written any more
	gate     bool
	local    bool  // a local Disconnect/Close ended the connection: no OnDisconnect
	dead     bool  // the connection is ending: writers stop
	failed   bool  // err is set
	err      error // why it ended (nil: orderly close by the peer)
	notify   bool  // the teardown calls OnDisconnect (set before quiesced closes)
	term     []byte
	draining bool
	pending  ring[*sendWR] // posted, not started yet, in post order
	reads    ring[*sendWR] // Reads whose Request is out, oldest first
	rresp    ring[readResp]
	// outstanding counts posted send-side WRs not finished (MaxSendWR).
	outstanding int
	free        []*sendWR
}

// readResp is an inbound RDMA Read Request, validated and waiting for a
// writer to answer it with a Read Response.
type readResp struct {
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
}

func newConnection(tc *net.TCPConn, info ConnInfo) *connection {
	info.Local, info.Remote = tc.LocalAddr(), tc.RemoteAddr()
	c := &connection{
		tc:       tc,
		info:     info,
		crc:      info.CRC,
		canSend:  make(chan struct{}),
		drained:  make(chan struct{}),
		quiesced: make(chan struct{}),
		closed:   make(chan struct{}),
	}
	if info.Initiator {
		close(c.canSend)
		c.gate = true
	}
	return c
}

// start binds c to q and readies its receiver: it launches the receive
// goroutine, or leaves the role parked for the first waiter (see
// rxStartParked) and reports true, and then the caller puts c on the
// sweep list once q.mu is released. Called with q.mu held, once, when the
// QP becomes connected.
func (c *connection) start(q *QP) (parked bool) {
	c.q = q
	c.idle.L = &q.mu
	c.pd, _ = q.cfg.PD.(*PD)
	c.srq, _ = q.cfg.SRQ.(*SRQ)
	c.srqHeld, c.srqLimit = q.cfg.SRQHeld, int32(min(q.cfg.MaxRecvWR, 1<<30))
	c.scq, c.rcq, c.tag = q.scq, q.rcq, q.cfg.Tag
	c.maxSend = q.cfg.MaxSendWR
	c.maxSGE = q.cfg.MaxSendSGE
	c.mulpdu = q.ia.opts.mulpdu // 0 (auto): the sender asks the socket when it matters
	c.termWait = q.ia.opts.closeTimeout
	c.tx = newSender(c)
	c.sendLoopFn = c.sendLoop
	c.raceTx, c.raceRx, c.raceForget = raceClocks(c.info.Local, c.info.Remote)
	c.rx = newReceiver(c)
	c.rxc.back = make(chan struct{}, 1)
	q.ia.conns.Add(1) // until the receive goroutine, started now or later, ends
	// Parked before a waiter can find the connection on its CQ (attach),
	// so that the first one takes the role rather than asking a receive
	// goroutine that does not run for it.
	c.rxc.parkAtStart()
	if c.rcq != nil && c.rcq.attach(c) && c.rx.idle != nil {
		return true
	}
	c.rxc.startNow() // not attached alone: no waiter will take the role
	go c.readLoop(false)
	return false
}

// openGate records that the initiator's first complete FPDU arrived.
func (c *connection) openGate() {
	c.canSendOnce.Do(func() {
		if c.info.Initiator {
			return
		}
		c.q.mu.Lock()
		c.gate = true
		c.kickLocked()
		c.q.mu.Unlock()
		close(c.canSend)
	})
}

// startableLocked reports whether the oldest queued WR may start now:
// a fenced one waits for every earlier Read, a Read for a free ORD slot.
func (c *connection) startableLocked() bool {
	if c.pending.len() == 0 {
		return false
	}
	w := *c.pending.front()
	if w.flags&driver.SendFence != 0 && c.reads.len() > 0 {
		return false
	}
	return w.op != driver.OpRDMARead || c.reads.len() < c.info.ORD
}

// drainedLocked reports whether a graceful drain has nothing left to wait
// for: every WR handed to TCP or answered, every peer Read served.
func (c *connection) drainedLocked() bool {
	s := c.tx
	return !s.partial && len(s.items) == 0 && c.pending.len() == 0 && c.reads.len() == 0 && c.rresp.len() == 0
}

// hasWorkLocked reports whether a writer would find something to do.
func (c *connection) hasWorkLocked() bool {
	s := c.tx
	return s.partial || len(s.items) > 0 || (c.gate && (c.rresp.len() > 0 || c.startableLocked())) ||
		(c.draining && !c.finSent && c.drainedLocked())
}

// kickLocked starts a sender goroutine, handing it the writer token, when
// the token is free and there is work: the holder of the token otherwise
// finds the work itself before releasing it. Called with q.mu held.
func (c *connection) kickLocked() {
	if c.writing || c.dead || !c.hasWorkLocked() {
		return
	}
	c.writing = true
	c.senders.Add(1)
	go c.sendLoopFn()
}

// handOffLocked ends a token holder's turn: if work is left the token
// passes to a new sender goroutine, else it is released. Called with q.mu
// held by the inline writer.
func (c *connection) handOffLocked() {
	if !c.dead && c.hasWorkLocked() {
		c.senders.Add(1)
		go c.sendLoopFn()
		return
	}
	c.releaseLocked()
}

// releaseLocked gives the writer token back.
func (c *connection) releaseLocked() {
	c.writing = false
	if c.dead {
		c.idle.Broadcast() // the teardown may be waiting for it
	}
}

// failLocked ends the connection because of err (the first cause wins).
// term, if not nil, is a Terminate FPDU the teardown writes before it
// closes the stream. Called with q.mu held.
func (c *connection) failLocked(err error, term []byte) {
	if !c.failed {
		c.failed, c.err = true, err
		if !c.dead {
			c.term = term
		}
	}
	c.dead = true
}

func (c *connection) fail(err error, term []byte) {
	c.q.mu.Lock()
	c.failLocked(err, term)
	c.q.mu.Unlock()
}

// abort resets the stream. It is safe at any time and idempotent; it also
// cuts short a graceful shutdown that is waiting for the peer.
func (c *connection) abort() {
	_ = c.tc.SetLinger(0)
	_ = c.tc.Close()
	c.wakeRx()
}

// wakeRx gives a parked receive role back to the receive goroutine at
// once, so that a local close or disconnect does not wait for the
// sweeper (rxrole.go) to see the stream end.
func (c *connection) wakeRx() {
	if c.rxc.back != nil {
		c.unpark()
	}
}

// wait returns once the connection is quiescent and, unless the teardown
// is calling OnDisconnect (which may itself call Disconnect or Close of
// the QP: waiting for it could deadlock), once its goroutine is done.
func (c *connection) wait() {
	<-c.quiesced
	if !c.notify {
		<-c.closed
	}
}

// getWR returns a recycled or new sendWR. Called with q.mu held.
func (c *connection) getWR() *sendWR {
	if n := len(c.free); n > 0 {
		w := c.free[n-1]
		c.free = c.free[:n-1]
		return w
	}
	return new(sendWR)
}

// completeSendLocked finishes a send-side WR: its completion goes to the
// send CQ unless it is a successful unsignalled Send or Write (whose
// success the next completion of the QP implies), and the WR is recycled.
// Called with q.mu held.
func (c *connection) completeSendLocked(w *sendWR) {
	if w.op == driver.OpRDMARead || w.status != driver.StatusSuccess || w.flags&driver.SendSignaled != 0 {
		if c.scq != nil {
			c.scq.push(w.completion(c.tag))
		}
	}
	c.outstanding--
	*w = sendWR{}
	c.free = append(c.free, w)
}

// readDoneLocked completes a Read whose Response has been placed (or
// refused), unless the writer has not finished the batch that carried its
// Request yet: the Requests and Writes written before it in that batch
// are with TCP, but not yet completed, and the Read's completion must not
// overtake them (package dat takes a completion as proof that the
// unsignalled requests posted before it succeeded, and frees their
// slots). The writer completes it then. Called with q.mu held.
func (c *connection) readDoneLocked(w *sendWR) {
	if w.sent {
		c.completeSendLocked(w)
		return
	}
	w.answered = true
}

// finish tears the connection down once the receiver has stopped, for
// whatever reason (reason is the receiver's verdict: nil for the peer's
// orderly close). It takes the writer token for good (waiting for the
// writer holding it, whose blocked write the closed socket or the
// Terminate deadline cuts short), writes a pending Terminate, drops every
// unfinished work request (package dat flushes them), and only then
// declares the connection quiescent and, if the peer ended it, calls
// OnDisconnect.
func (c *connection) finish(rx *receiver, reason error) {
	q := c.q
	q.mu.Lock()
	if !c.failed {
		c.failed, c.err = true, reason
	}
	c.dead = true
	term := c.term
	q.mu.Unlock()
	if term != nil {
		// Let a blocked writer finish its FPDU, and then the Terminate,
		// only for so long (the peer may not be reading).
		_ = c.tc.SetWriteDeadline(time.Now().Add(c.termWait))
	} else {
		_ = c.tc.Close()
	}

	q.mu.Lock()
	for c.writing && !c.finSent {
		c.idle.Wait()
	}
	canWrite := !c.writing
	c.writing = true // nobody writes but this goroutine from now on
	q.mu.Unlock()
	c.senders.Wait()

	if term != nil && canWrite {
		// Finish the FPDU a writer was cut in, then the Terminate.
		s := c.tx
		ok := true
		if s.partial {
			ok, _ = s.write(true)
		}
		if ok {
			_, _ = c.tc.Write(term)
		}
	}

	q.mu.Lock()
	c.dropLocked(rx)
	if q.state == qpConnected {
		q.state = qpEnded
	}
	onDisc := q.cfg.OnDisconnect
	c.notify = !c.local && onDisc != nil
	notify, err := c.notify, c.err
	q.mu.Unlock()
	close(c.quiesced)
	if notify {
		onDisc(err)
	}

	if term != nil {
		// Let the Terminate reach the peer: send FIN and read until its
		// close (briefly), since closing with unread input would make the
		// kernel send a reset that can overtake the Terminate.
		_ = c.tc.CloseWrite()
		_ = c.tc.SetReadDeadline(time.Now().Add(min(c.termWait, time.Second)))
		_, _ = io.Copy(io.Discard, c.tc)
	}
	_ = c.tc.Close()
	c.raceForget()
	close(c.closed)
}

// dropLocked forgets every unfinished work request without completing it
// (the driver contract leaves flushing to package dat) and every reference
// to registered memory. A receive taken from an SRQ for a Send that never
// finished goes back to the SRQ instead: it is the SRQ's, not the QP's.
// Called with q.mu held, by the receiver goroutine in its teardown, once
// no writer is left.
func (c *connection) dropLocked(rx *receiver) {
	q := c.q
	if rx.haveRecv && c.srq != nil {
		c.srq.requeue(rx.recv)
		if c.srqHeld != nil {
			c.srqHeld.Add(-1)
		}
	}
	rx.dropRecv()
	rx.rd = nil
	rx.part, rx.partOn = payloadPart{}, false
	if c.srq == nil {
		q.rq.clear()
	}
	s := c.tx
	s.partial = false
	clear(s.bufs)
	s.wbuf = nil
	clear(s.items)
	s.items = s.items[:0]
	c.pending.clear()
	c.reads.clear()
	c.rresp.clear()
	c.outstanding = 0
	c.free = nil
}

// lostError turns a socket error of the receiver into the OnDisconnect
// argument.
func lostError(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("iwarp: connection broken: %w", err)
}
