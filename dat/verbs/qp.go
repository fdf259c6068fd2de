//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// qpState is the provider-side life cycle of a QP; package dat keeps the
// full DAT EP state machine.
type qpState int

const (
	qpIdle         qpState = iota // no connection: Connect/Accept allowed
	qpConnecting                  // Connect or Request.Accept in progress
	qpConnected                   // established
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

// QP is a reliable-connected queue pair. It implements driver.QP.
//
// The verbs objects (rdma_cm id, CQ, ibv_qp) exist per connection: they
// are created by Connect or Request.Accept and destroyed by Reset and
// Close, so that every connection starts from a fresh QP (DAPL's cma
// provider does the same on dat_ep_reset). Receives posted while there is
// no verbs QP wait in rq and are posted when it is created, before the
// connection is established.
type QP struct {
	ia     *IA
	key    uintptr // registry key; the CQ's and the ibv_qp's context
	events *eventQueue

	// cqMu serialises polling the CQ with creating and destroying it.
	cqMu sync.Mutex
	cq   *C.struct_ibv_cq                    // guarded by cqMu
	wcs  [C.SHIM_POLL_BATCH]C.struct_shim_wc // guarded by cqMu

	// ops counts Disconnect calls in progress; Reset and Close wait for
	// them before destroying the connection.
	ops sync.WaitGroup
	// tearing counts teardowns of failed attempts running in the
	// background (see finish); Reset and Close wait for them.
	tearing sync.WaitGroup

	mu       sync.Mutex
	cfg      driver.QPConfig
	state    qpState
	attempt  *attempt
	conn     *conn
	sq, rq   wrQueue
	seq      uint64
	sges     [maxSGE]C.struct_ibv_sge // post scratch
	progress chan struct{}            // closed after each CQ batch, for waitIdle
	local    net.Addr
	remote   net.Addr

	// early holds completions the device reported ahead of an earlier
	// request of their queue, until their turn (reorder.go); guarded by
	// mu.
	early []C.struct_shim_wc
}

var _ driver.QP = (*QP)(nil)

// conn is one connection's verbs objects.
type conn struct {
	id  *C.struct_rdma_cm_id
	key uintptr          // registry key of id (owner: the QP)
	qp  *C.struct_ibv_qp // nil until created; guarded by QP.mu

	gone      chan struct{} // closed on the id's DISCONNECTED event
	goneOnce  sync.Once
	hurry     chan struct{} // closed to cut a graceful Disconnect short
	hurryOnce sync.Once
	busy      chan struct{} // closed when an rdma_connect in flight returns (nil: none)
}

// idle reports that no blocking CM call on the id is in flight.
func (c *conn) idle() bool {
	if c.busy == nil {
		return true
	}
	select {
	case <-c.busy:
		return true
	default:
		return false
	}
}

func newConn() *conn {
	return &conn{gone: make(chan struct{}), hurry: make(chan struct{})}
}

func (c *conn) markGone() { c.goneOnce.Do(func() { close(c.gone) }) }
func (c *conn) hurryUp()  { c.hurryOnce.Do(func() { close(c.hurry) }) }

func newQP(ia *IA, cfg driver.QPConfig, h driver.QPHandler) *QP {
	q := &QP{ia: ia, cfg: cfg, events: newEventQueue(h)}
	q.key = register(q)
	return q
}

// Modify replaces the configuration of a QP that is not connected or
// connecting. It takes effect with the next connection, whose verbs QP is
// built from it.
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

// Addrs reports the local and remote addresses of the QP's connection
// (nil before the first one and after Reset).
func (q *QP) Addrs() (local, remote net.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.local, q.remote
}

// Reset returns a disconnected QP to the unconnected state: the old
// connection's QP, CQ and id are destroyed, whatever they still held is
// completed as flushed, and Reset returns after those completions were
// delivered (package dat forgets outstanding work after Reset). Resetting
// an unconnected QP is a no-op.
func (q *QP) Reset() error {
	q.mu.Lock()
	switch q.state {
	case qpIdle:
		q.mu.Unlock()
		return nil
	case qpDisconnected:
	default:
		s := q.state
		q.mu.Unlock()
		return errInvalidState("reset", s)
	}
	c := q.conn
	q.conn = nil
	q.mu.Unlock()
	q.tearing.Wait()
	if c != nil {
		c.hurryUp()
		q.ops.Wait()
		q.teardown(c)
	}
	q.mu.Lock()
	q.flushAllLocked()
	if q.state == qpDisconnected {
		q.state = qpIdle
		q.local, q.remote = nil, nil
	}
	q.mu.Unlock()
	q.events.wait()
	return nil
}

// Close destroys the QP: an establishment in progress is aborted, a
// connection torn down abruptly, and everything posted completes flushed
// before Close returns. It is idempotent.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.state == qpClosed {
		q.mu.Unlock()
		return nil
	}
	q.state = qpClosed
	a := q.attempt
	var c *conn
	if a != nil {
		a.cancel() // the attempt tears its connection down itself
	} else {
		c = q.conn
		q.conn = nil
	}
	q.mu.Unlock()
	if a != nil {
		<-a.done
	}
	q.tearing.Wait()
	if c != nil {
		c.hurryUp()
		q.ops.Wait()
		q.teardown(c)
	}
	q.mu.Lock()
	q.flushAllLocked()
	q.mu.Unlock()
	q.events.wait()
	unregister(q.key)
	q.ia.forgetQP(q)
	return nil
}

