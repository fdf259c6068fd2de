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
// DAT EP state machine; these states only say what the QP's socket is
// doing. A QP connects at most once: package dat creates a new QP to
// connect an endpoint again.
type qpState int

const (
	qpIdle       qpState = iota // never connected: Connect/Accept allowed
	qpConnecting                // Connect or Request.Accept in progress
	qpConnected                 // MPA done, socket owned by the QP
	qpEnded                     // connection gone or attempt failed
	qpClosed                    // destroyed
)

func (s qpState) String() string {
	switch s {
	case qpIdle:
		return "unconnected"
	case qpConnecting:
		return "connecting"
	case qpConnected:
		return "connected"
	case qpEnded:
		return "disconnected"
	case qpClosed:
		return "closed"
	}
	return fmt.Sprintf("qpState(%d)", int(s))
}

// QP is a reliable-connected queue pair over one TCP connection. It
// implements driver.QP and driver.WindowBinder.
type QP struct {
	ia       *IA
	scq, rcq *CQ // the configuration's CQs, fixed at creation

	mu      sync.Mutex
	cfg     driver.QPConfig
	state   qpState
	attempt *attempt    // the establishment in progress (qpConnecting)
	conn    *connection // the connection, once established
	rq      ring[recvWR]
}

var (
	_ driver.QP           = (*QP)(nil)
	_ driver.WindowBinder = (*QP)(nil)
)

// attempt is one Connect or Request.Accept in progress. Disconnect and
// Close cancel it through abort and wait for done.
type attempt struct {
	abort context.CancelCauseFunc
	done  chan struct{}
}

func newQP(ia *IA, cfg driver.QPConfig) *QP {
	q := &QP{ia: ia, cfg: cfg}
	q.scq, _ = cfg.SendCQ.(*CQ)
	q.rcq, _ = cfg.RecvCQ.(*CQ)
	return q
}

// Modify replaces the configuration of a QP that has never connected.
// The CQs, Tag and OnDisconnect stay those of CreateQP (the driver
// contract), and so do the receives already posted.
func (q *QP) Modify(cfg driver.QPConfig) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	cfg.SendCQ, cfg.RecvCQ, cfg.Tag, cfg.OnDisconnect = q.cfg.SendCQ, q.cfg.RecvCQ, q.cfg.Tag, q.cfg.OnDisconnect
	if err := q.ia.checkQPConfig(cfg); err != nil {
		return err
	}
	if q.state != qpIdle {
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
// takes the connection and starts its receiver; on failure it is over and
// its receives are dropped (package dat flushes them). If a local
// Disconnect/Close overtook the attempt, c is reset and ErrAborted
// returned.
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
		q.state = qpEnded
		q.rq.clear()
		q.mu.Unlock()
		return err
	}
	q.state = qpConnected
	q.conn = c
	parked := c.start(q)
	q.mu.Unlock()
	if parked {
		q.ia.watch(c)
	}
	return nil
}

// Disconnect ends the connection or aborts an establishment in progress.
// OnDisconnect is not called for it. On a QP whose connection already
// ended it only waits for the teardown (an abrupt call hurries a graceful
// one still waiting for the peer).
//
// Graceful: the send side drains first (queued Sends and Writes are handed
// to TCP, outstanding Reads get their Responses, the peer's Read Requests
// are answered; bounded by close_timeout), then FIN is sent (TCP half-close
// is iWARP's orderly teardown, RFC 5044 §7.2) and the peer's FIN awaited
// (close_timeout again); receives keep landing meanwhile. Abrupt: the
// stream is reset at once. Either way Disconnect returns once the QP is
// quiescent: no goroutine of the connection writes into registered memory
// or produces a completion any more. Unfinished work is dropped without a
// completion; package dat flushes it.
func (q *QP) Disconnect(graceful bool) error {
	q.mu.Lock()
	switch q.state {
	case qpConnecting:
		a := q.attempt
		q.attempt = nil
		q.state = qpEnded
		q.rq.clear()
		q.mu.Unlock()
		a.abort(ErrAborted)
		<-a.done
		return nil
	case qpConnected:
		c := q.conn
		c.local = true
		q.state = qpEnded
		if graceful {
			c.draining = true
			c.kickLocked()
		}
		q.mu.Unlock()
		c.shutdown(graceful, q.ia.opts.closeTimeout)
		return nil
	case qpEnded:
		c := q.conn
		local := c != nil && c.local
		q.mu.Unlock()
		if c != nil {
			if local && !graceful {
				c.abort()
			}
			c.wait()
		}
		return nil
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("disconnect", s)
	}
}

