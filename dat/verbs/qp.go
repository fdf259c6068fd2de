//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// qpState is the provider's view of a QP's one connection; package dat
// keeps the DAT EP state machine.
type qpState int

const (
	qpIdle       qpState = iota // never connected: Connect/Accept allowed
	qpConnecting                // Connect or Request.Accept in progress
	qpConnected                 // established
	qpDead                      // the connection (or attempt) is over: posts are dropped
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
	case qpDead:
		return "disconnected"
	case qpClosed:
		return "closed"
	}
	return fmt.Sprintf("qpState(%d)", int(s))
}

// QP is a reliable-connected queue pair. It implements driver.QP; on a
// device with memory windows the IA hands out a windowQP, which adds
// driver.WindowBinder.
//
// The verbs objects (rdma_cm id, ibv_qp) are created by Connect or
// Request.Accept, on that connection's id, and destroyed when the
// connection ends: a QP connects once. Receives posted before the ibv_qp
// exists wait in pending and are posted when it is created, ahead of
// establishment.
type QP struct {
	ia     *IA
	key    uintptr // registry key: the ibv_qp's and the ids' context
	tag    uint32
	onDisc func(error)
	// sendCQ and recvCQ are the CQs of CreateQP (either may be nil).
	sendCQ, recvCQ *CQ

	// srq is the SRQ of the connection's ibv_qp, set before the QP is
	// attached to its CQs and never changed after.
	srq *SRQ
	// sendPosted and sendDone count signalled send-side work requests
	// posted to the device and completed (polled), so a graceful
	// disconnect knows when the send queue has drained and quiesce when
	// the device has flushed it. Requests posted unsignalled are not
	// counted: a success of theirs produces no completion (see post.go).
	// recvPosted and recvDone do the same for the QP's own receive queue
	// (not for receives from an SRQ).
	sendPosted, sendDone atomic.Uint64
	recvPosted, recvDone atomic.Uint64
	// fault is the first error seen to break the connection (an async
	// QP error, a failed work completion). lost reports it even when a
	// clean DISCONNECTED won the race to end the connection: the
	// goroutines that report the two run in no particular order.
	fault atomic.Pointer[error]
	// bindMu serialises window binds, so at most one is posted at a
	// time; bind is that one's record.
	bindMu  sync.Mutex
	bindSeq uint64 // guarded by bindMu
	bind    atomic.Pointer[bindWait]
	// hungUp is set when this side takes an established (or
	// establishing) connection down: the consumer's Disconnect, or the
	// keeper giving up on a silent peer. From then on a request that did
	// not succeed counts as flushed, whatever status the device gave it
	// (CQ.mapLocked).
	hungUp atomic.Bool
	// keep is the connection's keeper (keepalive.go); nil without
	// keepalive.
	keep atomic.Pointer[keeper]

	// ops counts Disconnect calls and connection losses in progress;
	// Close waits for them before destroying the connection, which they
	// use (rdma_disconnect).
	ops sync.WaitGroup
	// tearing counts quiescing of failed attempts running in the
	// background (see finish); Close waits for them.
	tearing sync.WaitGroup

	mu      sync.Mutex
	cfg     driver.QPConfig
	state   qpState
	attempt *attempt
	conn    *conn
	pending []pendingRecv
	sges    [maxSGE]C.struct_ibv_sge // post scratch
	// one, shimWRs and listSGEs are the send posts' scratch: the request
	// PostSend hands on, the requests of one ibv_post_send, and the SGEs
	// of a list (grown to the most a list needed).
	one      [1]driver.SendWR
	shimWRs  [sendListMax]C.struct_shim_wr
	listSGEs []C.struct_ibv_sge
	// silentTail: the newest send-side request was posted unsignalled,
	// so nothing will report when the send queue has drained; a
	// graceful disconnect posts a signalled marker behind it
	// (waitSendIdle).
	silentTail bool
	// inlined counts the requests posted inline (the tests read it).
	inlined uint64
}

var _ driver.QP = (*QP)(nil)

// windowQP is a QP of a device with memory windows.
type windowQP struct{ *QP }

var _ driver.WindowBinder = windowQP{}

// qpOf unwraps a QP of this package.
func qpOf(x driver.QP) (*QP, bool) {
	switch q := x.(type) {
	case *QP:
		return q, true
	case windowQP:
		return q.QP, true
	}
	return nil, false
}

// pendingRecv is a receive posted before the ibv_qp exists.
type pendingRecv struct {
	id   uint64
	sges []driver.SGE
}

// conn is the connection's verbs objects.
type conn struct {
	id  *C.struct_rdma_cm_id
	key uintptr          // registry key of id (owner: the QP)
	qp  *C.struct_ibv_qp // nil until created and after destruction; guarded by QP.mu
	// qpNum and the CQs the ibv_qp is on, with the ibv_cqs (segments)
	// attach gave each queue and what it reserved there; set with qp.
	qpNum      uint32
	scq, rcq   *CQ
	sseg, rseg *cqSeg
	sEnt, rEnt int
	private    *CQ // made for a QP configured with no CQ at all
	// maxInline is the QP's max_inline_data as the device granted it,
	// and pd the QP's PD, set with qp: send-side requests up to that
	// size from the PD's regions are posted inline (post.go).
	maxInline uint32
	pd        *PD

	gone      chan struct{} // closed on the id's DISCONNECTED event
	goneOnce  sync.Once
	hurry     chan struct{} // closed to cut a graceful Disconnect short
	hurryOnce sync.Once
	busy      chan struct{} // closed when an rdma_connect in flight returns (nil: none)
	// ord is the connection's negotiated ORD on iWARP, from its
	// ESTABLISHED event (whose responder_resources the iWARP CM fills
	// with the local ORD); keepalive's fallback Read probe needs it to be ≥ 1.
	ord int

	quiesceOnce sync.Once
	quiesced    chan struct{}
}