// cmEvent receives the events of the current connection's id.
func (q *QP) cmEvent(ev *cmEvent) {
	if ev.typ == cmDisconnected {
		// A device error that ends the connection (an async QP error
		// event, a failed work completion) is queued before the
		// DISCONNECTED it causes, but on other fds whose loops may run
		// later: take them first, so that a broken connection is not
		// reported as a clean disconnect.
		if q.ia.dev != nil {
			q.ia.dev.drain()
		}
		q.cqMu.Lock()
		if q.cq != nil {
			q.pollLocked()
		}
		q.cqMu.Unlock()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.conn
	if c == nil || c.key != ev.key {
		return // a previous connection's late event
	}
	if ev.typ == cmDisconnected {
		c.markGone()
	}
	switch q.state {
	case qpConnecting:
		if a := q.attempt; a != nil {
			select {
			case a.events <- *ev:
			default: // an attempt reads one event at a time and ends on any unexpected one
			}
		}
	case qpConnected:
		q.connEventLocked(ev)
	}
}

// connEventLocked handles an event of an established connection.
func (q *QP) connEventLocked(ev *cmEvent) {
	switch ev.typ {
	case cmDisconnected:
		if c := q.conn; c.qp != nil && C.shim_qp_in_error(c.qp) != 0 {
			// This side has not moved the QP to the error state (it
			// is connected), so the device has: a remote access
			// error, say, which rxe reports with no async event.
			q.lostLocked(errors.New("verbs: connection broken: the device moved the QP to the error state"))
			return
		}
		q.lostLocked(nil)
	case cmDeviceRemoval:
		q.lostLocked(fmt.Errorf("verbs: connection lost: %w", ev.err()))
	}
}

// asyncEvent receives the device's events for this QP (and its CQ).
func (q *QP) asyncEvent(t C.enum_ibv_event_type) {
	switch t {
	case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR, C.IBV_EVENT_CQ_ERR:
		err := fmt.Errorf("verbs: connection broken: %s", asyncEventName(t))
		q.mu.Lock()
		switch {
		case q.state == qpConnected:
			q.lostLocked(err)
		case q.state == qpConnecting && q.attempt != nil && q.attempt.broken == nil:
			// The attempt has seen ESTABLISHED (the QP is past RTR) but
			// has not finished yet: finish reports it broken.
			q.attempt.broken = err
		}
		q.mu.Unlock()
	}
}

// lostLocked ends an established connection this side did not close: the
// peer disconnected (err nil) or the connection broke. The QP is moved to
// the error state so everything posted flushes, rdma_disconnect answers
// the peer (IB DREP), and the handler hears about it once.
func (q *QP) lostLocked(err error) {
	q.state = qpDisconnected
	c := q.conn
	C.shim_disconnect(c.id)
	if c.qp != nil {
		C.shim_qp_to_error(c.qp)
	}
	q.events.disconnected(err)
}
