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
// and the data path's queues. A QP gets a new connection per
// Connect/Accept; Reset drops the old one.
//
// Two goroutines run per connection: the receiver (readLoop), which parses
// FPDUs and places payload straight into registered memory, and the sender
// (sendLoop), the only writer of the socket. Everything they share is
// guarded by the QP's mutex (irdUsed is atomic); completions are queued to the QP's event
// queue under that mutex, so their order is the order of the work queues.
// The receiver also tears the connection down when it ends (finish).
type connection struct {
	q    *QP
	tc   *net.TCPConn
	info ConnInfo

	// Fixed at start from the QP configuration.
	pd       *PD
	srq      *SRQ
	crc      bool
	mulpdu   int // largest ULPDU_Length this side sends
	maxSend  int // send-queue depth
	maxSGE   int // SGEs per Send/Write
	termWait time.Duration

	// canSend is closed once the startup rule allows this side to send
	// FPDUs: at once for the initiator, and for the responder when the
	// initiator's first complete FPDU has arrived (RFC 5044 §7.1.2; siw
	// fails a stream whose Reply is followed by data it did not expect
	// yet). gate mirrors it under the QP lock for the sender.
	canSend     chan struct{}
	canSendOnce sync.Once

	kick       chan struct{} // wakes the sender (capacity 1)
	senderDone chan struct{} // closed when the sender goroutine exits
	drained    chan struct{} // closed by the sender after a graceful drain (FIN sent)
	closed     chan struct{} // closed when teardown finished (socket closed, queues flushed)

	tx *sender // the write side's state, used by the writer-token holder

	// irdUsed counts the peer's Read Requests accepted and not answered
	// yet, against the negotiated IRD. The receiver increments it (and
	// alone checks it); the writer decrements it when it frames the last
	// FPDU of a Response, which precedes the write of that FPDU, so a
	// peer that waits for a Response before its next Request never
	// exceeds the IRD because of timing.
	irdUsed atomic.Int32

	// Guarded by q.mu.
	writing  bool // the writer token is taken (see sendLoop)
	gate     bool
	local    bool  // this side tore the connection down: no Disconnected event
	dead     bool  // the connection is ending: the sender stops
	failed   bool  // err is set
	err      error // why it ended (nil: orderly close by the peer)
	term     []byte
	draining bool
	sq       ring[*sendWR] // posted, not yet completed, in post order
	queued   int           // WRs at the back of sq not started yet
	reads    ring[*sendWR] // Reads whose Request went out, oldest first
	rresp    ring[readResp]
	free     []*sendWR
}

// readResp is an inbound RDMA Read Request, validated and waiting for the
// sender to answer it with a Read Response.
type readResp struct {
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
}

func newConnection(tc *net.TCPConn, info ConnInfo) *connection {
	info.Local, info.Remote = tc.LocalAddr(), tc.RemoteAddr()
	c := &connection{
		tc:         tc,
		info:       info,
		crc:        info.CRC,
		canSend:    make(chan struct{}),
		kick:       make(chan struct{}, 1),
		senderDone: make(chan struct{}),
		drained:    make(chan struct{}),
		closed:     make(chan struct{}),
	}
	if info.Initiator {
		close(c.canSend)
		c.gate = true
	}
	return c
}

// start binds c to q and launches its goroutines. Called with q.mu held,
// once, when the QP becomes connected.
func (c *connection) start(q *QP) {
	c.q = q
	c.pd, _ = q.cfg.PD.(*PD)
	c.srq, _ = q.cfg.SRQ.(*SRQ)
	c.maxSend = q.cfg.MaxSendWR
	c.maxSGE = q.cfg.MaxSendSGE
	c.mulpdu = q.ia.opts.mulpdu
	if c.mulpdu == 0 {
		c.mulpdu = autoMULPDU(c.tc)
	}
	c.termWait = q.ia.opts.closeTimeout
	c.tx = newSender(c)
	go c.readLoop()
	go c.sendLoop()
}

// fromHandler reports whether the caller is a handler running inline on
// one of this connection's goroutines (see eventQueue.deliver), which must
// not wait for the teardown those goroutines do.
func (c *connection) fromHandler() bool { return c.q.events.inHandler() }

