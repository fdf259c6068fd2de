package dat

import (
	"context"
	"net/netip"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// CR is a pending Connection Request (DAT_CR_HANDLE). It lives until
// Accept or Reject.
type CR struct {
	ia   *IA
	req  driver.Request
	psp  *PSP
	qual ConnQual
	// ep is the EP the request carries: the RSP's EP or the EP a PSP with
	// PSPProvider made. Nil for a consumer-flag PSP.
	ep    *EP
	freed bool // guarded by ia.mu
}

// CRParam is what dat_cr_query reports.
type CRParam struct {
	// RemoteAddr is the requesting peer's address and port.
	RemoteAddr netip.AddrPort
	// RemotePortQual is the peer's port qualifier.
	RemotePortQual PortQual
	// PrivateData is the requester's private data.
	PrivateData []byte
	// SP is the PSP the request arrived on (nil for an RSP).
	SP *PSP
	// Qual is the connection qualifier the request arrived on.
	Qual ConnQual
	// LocalEP is the EP the request carries, if any.
	LocalEP *EP
}

func (cr *CR) lock(op string) error {
	if cr == nil {
		return newError(op, InvalidHandle, HandleCR, "CR is nil")
	}
	cr.ia.mu.Lock()
	if cr.freed {
		cr.ia.mu.Unlock()
		return newError(op, InvalidHandle, HandleCR, "CR was already accepted or rejected")
	}
	return nil
}

// Query reports the request's parameters (dat_cr_query).
func (cr *CR) Query() (CRParam, error) {
	const op = "dat_cr_query"
	if err := cr.lock(op); err != nil {
		return CRParam{}, err
	}
	defer cr.ia.mu.Unlock()
	info := cr.req.Info()
	ra := info.Remote
	ap := netip.AddrPortFrom(addrOf(ra), uint16(portOf(ra)))
	return CRParam{
		RemoteAddr: ap, RemotePortQual: PortQual(ap.Port()),
		PrivateData: append([]byte(nil), info.PrivateData...),
		SP:          cr.psp, Qual: cr.qual, LocalEP: cr.ep,
	}, nil
}

// Accept accepts the request on ep, sending privateData to the requester
// (dat_cr_accept). For a request that carries an EP (RSP or PSPProvider)
// ep may be nil or that EP; otherwise ep must be an UNCONNECTED EP with a
// PZ. The EP becomes COMPLETION_PENDING; ESTABLISHED (or
// ACCEPT_COMPLETION_ERROR, leaving it DISCONNECTED) follows on its
// connection EVD. The CR is consumed.
//
// With a provider whose accept does not wait for the peer
// (driver.LocalAccepter: the iwarp provider, whose side of the connection
// is up once its MPA Reply is written) the accept is made in the calling
// goroutine, and the event is on the EVD when Accept returns; otherwise
// it follows later.
func (cr *CR) Accept(ep *EP, privateData []byte) error {
	run, err := cr.accept(ep, privateData)
	if err != nil {
		return err
	}
	if la, ok := cr.req.(driver.LocalAccepter); ok && la.AcceptsLocally() {
		run()
	} else {
		go run()
	}
	return nil
}

// accept validates an Accept and starts it; run carries it out.
func (cr *CR) accept(ep *EP, privateData []byte) (run func(), err error) {
	const op = "dat_cr_accept"
	if err := cr.lock(op); err != nil {
		return nil, err
	}
	ia := cr.ia
	defer ia.mu.Unlock()
	target := cr.ep
	switch {
	case ep == nil && target == nil:
		return nil, newError(op, InvalidHandle, HandleEP, "the request carries no EP, so one must be given")
	case ep != nil && target != nil && ep != target:
		return nil, newError(op, InvalidHandle, HandleEP, "the request already carries an EP")
	case ep != nil:
		if ep.freed || ep.ia != ia {
			return nil, newError(op, InvalidHandle, HandleEP, "EP is freed or of another IA")
		}
		target = ep
	}
	if max := ia.attr.MaxPrivateData; len(privateData) > max {
		return nil, newError(op, InvalidParameter, Arg(4), "%d bytes of private data exceed the provider's %d", len(privateData), max)
	}
	switch {
	case cr.ep == nil && target.state != EPUnconnected:
		return nil, target.stateError(op)
	case cr.ep != nil && target.state != EPPassiveConnectionPending && target.state != EPTentativeConnectionPending:
		return nil, target.stateError(op)
	}
	if target.qp == nil {
		return nil, newError(op, InvalidState, StateEPNotReady, "EP has no protection zone")
	}
	cr.freed = true
	delete(ia.crs, cr)
	target.cr = nil
	target.providerOwned = false // accepted: the consumer owns it now
	target.setStateLocked(EPCompletionPending)
	ctx, cancel := context.WithCancel(context.Background())
	a := &attempt{cancel: cancel}
	target.attempt = a
	qp, req := target.qp, cr.req
	pd := append([]byte(nil), privateData...)
	ia.bg.Add(1)
	return func() {
		defer ia.bg.Done()
		defer cancel()
		res, err := req.Accept(ctx, qp, pd)
		target.acceptDone(a, qp, res, err)
	}, nil
}

// acceptDone finishes the passive side: CONNECTED with ESTABLISHED, or
// DISCONNECTED with ACCEPT_COMPLETION_ERROR.
func (ep *EP) acceptDone(a *attempt, qp driver.QP, res driver.ConnectResult, err error) {
	ia := ep.ia
	ep.evMu.Lock() // see EP.evMu
	ia.mu.Lock()
	if ep.attempt != a {
		ia.mu.Unlock()
		ep.evMu.Unlock()
		if err == nil {
			qp.Disconnect(false)
		}
		return
	}
	ep.attempt = nil
	lost, lostErr := a.lost, a.lostErr
	ev := Event{Conn: ConnectionData{EP: ep, Err: err}}
	if err == nil {
		ep.setStateLocked(EPConnected)
		ep.recordAddrs(res)
		ev.Number = ConnectionEventEstablished
	} else {
		ep.setStateLocked(EPDisconnected)
		ev.Number = ConnectionEventAcceptCompletionErr
	}
	evd := ep.connEVD
	ia.mu.Unlock()
	if err != nil {
		ep.flushQueues()
	}
	if evd != nil {
		evd.post(ev)
	}
	ep.evMu.Unlock()
	if err == nil && lost {
		ep.transportEnded(ep.tagOf(qp), lostErr)
	}
}

// Reject refuses the request, delivering privateData to the requester,
// which sees DAT_CONNECTION_EVENT_PEER_REJECTED (dat_cr_reject, DAT 2.0
// form). An RSP's EP returns to UNCONNECTED; a provider-created EP goes
// back to the provider, which frees it.
func (cr *CR) Reject(privateData []byte) error {
	const op = "dat_cr_reject"
	if err := cr.lock(op); err != nil {
		return err
	}
	ia := cr.ia
	if max := ia.attr.MaxPrivateData; len(privateData) > max {
		ia.mu.Unlock()
		return newError(op, InvalidParameter, Arg(3), "%d bytes of private data exceed the provider's %d", len(privateData), max)
	}
	release := cr.releaseEPLocked()
	ia.mu.Unlock()
	if release != nil {
		release.releaseProvider()
	}
	if err := cr.req.Reject(privateData); err != nil {
		return providerError(op, err)
	}
	return nil
}

// releaseEPLocked marks the CR consumed and hands its EP back: an RSP EP
// to UNCONNECTED, a provider EP destroyed (returned so the caller can
// release its QP). Callers hold ia.mu.
func (cr *CR) releaseEPLocked() *EP {
	cr.freed = true
	delete(cr.ia.crs, cr)
	ep := cr.ep
	if ep == nil {
		return nil
	}
	ep.cr = nil
	if ep.providerOwned {
		ep.destroyLocked()
		return ep
	}
	if ep.state == EPPassiveConnectionPending {
		ep.setStateLocked(EPUnconnected)
	}
	return nil
}

// discard refuses a request the consumer never saw (its EVD was full), as
// a non-peer reject.
func (cr *CR) discard() {
	cr.ia.mu.Lock()
	release := cr.releaseEPLocked()
	cr.ia.mu.Unlock()
	if release != nil {
		release.releaseProvider()
	}
	cr.req.Abort()
}
