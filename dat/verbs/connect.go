//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
)

// Address and route resolution timeouts, in milliseconds (rdma_create_ep
// uses 2000 for each).
const (
	resolveAddrMS  = 2000
	resolveRouteMS = 2000
)

// attempt is one Connect or Request.Accept in progress. The QP's CM events
// reach it through events; Disconnect and Close cancel it and wait for
// done. By then a failed attempt has handed the quiescing of its
// connection to a goroutine counted in QP.tearing.
type attempt struct {
	events    chan cmEvent
	abort     chan struct{}
	abortOnce sync.Once
	done      chan struct{}
	cancelled bool  // guarded by QP.mu
	broken    error // guarded by QP.mu: a QP error event that came before finish
	// keepAlive is the connection's keepalive (resolved), which its
	// keeper starts with once it is established (keepalive.go).
	keepAlive net.KeepAliveConfig
}

func (a *attempt) cancel() {
	a.cancelled = true
	a.abortOnce.Do(func() { close(a.abort) })
}

// begin moves a QP that never connected to connecting.
func (q *QP) begin(op string) (*attempt, driver.QPConfig, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpIdle {
		return nil, driver.QPConfig{}, errInvalidState(op, q.state)
	}
	a := &attempt{events: make(chan cmEvent, 8), abort: make(chan struct{}), done: make(chan struct{})}
	q.attempt = a
	q.state = qpConnecting
	return a, q.cfg, nil
}

// finish ends an attempt. On success the QP is connected, the result gets
// the connection's addresses, and any event that raced the outcome (an
// immediate DISCONNECTED, a QP error) is applied. On failure, or when
// Disconnect/Close overtook it, the QP's connection is over: it is
// quiesced in the background (Disconnect and Close wait for that).
func (q *QP) finish(a *attempt, res *driver.ConnectResult, err error) error {
	defer close(a.done)
	q.mu.Lock()
	q.attempt = nil
	if err == nil && a.cancelled {
		err = ErrAborted
	}
	if err == nil {
		q.state = qpConnected
		c := q.conn
		res.Local, res.Remote = idAddr(c.id, false), idAddr(c.id, true)
		end, lostErr := a.broken != nil, a.broken
	drain:
		for !end {
			select {
			case ev := <-a.events:
				end, lostErr = q.connEventLocked(&ev)
			default:
				break drain
			}
		}
		q.mu.Unlock()
		if end {
			go q.lost(lostErr)
		} else {
			q.ia.watch.add(q)
			q.startKeepalive(c, a.keepAlive)
		}
		return nil
	}
	c := q.conn
	if q.state != qpClosed {
		q.state = qpDead
	}
	q.pending = nil
	if c == nil {
		q.mu.Unlock()
		return err
	}
	if c.qp != nil && c.idle() {
		// Flushing starts now, even if quiescing has to wait for an
		// rdma_connect in flight.
		C.shim_qp_to_error(c.qp)
	}
	q.tearing.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.tearing.Done()
		q.quiesce(c)
	}()
	return err
}

// await returns the next CM event of the attempt, or the reason it ended.
func (q *QP) await(ctx context.Context, a *attempt) (cmEvent, error) {
	select {
	case ev := <-a.events:
		return ev, nil
	case <-ctx.Done():
		return cmEvent{}, ctx.Err()
	case <-a.abort:
		return cmEvent{}, ErrAborted
	}
}

// Connect establishes a connection to remote (a *net.TCPAddr whose port is
// the rdma_cm port): resolve address and route, create the verbs QP, then
// rdma_connect with IRD/ORD from the configuration and privateData. A QP
// connects once. See doc.go for how each outcome is reported. On iWARP, rdma_connect makes the
// TCP connection synchronously inside the kernel; ctx is checked again
// once it returns. It is ConnectWith with no options.
func (q *QP) Connect(ctx context.Context, remote net.Addr, privateData []byte) (driver.ConnectResult, error) {
	return q.ConnectWith(ctx, remote, privateData, driver.ConnectOptions{})
}