// shutdown ends the connection after a local Disconnect and returns when
// it is quiescent (see QP.Disconnect).
func (c *connection) shutdown(graceful bool, timeout time.Duration) {
	c.wakeRx() // the peer's FIN must be read with no waiter too
	if graceful {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-c.drained:
			// FIN sent; wait for the peer's.
			t.Reset(timeout)
			select {
			case <-c.quiesced:
				c.wait() // closed in order, no reset needed
				return
			case <-t.C:
			}
		case <-c.quiesced:
			c.wait()
			return
		case <-t.C:
		}
	}
	c.abort()
	c.wait()
}

// Close destroys the QP: an establishment in progress is aborted, a
// connection reset. It returns once the QP is quiescent and is
// idempotent. Everything still posted is dropped (package dat flushes it).
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
	if c == nil {
		q.rq.clear()
	}
	q.mu.Unlock()

	if a != nil {
		a.abort(ErrAborted)
		<-a.done
	}
	if c != nil {
		// Abrupt in every case: a graceful Disconnect still waiting for
		// the peer is cut short, a peer-closed socket is already closed.
		c.abort()
		c.wait()
	}
	q.ia.forgetQP(q)
	return nil
}

// ConnInfo reports what the MPA exchange of the QP's connection negotiated;
// ok is false when the QP never connected.
func (q *QP) ConnInfo() (info ConnInfo, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return ConnInfo{}, false
	}
	return q.conn.info, true
}

// canSend returns the startup gate of the connection (see
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
// exists (iWARP has no RNR retry, so they must be); once the connection
// has ended they are dropped, and package dat flushes them.
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
	case q.state == qpEnded:
		return nil
	case q.rq.len() >= q.cfg.MaxRecvWR:
		return fmt.Errorf("iwarp: post recv: %d receives posted: %w", q.rq.len(), driver.ErrQueueFull)
	}
	// A consumer posts its receives in a batch when it sets a connection
	// up: size the queue for them at once (up to a bound, so that a
	// large MaxRecvWR costs nothing before it is used), rather than
	// doubling from 8: the doublings were more than a quarter of the
	// bytes an rdmanet dial on loopback allocated.
	q.rq.reserve(min(q.cfg.MaxRecvWR, maxReservedRecvs))
	q.rq.push(newRecvWR(wr))
	return nil
}

// maxReservedRecvs bounds the receive queue PostRecv sizes at once.
const maxReservedRecvs = 64

// PostSend posts a Send, RDMA Write or RDMA Read. The local segments are
// resolved against the QP's PD now (an unknown LKey or a segment outside
// its region is refused with an error, and no completion follows). A Send
// or Write completes when its last byte has been handed to TCP (as siw
// does: TCP delivers it or the connection fails), a Read when its whole
// Response has been placed; so a Send or Write posted behind a Read
// completes before it. Once the connection has ended (or is ending) the
// request is dropped, and package dat flushes it.
//
// PostSend never waits for the network. When nothing is queued ahead of
// the request, no other writer is busy and the request is at most
// inlineMax bytes, it frames it and makes one non-blocking writev itself,
// completing it at once if the socket took it all; what the socket does
// not take, and larger requests, go to a sender goroutine (see sendLoop).
func (q *QP) PostSend(wr driver.SendWR) error {
	var w sendWR
	q.mu.Lock()
	switch q.state {
	case qpConnected:
	case qpEnded:
		q.mu.Unlock()
		return nil
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("post send", s)
	}
	c := q.conn
	if c.dead {
		q.mu.Unlock()
		return nil
	}
	if c.maxSend <= 0 || c.outstanding >= c.maxSend {
		n := c.outstanding
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
	c.pending.push(p)
	c.outstanding++
	if c.writing || !c.gate || c.pending.len() > 1 || w.total > inlineMax {
		// A writer is busy (it takes the request before it stops), the
		// startup rule holds it back, it must wait behind earlier
		// requests, or it is large: a sender goroutine does it.
		c.kickLocked()
		gated := !c.gate
		q.mu.Unlock()
		if gated {
			// The initiator's first FPDU opens the gate: it must be
			// read even if nobody waits for a completion.
			c.wakeRx()
		}
		return nil
	}
	// Inline: take the writer token and the batch in this critical
	// section, write without the lock, complete in one more.
	c.writing = true
	if c.tx.pickLocked(false) != stepProgress {
		// ORD or a fence holds it back: the Read Response that frees it
		// starts a sender goroutine.
		c.releaseLocked()
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()
	st := c.tx.send(false)
	q.mu.Lock()
	if st == stepProgress {
		c.tx.finishLocked()
	}
	if st == stepFailed {
		c.releaseLocked()
	} else {
		// Whatever the socket did not take goes to a sender goroutine.
		c.handOffLocked()
	}
	q.mu.Unlock()
	return nil
}
