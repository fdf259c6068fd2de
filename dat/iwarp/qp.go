package iwarp

import (
	"context"
	"fmt"
	"net"
	"sync"

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
	rq      []driver.RecvWR
}

var _ driver.QP = (*QP)(nil)

// attempt is one Connect or Request.Accept in progress. Disconnect and
// Close cancel it through abort and wait for done.
type attempt struct {
	abort context.CancelCauseFunc
	done  chan struct{}
}

func newQP(ia *IA, cfg driver.QPConfig, h driver.QPHandler) *QP {
	return &QP{ia: ia, events: newEventQueue(h), cfg: cfg}
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
// takes the connection and starts its reader; on failure it becomes
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
		flush := q.takeRecvs()
		q.mu.Unlock()
		q.events.flushRecvs(flush)
		return err
	}
	q.state = qpConnected
	q.conn = c
	go c.readLoop(q)
	q.mu.Unlock()
	return nil
}

// connLost is called by c's reader when the stream ended. Unless this side
// already tore the connection down, the QP becomes disconnected and the
// handler hears about it exactly once.
func (q *QP) connLost(c *connection, err error) {
	q.mu.Lock()
	if q.conn != c || c.local || q.state != qpConnected {
		q.mu.Unlock()
		return
	}
	q.state = qpDisconnected
	flush := q.takeRecvs()
	q.mu.Unlock()
	// Close our half too: the peer's FIN (or the failure) ends the
	// connection; siw releases the socket the same way.
	_ = c.tc.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	q.events.flushRecvs(flush)
	q.events.disconnected(lostError(err))
}

// Disconnect tears the connection down (see connection.shutdown for
// graceful vs abrupt) or aborts an establishment in progress. The handler
// gets no Disconnected call for it. Disconnecting a disconnected QP is a
// no-op (an abrupt call hurries a graceful one still waiting for the peer).
func (q *QP) Disconnect(graceful bool) error {
	q.mu.Lock()
	switch q.state {
	case qpConnecting:
		a := q.attempt
		q.attempt = nil
		q.state = qpDisconnected
		flush := q.takeRecvs()
		q.mu.Unlock()
		a.abort(ErrAborted)
		<-a.done
		q.events.flushRecvs(flush)
		return nil
	case qpConnected:
		c := q.conn
		c.local = true
		q.state = qpDisconnected
		flush := q.takeRecvs()
		q.mu.Unlock()
		q.events.flushRecvs(flush)
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
			<-c.closed
		}
		return nil
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("disconnect", s)
	}
}

// Reset returns a disconnected QP to the unconnected state, dropping the
// old connection's remains. Resetting an unconnected QP is a no-op.
func (q *QP) Reset() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case qpIdle:
		return nil
	case qpDisconnected:
		q.conn = nil
		q.state = qpIdle
		return nil
	}
	return errInvalidState("reset", q.state)
}

// Close destroys the QP: an establishment in progress is aborted, a
// connection reset, posted receives are flushed. It is idempotent.
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
	flush := q.takeRecvs()
	q.mu.Unlock()

	if a != nil {
		a.abort(ErrAborted)
		<-a.done
	}
	if c != nil {
		// Abrupt in every case: a graceful Disconnect still waiting for
		// the peer is cut short, a peer-closed socket is already closed.
		c.abort()
		<-c.readerDone
		c.closeOnce.Do(func() { close(c.closed) })
	}
	q.events.flushRecvs(flush)
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
// they complete flushed at once, as DAT requires.
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
	case q.state == qpDisconnected:
		q.events.flushRecvs([]driver.RecvWR{wr})
		return nil
	case len(q.rq) >= q.cfg.MaxRecvWR:
		return fmt.Errorf("iwarp: post recv: %d receives posted: %w", len(q.rq), driver.ErrQueueFull)
	}
	wr.Local = append([]driver.SGE(nil), wr.Local...)
	q.rq = append(q.rq, wr)
	return nil
}

// PostSend posts a Send, RDMA Write or RDMA Read. The FPDU data path is
// not implemented yet: on a connected QP this returns
// driver.ErrNotSupported. On a disconnected QP the request completes
// flushed at once, as DAT requires.
func (q *QP) PostSend(wr driver.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case qpConnected:
		return fmt.Errorf("iwarp: post send: data path not implemented: %w", driver.ErrNotSupported)
	case qpDisconnected:
		c := driver.Completion{Cookie: wr.Cookie, Op: wr.Op, Status: driver.StatusFlushed, Signaled: true}
		q.events.post(func(h driver.QPHandler) { h.Completion(c) })
		return nil
	}
	return errInvalidState("post send", q.state)
}

// takeRecvs empties the receive queue for flushing. Called with q.mu held.
func (q *QP) takeRecvs() []driver.RecvWR {
	rq := q.rq
	q.rq = nil
	return rq
}