// ConnectWith is Connect with options (driver.OptionsConnector). A port in
// opts.LocalAddr is bound on the connection's rdma_cm id before address
// resolution (rdma_bind_addr), so that it is the connection's source port
// (the TCP port on iWARP); an IP, if given, must be the IA's. Control is
// ignored: the kernel's rdma_cm owns the connection and there is no socket
// to give it. KeepAlive and KeepAliveConfig start an RDMA-level keepalive
// on the established connection (see keepalive.go).
func (q *QP) ConnectWith(ctx context.Context, remote net.Addr, privateData []byte, opts driver.ConnectOptions) (driver.ConnectResult, error) {
	raddr, err := provkit.RemoteTCPAddr(remote)
	if err != nil {
		return driver.ConnectResult{}, fmt.Errorf("verbs: connect %v: %w", remote, err)
	}
	prefix := "verbs: connect " + raddr.String()
	if max := q.ia.attr.MaxPrivateData; len(privateData) > max {
		return driver.ConnectResult{}, fmt.Errorf("%s: %d bytes of private data exceed the limit of %d", prefix, len(privateData), max)
	}
	if (raddr.IP.To4() == nil) != (q.ia.ip.To4() == nil) {
		return driver.ConnectResult{}, fmt.Errorf("%s: address family differs from the IA's %s: %w", prefix, q.ia.ip, driver.ErrInvalidAddress)
	}
	var lport int
	if opts.LocalAddr != nil {
		la, err := provkit.LocalTCPAddr(opts.LocalAddr)
		if err != nil {
			return driver.ConnectResult{}, fmt.Errorf("%s: %w", prefix, err)
		}
		if la.IP != nil && !la.IP.IsUnspecified() && !la.IP.Equal(q.ia.ip) {
			return driver.ConnectResult{}, fmt.Errorf("%s: local address %v is not the IA's %v: %w", prefix, la.IP, q.ia.ip, driver.ErrInvalidAddress)
		}
		lport = la.Port
	}
	a, cfg, err := q.begin("connect")
	if err != nil {
		return driver.ConnectResult{}, err
	}
	a.keepAlive = driver.ResolveKeepAlive(opts.KeepAlive, opts.KeepAliveConfig)
	res, err := q.connect(ctx, a, cfg, raddr, lport, privateData)
	if err == nil {
		// The kernel may have finished while ctx expired (iWARP's
		// synchronous TCP connect): report the deadline, as DAT wants.
		err = ctx.Err()
	}
	if err = q.finish(a, &res, err); err != nil {
		return driver.ConnectResult{}, fmt.Errorf("%s: %w", prefix, err)
	}
	return res, nil
}

func (q *QP) connect(ctx context.Context, a *attempt, cfg driver.QPConfig, raddr *net.TCPAddr, lport int, pdata []byte) (driver.ConnectResult, error) {
	c, err := q.newConnID()
	if err != nil {
		return driver.ConnectResult{}, err
	}
	q.mu.Lock()
	q.conn = c
	q.mu.Unlock()

	src, dst := ipBytes(q.ia.ip), ipBytes(raddr.IP)
	if lport != 0 {
		// Bound first, rdma_resolve_addr keeps the address and port
		// (the kernel ignores its source argument once the id is bound).
		if rc := C.shim_bind(c.id, (*C.uint8_t)(cBytes(src)), C.int(len(src)), C.uint16_t(lport)); rc != 0 {
			err := errnoOf(rc)
			if errors.Is(err, syscall.EADDRINUSE) {
				return driver.ConnectResult{}, fmt.Errorf("rdma_bind_addr port %d: %w: %w", lport, err, driver.ErrPortInUse)
			}
			return driver.ConnectResult{}, fmt.Errorf("rdma_bind_addr port %d: %w: %w", lport, err, driver.ErrInvalidAddress)
		}
	}
	if rc := C.shim_resolve_addr(c.id, (*C.uint8_t)(cBytes(src)), C.int(len(src)),
		(*C.uint8_t)(cBytes(dst)), C.int(len(dst)), C.uint16_t(raddr.Port), resolveAddrMS); rc != 0 {
		return driver.ConnectResult{}, syncError("rdma_resolve_addr", errnoOf(rc))
	}
	if err := q.expect(ctx, a, cmAddrResolved); err != nil {
		return driver.ConnectResult{}, err
	}
	if rc := C.shim_resolve_route(c.id, resolveRouteMS); rc != 0 {
		return driver.ConnectResult{}, syncError("rdma_resolve_route", errnoOf(rc))
	}
	if err := q.expect(ctx, a, cmRouteResolved); err != nil {
		return driver.ConnectResult{}, err
	}
	if err := q.createVerbsQP(c, cfg); err != nil {
		return driver.ConnectResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.ConnectResult{}, err
	}
	if err := q.rdmaConnect(ctx, a, c, cfg, pdata); err != nil {
		return driver.ConnectResult{}, err
	}
	ev, err := q.await(ctx, a)
	if err != nil {
		return driver.ConnectResult{}, err
	}
	if ev.typ != cmEstablished {
		return driver.ConnectResult{}, q.failure(&ev)
	}
	c.ord = ev.responderResources
	return driver.ConnectResult{PrivateData: q.ia.receivedPD(ev.pdata)}, nil
}

