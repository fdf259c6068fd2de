package iwarp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// qpState is the provider-side life cycle of a QP. Package dat keeps the
// full DAT EP state machine; these states only say what the QP's socket is
// doing.
type qpState int

const (
	qpIdle         qpState = iota // unconnected: Connect/Accept allowed
	qpConnecting                  // Connect or Request.Accept in progress
	qpConnected                   // MPA done, socket owned by the QP
	qpDisconnected                // connection gone or attempt failed; Reset to reuse
	qpClosed                      // destroyed
)

func (s qpState) String() string {
	switch s {
	case qpIdle:
		return "unconnected"
	case qpConnecting:
		return "connecting"
	case qpConnected:
		return "connected"
	case qpDisconnected:
		return "disconnected"
	case qpClosed:
		return "closed"
	}
	return fmt.Sprintf("qpState(%d)", int(s))
}

// QP is a reliable-connected queue pair over one TCP connection at a time.
// It implements driver.QP.
type QP struct {
	ia     *IA
	events *eventQueue

	mu      sync.Mutex
	cfg     driver.QPConfig
	state   qpState
	attempt *attempt    // the establishment in progress (qpConnecting)
	conn    *connection // current or last connection; nil when idle
	rq      ring[recvWR]
	// late holds the flushed completions of send-side WRs posted after a
	// teardown began and before it flushed the send queue; they complete
	// right after it, keeping post order.
	late ring[driver.Completion]
	// flushed is false from establishment until the connection's teardown
	// has flushed its queues: meanwhile work posted to a disconnected QP
	// is queued behind the work being flushed; afterwards it completes
	// flushed at once.
	flushed bool
}

var _ driver.QP = (*QP)(nil)

// attempt is one Connect or Request.Accept in progress. Disconnect and
// Close cancel it through abort and wait for done.
type attempt struct {
	abort context.CancelCauseFunc
	done  chan struct{}
}

func newQP(ia *IA, cfg driver.QPConfig, h driver.QPHandler) *QP {
	return &QP{ia: ia, events: newEventQueue(h), cfg: cfg, flushed: true}
}

// Modify replaces the configuration of a QP that is not connected or
// connecting (the project modifies QPs only before connecting).
func (q *QP) Modify(cfg driver.QPConfig) error {
	if err := q.ia.checkQPConfig(cfg); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpIdle && q.state != qpDisconnected {
		return errInvalidState("modify", q.state)
	}
	q.cfg = cfg
	return nil
}

// beginAttempt moves an idle QP to connecting. The returned context is
// ctx, additionally cancelled (with cause ErrAborted) by Disconnect/Close.
func (q *QP) beginAttempt(ctx context.Context, op string) (context.Context, *attempt, driver.QPConfig, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpIdle {
		return nil, nil, driver.QPConfig{}, errInvalidState(op, q.state)
	}
	actx, cancel := context.WithCancelCause(ctx)
	a := &attempt{abort: cancel, done: make(chan struct{})}
	q.attempt = a
	q.state = qpConnecting
	return actx, a, q.cfg, nil
}

// finishAttempt ends an attempt: on success (c != nil, err == nil) the QP
// takes the connection and starts its data path; on failure it becomes
// disconnected and its receives are flushed. If a local Disconnect/Close
// overtook the attempt, c is reset and ErrAborted returned.
func (q *QP) finishAttempt(a *attempt, c *connection, err error) error {
	defer close(a.done)
	defer a.abort(context.Canceled) // release the context's resources
	q.mu.Lock()
	if q.attempt != a {
		q.mu.Unlock()
		if c != nil {
			c.abort()
		}
		if err == nil {
			err = ErrAborted
		}
		return err
	}
	q.attempt = nil
	if err != nil {
		q.state = qpDisconnected
		q.flushRecvsLocked()
		q.mu.Unlock()
		return err
	}
	q.state = qpConnected
	q.conn = c
	q.flushed = false
	c.start(q)
	q.mu.Unlock()
	return nil
}