func newConn() *conn {
	return &conn{gone: make(chan struct{}), hurry: make(chan struct{}), quiesced: make(chan struct{})}
}

func (c *conn) markGone() { c.goneOnce.Do(func() { close(c.gone) }) }
func (c *conn) hurryUp()  { c.hurryOnce.Do(func() { close(c.hurry) }) }

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

func newQP(ia *IA, cfg driver.QPConfig) *QP {
	q := &QP{ia: ia, cfg: cfg, tag: cfg.Tag, onDisc: cfg.OnDisconnect}
	q.sendCQ, _ = cfg.SendCQ.(*CQ)
	q.recvCQ, _ = cfg.RecvCQ.(*CQ)
	q.key = register(q)
	return q
}

// Modify replaces the configuration of a QP that has never connected; the
// next connection's ibv_qp is built from it. CQs, Tag and OnDisconnect
// stay those of CreateQP.
func (q *QP) Modify(cfg driver.QPConfig) error {
	if err := q.ia.checkQPConfig(cfg); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpIdle {
		return errInvalidState("modify", q.state)
	}
	if cfg.SRQ == nil && q.cfg.SRQ != nil {
		q.pending = nil // receives went to the SRQ; none can be pending
	}
	q.cfg = cfg
	return nil
}

// Close destroys the QP: an establishment in progress is aborted, a
// connection torn down abruptly; it returns once the QP is quiescent. It
// is idempotent.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.state == qpClosed {
		q.mu.Unlock()
		return nil
	}
	q.state = qpClosed
	a, c := q.attempt, q.conn
	if a != nil {
		a.cancel()
	}
	q.pending = nil
	q.mu.Unlock()
	if a != nil {
		<-a.done
	}
	q.tearing.Wait()
	if c != nil {
		c.hurryUp()
		q.ops.Wait()
		q.quiesce(c)
	}
	q.ia.watch.remove(q)
	unregister(q.key)
	q.ia.forgetQP(q)
	return nil
}

// cmEvent receives the events of the connection's id.
func (q *QP) cmEvent(ev *cmEvent) {
	if ev.typ == cmDisconnected && q.ia.dev != nil {
		// A device error that ends the connection (an async QP error
		// event) is queued before the DISCONNECTED it causes, but on
		// another fd whose loop may run later: take it first, so that a
		// broken connection is not reported as a clean disconnect.
		q.ia.dev.drain()
	}
	q.mu.Lock()
	c := q.conn
	if c == nil || c.key != ev.key {
		q.mu.Unlock()
		return
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
		if end, err := q.connEventLocked(ev); end {
			q.mu.Unlock()
			go q.lost(err)
			return
		}
	}
	q.mu.Unlock()
}

// connEventLocked classifies an event of an established connection:
// whether it ends it, and how. Callers hold mu.
func (q *QP) connEventLocked(ev *cmEvent) (bool, error) {
	switch ev.typ {
	case cmDisconnected:
		if c := q.conn; c.qp != nil && C.shim_qp_in_error(c.qp) != 0 {
			// This side has not moved the QP to the error state (it is
			// connected), so the device has: a remote access error,
			// say, which rxe reports with no async event.
			return true, errors.New("verbs: connection broken: the device moved the QP to the error state")
		}
		return true, nil
	case cmDeviceRemoval:
		return true, fmt.Errorf("verbs: connection lost: %w", ev.err())
	}
	return false, nil
}

// asyncEvent receives the device's events for this QP.
func (q *QP) asyncEvent(t C.enum_ibv_event_type) {
	q.ia.debug("async event", slog.String("event", asyncEventName(t)), slog.Uint64("qp_key", uint64(q.key)))
	switch t {
	case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR:
		err := fmt.Errorf("verbs: connection broken: %s", asyncEventName(t))
		q.noteFault(err)
		q.mu.Lock()
		switch {
		case q.state == qpConnected:
			q.mu.Unlock()
			go q.lost(err)
			return
		case q.state == qpConnecting && q.attempt != nil && q.attempt.broken == nil:
			// The attempt has seen ESTABLISHED (the QP is past RTR)
			// but has not finished: finish reports it broken.
			q.attempt.broken = err
		}
		q.mu.Unlock()
	}
}

// lost ends an established connection this side did not close: the peer
// disconnected (err nil) or the connection broke. rdma_disconnect answers
// the peer (IB DREP), the QP is quiesced, and then, once, OnDisconnect is
// called. It runs on a goroutine of its own: quiescing waits for the
// device, and OnDisconnect may call back into package dat.
func (q *QP) lost(err error) {
	q.mu.Lock()
	if q.state != qpConnected {
		q.mu.Unlock()
		return
	}
	if f := q.fault.Load(); err == nil && f != nil {
		err = *f
	}
	q.state = qpDead
	c := q.conn
	q.ops.Add(1)
	q.mu.Unlock()
	C.shim_disconnect(c.id)
	q.quiesce(c)
	q.ops.Done()
	if q.onDisc != nil {
		q.onDisc(err)
	}
}

// noteFault records err as what broke the connection, unless something
// was recorded first.
func (q *QP) noteFault(err error) {
	q.fault.CompareAndSwap(nil, &err)
}