// rdmaConnect calls rdma_connect off the caller's goroutine. On iWARP the
// call makes the TCP connection synchronously in the kernel (siw_connect),
// which toward a silent host lasts as long as the kernel's SYN retries;
// ctx and aborts must not wait for that. The call's goroutine marks c busy
// until it returns, and teardown waits for it before destroying anything.
func (q *QP) rdmaConnect(ctx context.Context, a *attempt, c *conn, cfg driver.QPConfig, pdata []byte) error {
	res := make(chan error, 1)
	c.busy = make(chan struct{})
	go func() {
		defer close(c.busy)
		ird, ord := q.readDepths(cfg, a.keepAlive)
		res <- errnoOf(C.shim_connect(c.id, cBytes(pdata), C.int(len(pdata)), C.int(ird), C.int(ord)))
	}()
	select {
	case err := <-res:
		if err != nil {
			return syncError("rdma_connect", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.abort:
		return ErrAborted
	}
}

// expect awaits one event of type want; anything else ends the attempt.
func (q *QP) expect(ctx context.Context, a *attempt, want cmEventType) error {
	ev, err := q.await(ctx, a)
	if err != nil {
		return err
	}
	if ev.typ != want {
		return q.failure(&ev)
	}
	return nil
}

// failure classifies an event that ended establishment (doc.go, "Outcomes
// of Connect").
func (q *QP) failure(ev *cmEvent) error {
	switch ev.typ {
	case cmRejected:
		if q.ia.attr.Transport == driver.TransportIWARP {
			// The kernel reports an MPA Reply with R and a plain TCP
			// reset alike (-ECONNRESET); only a reply can carry data.
			if len(ev.pdata) > 0 {
				return &driver.RejectError{PrivateData: ev.pdata}
			}
			return fmt.Errorf("%w (no private data: not a consumer reject)", ev.err())
		}
		if ev.status == ibRejectConsumer {
			return &driver.RejectError{PrivateData: q.ia.receivedPD(ev.pdata)}
		}
		return ev.err()
	case cmAddrError, cmRouteError, cmUnreachable, cmConnectError:
		return fmt.Errorf("%w: %w", ev.err(), driver.ErrUnreachable)
	}
	return ev.err()
}

// syncError classifies a CM call that failed at once.
func syncError(call string, err error) error {
	if isUnreachable(err) {
		return fmt.Errorf("%s: %w: %w", call, err, driver.ErrUnreachable)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: %w (nobody listening)", call, err)
	}
	return fmt.Errorf("%s: %w", call, err)
}

// receivedPD trims private data received over the IB CM, which has no
// length field: the event carries the whole message field (REQ 56, REP
// 196, REJ 148 bytes), zero-padded. Nothing past MaxPrivateData can be
// consumer data from a peer that honours the same limit, so it is cut
// there; the consumer's bytes arrive zero-padded to 56.
func (ia *IA) receivedPD(b []byte) []byte {
	if ia.attr.Transport != driver.TransportIWARP && len(b) > ia.attr.MaxPrivateData {
		return b[:ia.attr.MaxPrivateData]
	}
	return b
}