// Disconnect tears the connection down or aborts an establishment in
// progress. The handler gets no Disconnected call for it. Disconnecting a
// disconnected QP is a no-op (an abrupt call hurries a graceful one still
// waiting for the peer).
//
// Graceful: the send side drains first (queued Sends and Writes are handed
// to TCP, outstanding Reads get their Responses, the peer's Read Requests
// are answered; bounded by close_timeout), then FIN is sent (TCP half-close
// is iWARP's orderly teardown, RFC 5044 §7.2) and the peer's FIN awaited
// (close_timeout again); receives keep landing meanwhile. Abrupt: the
// stream is reset at once. Either way everything still outstanding then
// completes flushed, in post order, before Disconnect returns.
func (q *QP) Disconnect(graceful bool) error {
	q.mu.Lock()
	switch q.state {
	case qpConnecting:
		a := q.attempt
		q.attempt = nil
		q.state = qpDisconnected
		q.flushRecvsLocked()
		q.mu.Unlock()
		a.abort(ErrAborted)
		<-a.done
		return nil
	case qpConnected:
		c := q.conn
		c.local = true
		q.state = qpDisconnected
		if graceful {
			c.draining = true
		}
		q.mu.Unlock()
		if c.fromHandler() {
			// Called by a handler running on one of the connection's
			// goroutines, which the teardown needs: let it run on.
			go c.shutdown(graceful, q.ia.opts.closeTimeout)
			return nil
		}
		c.shutdown(graceful, q.ia.opts.closeTimeout)
		return nil
	case qpDisconnected:
		c := q.conn
		local := c != nil && c.local
		q.mu.Unlock()
		if local {
			if !graceful {
				c.abort()
			}
			if !c.fromHandler() {
				<-c.closed
			}
		}
		return nil
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("disconnect", s)
	}
}

// shutdown ends the connection after a local Disconnect and returns when
// its teardown is complete (see QP.Disconnect).
func (c *connection) shutdown(graceful bool, timeout time.Duration) {
	c.wake()
	if graceful {
		t := time.NewTimer(timeout)
		select {
		case <-c.drained:
			// FIN sent; wait for the peer's.
			t.Reset(timeout)
			select {
			case <-c.closed:
			case <-t.C:
			}
		case <-c.closed:
		case <-t.C:
		}
		t.Stop()
	}
	c.abort()
	<-c.closed
}

// Reset returns a disconnected QP to the unconnected state, dropping the
// old connection's remains. Resetting an unconnected QP is a no-op.
func (q *QP) Reset() error {
	q.mu.Lock()
	switch q.state {
	case qpIdle:
		q.mu.Unlock()
		return nil
	case qpDisconnected:
		if c := q.conn; c != nil {
			// The teardown may still be flushing (it is quick).
			q.mu.Unlock()
			select {
			case <-c.closed:
			default:
				if c.fromHandler() {
					return fmt.Errorf("iwarp: reset: the connection's teardown is still running (reset called from a completion handler): %w", driver.ErrNotConnected)
				}
				<-c.closed
			}
			q.mu.Lock()
			if q.state != qpDisconnected || q.conn != c {
				s := q.state
				q.mu.Unlock()
				return errInvalidState("reset", s)
			}
		}
		q.conn = nil
		q.state = qpIdle
		q.mu.Unlock()
		return nil
	}
	s := q.state
	q.mu.Unlock()
	return errInvalidState("reset", s)
}

// Close destroys the QP: an establishment in progress is aborted, a
// connection reset, everything posted is flushed. It is idempotent.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.state == qpClosed {
		q.mu.Unlock()
		return nil
	}
	prev := q.state
	q.state = qpClosed
	a := q.attempt
	q.attempt = nil
	c := q.conn
	if c != nil && prev == qpConnected {
		c.local = true
	}
	if c == nil || q.flushed {
		q.flushRecvsLocked()
	}
	q.mu.Unlock()

	if a != nil {
		a.abort(ErrAborted)
		<-a.done
	}
	if c != nil {
		// Abrupt in every case: a graceful Disconnect still waiting for
		// the peer is cut short, a peer-closed socket is already closed.
		// The teardown flushes what is still posted. A handler on the
		// receiver goroutine closing its own QP cannot wait for it.
		c.abort()
		if !c.fromHandler() {
			<-c.closed
		}
	}
	q.ia.forgetQP(q)
	return nil
}

// Addrs reports the TCP endpoints of the QP's connection (nil before the
// first connection and after Reset).
func (q *QP) Addrs() (local, remote net.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return nil, nil
	}
	return q.conn.info.Local, q.conn.info.Remote
}

// ConnInfo reports what the MPA exchange of the QP's connection negotiated;
// ok is false when the QP has no connection (never connected, or Reset).
func (q *QP) ConnInfo() (info ConnInfo, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return ConnInfo{}, false
	}
	return q.conn.info, true
}

// canSend returns the startup gate of the current connection (see
// connection.canSend), or nil when there is none.
func (q *QP) canSend() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return nil
	}
	return q.conn.canSend
}

