//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Request is a CONNECT_REQUEST waiting for the consumer's decision: the
// new rdma_cm id the event delivered and a copy of its parameters. It
// implements driver.Request. Exactly one of Accept, Reject or Abort
// settles it.
type Request struct {
	l     *Listener
	id    *C.struct_rdma_cm_id
	key   uintptr
	pdata []byte
	// From the responder's point of view, as the CM reports them:
	// respRes is the requester's ORD (what this side should offer as
	// IRD), initDepth the requester's IRD (the cap on this side's ORD).
	respRes, initDepth int
	local, remote      *net.TCPAddr

	mu      sync.Mutex
	settled bool
	gone    error // set when the requester gave up before a decision
}

var _ driver.Request = (*Request)(nil)

func newRequest(l *Listener, ev *cmEvent) *Request {
	r := &Request{
		l: l, id: ev.id, key: ev.key,
		pdata:   l.ia.receivedPD(ev.pdata),
		respRes: ev.responderResources, initDepth: ev.initiatorDepth,
		local: idAddr(ev.id, false), remote: idAddr(ev.id, true),
	}
	setOwner(r.key, r)
	return r
}

// Info describes the request. PrivateData is on IB/RoCE zero-padded to 56
// bytes (the IB CM REQ carries no length); IRD and ORD are the
// requester's advertised inbound and outbound RDMA Read depths.
func (r *Request) Info() driver.RequestInfo {
	return driver.RequestInfo{Remote: r.remote, Local: r.local, PrivateData: r.pdata, IRD: r.initDepth, ORD: r.respRes}
}

// cmEvent receives the request id's events until Accept hands it to a QP:
// anything arriving now means the requester gave up.
func (r *Request) cmEvent(ev *cmEvent) {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = fmt.Errorf("verbs: requester went away: %w", ev.err())
	}
	r.mu.Unlock()
}

// settle marks the request decided; false if it already was.
func (r *Request) settle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return false
	}
	r.settled = true
	return true
}

// Accept builds qp's connection on the request's own id (the CQ and verbs
// QP are created there, so no QP migration between ids is needed), posts
// qp's waiting receives, and calls rdma_accept with privateData and the
// read depths min(qp's, requester's). It returns once the CM reports the
// connection established or failed. Argument and QP-state errors leave the
// request pending; any later failure leaves qp disconnected. The result
// carries the connection's addresses.
func (r *Request) Accept(ctx context.Context, qp driver.QP, privateData []byte) (driver.ConnectResult, error) {
	var res driver.ConnectResult
	q, ok := qpOf(qp)
	if !ok || q.ia != r.l.ia {
		return res, fmt.Errorf("verbs: accept %v: QP %T does not belong to this IA: %w", r.remote, qp, driver.ErrNotSupported)
	}
	if max := q.ia.attr.MaxPrivateData; len(privateData) > max {
		return res, fmt.Errorf("verbs: accept %v: %d bytes of private data exceed the limit of %d", r.remote, len(privateData), max)
	}
	a, cfg, err := q.begin("accept")
	if err != nil {
		return res, err
	}
	if !r.settle() {
		q.mu.Lock()
		q.attempt, q.state = nil, qpIdle
		q.mu.Unlock()
		close(a.done)
		return res, fmt.Errorf("verbs: accept %v: request already accepted, rejected or aborted", r.remote)
	}
	r.l.release()
	a.keepAlive = r.l.keepAlive
	err = q.accept(ctx, a, cfg, r, privateData)
	if err = q.finish(a, &res, err); err != nil {
		return driver.ConnectResult{}, fmt.Errorf("verbs: accept %v: %w", r.remote, err)
	}
	return res, nil
}

func (q *QP) accept(ctx context.Context, a *attempt, cfg driver.QPConfig, r *Request, pdata []byte) error {
	c := newConn()
	c.id, c.key = r.id, r.key
	// The QP owns the id from here: its teardown destroys it. q.conn is
	// set before the key changes owner so no event falls in between.
	q.mu.Lock()
	q.conn = c
	q.mu.Unlock()
	setOwner(r.key, q)
	r.mu.Lock()
	gone := r.gone
	r.mu.Unlock()
	if gone != nil {
		return gone
	}
	if err := q.createVerbsQP(c, cfg); err != nil {
		return err
	}
	ird, ord := q.readDepths(cfg, a.keepAlive)
	ird, ord = min(ird, r.respRes), min(ord, r.initDepth)
	if rc := C.shim_accept(c.id, cBytes(pdata), C.int(len(pdata)), C.int(ird), C.int(ord)); rc != 0 {
		return fmt.Errorf("rdma_accept: %w", errnoOf(rc))
	}
	ev, err := q.await(ctx, a)
	if err != nil {
		return err
	}
	if ev.typ != cmEstablished {
		return ev.err()
	}
	c.ord = ev.responderResources
	return nil
}

// Reject refuses the request as a consumer (peer) reject carrying
// privateData: rdma_reject, which is IB CM reason 28 or an MPA Reply with
// R set.
func (r *Request) Reject(privateData []byte) error {
	if max := r.l.ia.attr.MaxPrivateData; len(privateData) > max {
		return fmt.Errorf("verbs: reject %v: %d bytes of private data exceed the limit of %d", r.remote, len(privateData), max)
	}
	if !r.settle() {
		return fmt.Errorf("verbs: reject %v: request already accepted, rejected or aborted", r.remote)
	}
	r.l.release()
	err := errnoOf(C.shim_reject(r.id, cBytes(privateData), C.int(len(privateData)), 0))
	C.shim_destroy_id(r.id)
	unregister(r.key)
	if err != nil {
		return fmt.Errorf("verbs: reject %v: rdma_reject: %w", r.remote, err)
	}
	return nil
}

// Abort refuses the request as a non-peer reject (IB CM reason 35; on
// iWARP an MPA reject without data) and releases it. Aborting a settled
// request does nothing.
func (r *Request) Abort() error {
	if !r.settle() {
		return nil
	}
	r.l.release()
	refuse(r.id)
	unregister(r.key)
	return nil
}