// wake nudges the sender.
func (c *connection) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// openGate records that the initiator's first complete FPDU arrived.
func (c *connection) openGate() {
	c.canSendOnce.Do(func() {
		if c.info.Initiator {
			return
		}
		c.q.mu.Lock()
		c.gate = true
		c.q.mu.Unlock()
		close(c.canSend)
		c.wake()
	})
}

// fail ends the connection because of err (the first cause wins). term,
// if not nil, is a Terminate FPDU the sender writes before it stops.
// Called with q.mu held.
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
	c.wake()
}

// abort resets the stream. It is safe at any time and idempotent; it also
// cuts short a graceful shutdown that is waiting for the peer.
func (c *connection) abort() {
	_ = c.tc.SetLinger(0)
	_ = c.tc.Close()
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

// completeDone posts the completions of the finished WRs at the front of
// the send queue, in post order. Called with q.mu held.
func (c *connection) completeDone() { c.popDone(false) }

// completeDoneInline is completeDone for a caller that delivers the events
// itself (eventQueue.deliver) after releasing q.mu, or wakes the sender
// goroutine to do so when it reports orphans.
func (c *connection) completeDoneInline() (orphans bool) { return c.popDone(true) }

func (c *connection) popDone(inline bool) (orphans bool) {
	for c.sq.len() > c.queued && (*c.sq.front()).state == wrDone {
		w := c.sq.pop()
		if inline {
			if c.q.events.queue(event{c: w.completion()}) {
				orphans = true
			}
		} else {
			c.q.events.complete(w.completion())
		}
		*w = sendWR{}
		c.free = append(c.free, w)
	}
	return orphans
}

// finish tears the connection down once the receiver has stopped, for
// whatever reason (reason is the receiver's verdict: nil for the peer's
// orderly close). It stops the sender (after it wrote a pending Terminate,
// bounded by close_timeout), flushes every outstanding work request in post
// order, reports Disconnected unless this side asked for the teardown,
// and closes the socket.
func (c *connection) finish(rx *receiver, reason error) {
	q := c.q
	q.mu.Lock()
	if !c.failed {
		c.failed, c.err = true, reason
	}
	c.dead = true
	term := c.term != nil
	q.mu.Unlock()
	c.wake()

	if term {
		// Give the sender time to put the Terminate on the wire (it may
		// be in the middle of a write the peer does not read).
		t := time.NewTimer(c.termWait)
		select {
		case <-c.senderDone:
		case <-t.C:
			c.abort()
		}
		t.Stop()
	} else {
		_ = c.tc.Close()
	}
	<-c.senderDone

	q.mu.Lock()
	// Receives: the one in progress is the oldest.
	if rx.haveRecv {
		rx.completeRecvLocked(driver.StatusFlushed, 0, false, false)
	}
	if c.srq == nil {
		for q.rq.len() > 0 {
			q.events.flushRecv(q.rq.pop().cookie)
		}
	}
	// Send queue: anything not completed yet flushes, in order; a WR that
	// failed keeps its error status.
	for c.sq.len() > 0 {
		w := c.sq.pop()
		if w.state != wrDone || w.status == driver.StatusSuccess {
			w.status = driver.StatusFlushed
		}
		q.events.complete(w.completion())
	}
	c.queued = 0
	c.reads.clear()
	c.rresp.clear()
	for q.late.len() > 0 {
		q.events.complete(q.late.pop())
	}
	if q.conn == c {
		q.flushed = true
		if !c.local && q.state == qpConnected {
			q.state = qpDisconnected
			q.events.disconnected(c.err)
		}
	}
	q.mu.Unlock()

	if term {
		// Let the Terminate reach the peer: send FIN and read until its
		// close (briefly), since closing with unread input would make the
		// kernel send a reset that can overtake the Terminate.
		_ = c.tc.CloseWrite()
		_ = c.tc.SetReadDeadline(time.Now().Add(min(c.termWait, time.Second)))
		_, _ = io.Copy(io.Discard, c.tc)
	}
	_ = c.tc.Close()
	close(c.closed)
}

// lostError turns a socket error of the receiver into the Disconnected
// argument.
func lostError(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("iwarp: connection broken: %w", err)
}