// PostRecv queues a receive. Receives may be posted before the connection
// exists (iWARP has no RNR retry, so they must be); on a disconnected QP
// they complete flushed, in order behind anything still being flushed.
func (q *QP) PostRecv(wr driver.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.state == qpClosed:
		return fmt.Errorf("iwarp: post recv: %w", net.ErrClosed)
	case q.cfg.SRQ != nil:
		return fmt.Errorf("iwarp: post recv: QP receives from an SRQ: %w", driver.ErrNotSupported)
	case len(wr.Local) > q.cfg.MaxRecvSGE:
		return fmt.Errorf("iwarp: post recv: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxRecvSGE, driver.ErrResources)
	case q.state == qpDisconnected && q.flushed:
		q.events.flushRecv(wr.Cookie)
		return nil
	case q.rq.len() >= q.cfg.MaxRecvWR:
		return fmt.Errorf("iwarp: post recv: %d receives posted: %w", q.rq.len(), driver.ErrQueueFull)
	}
	q.rq.push(newRecvWR(wr))
	return nil
}

// PostSend posts a Send, RDMA Write or RDMA Read. The local segments are
// resolved against the QP's PD now (an unknown LKey or a segment outside
// its region is refused with an error, and no completion follows); the
// request then completes exactly once, in post order: a Send or Write when
// its last byte has been handed to TCP (as siw does: TCP delivers it or
// the connection fails), a Read when its whole Response has been placed.
// On a disconnected QP the request completes flushed.
//
// PostSend never waits for the network. When the QP has no other
// send-side work outstanding and the request is small (at most 2 KiB, or
// 64 KiB when posted from a completion handler), it frames it and makes
// one non-blocking writev itself, saving the hand-off to the sender
// goroutine; whatever the socket does not take at once is left to that
// goroutine, which otherwise does all the writing, batching queued
// requests into one writev.
func (q *QP) PostSend(wr driver.SendWR) error {
	var w sendWR
	q.mu.Lock()
	switch q.state {
	case qpConnected:
	case qpDisconnected:
		c := driver.Completion{Cookie: wr.Cookie, Op: wr.Op, Status: driver.StatusFlushed, Signaled: true}
		if q.flushed {
			q.events.complete(c)
		} else {
			q.late.push(c)
		}
		q.mu.Unlock()
		return nil
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("post send", s)
	}
	c := q.conn
	if c.maxSend <= 0 || c.sq.len() >= c.maxSend {
		n := c.sq.len()
		q.mu.Unlock()
		return fmt.Errorf("iwarp: post send: %d requests outstanding: %w", n, driver.ErrQueueFull)
	}
	if wr.Op == driver.OpRDMARead && c.info.ORD == 0 {
		q.mu.Unlock()
		return fmt.Errorf("iwarp: post RDMA read: the connection's ORD is 0 (the peer accepts no Reads): %w", driver.ErrResources)
	}
	pd, _ := q.cfg.PD.(*PD)
	if err := w.resolve(pd, wr, c.maxSGE); err != nil {
		q.mu.Unlock()
		return fmt.Errorf("iwarp: post send: %w", err)
	}
	p := c.getWR()
	*p = w
	p.state = wrQueued
	c.sq.push(p)
	c.queued++
	// Inline only when this is the QP's only outstanding send-side work
	// and the request is small, or is posted by a handler that a provider
	// goroutine runs (a request/response server: nothing would be
	// batched with it). Larger requests from consumers go to the sender
	// goroutine, which batches whatever is queued into one writev.
	inline := !c.writing && c.gate && !c.dead && c.sq.len() == 1 &&
		(w.total <= inlineSmall || w.total <= inlineMax && q.events.inline.Load() != 0)
	if !inline {
		q.mu.Unlock()
		c.wake()
		return nil
	}
	// Inline: take the writer token and the batch in this critical
	// section, write without the lock, complete in one more.
	c.writing = true
	st := c.tx.pickLocked(false)
	q.mu.Unlock()
	if st == stepProgress {
		st = c.tx.send(false)
	}
	q.mu.Lock()
	orphans := false
	if st == stepProgress {
		// Handlers never run in the poster's goroutine: the completions
		// are queued, for a running delivery (a handler posting) or else
		// the sender goroutine.
		orphans = c.tx.finishLocked(true)
	}
	c.writing = false // after a failure the sender goroutine finds c.dead and stops
	more := orphans || st != stepProgress || c.queued > 0 || c.rresp.len() > 0 || c.dead || c.draining
	q.mu.Unlock()
	if more {
		c.wake()
	}
	return nil
}

// flushRecvsLocked completes every queued receive flushed. Called with
// q.mu held.
func (q *QP) flushRecvsLocked() {
	for q.rq.len() > 0 {
		q.events.flushRecv(q.rq.pop().cookie)
	}
}
