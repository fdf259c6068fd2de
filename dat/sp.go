package dat

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// PSP is a Public Service Point (DAT_PSP_HANDLE): a listener on a
// connection qualifier that turns each incoming request into a CR and a
// DAT_CONNECTION_REQUEST_EVENT on its EVD.
type PSP struct {
	ia    *IA
	qual  ConnQual
	evd   *EVD
	flags PSPFlags
	lis   driver.Listener
	stop  context.CancelFunc
	freed bool // guarded by ia.mu
}

// PSPOptions tune CreatePSP. The zero value is valid.
type PSPOptions struct {
	// Backlog bounds the requests that have arrived but are not yet
	// accepted or rejected. Requests beyond it are refused and their
	// initiators see DAT_CONNECTION_EVENT_NON_PEER_REJECTED. Zero means
	// the provider default.
	Backlog int
	// SharePort listens with SO_REUSEPORT so several processes can serve
	// one qualifier.
	SharePort bool
	// Fallback, when non-nil, lets the qualifier's port serve plain TCP
	// clients too; it is an extension beyond DAT. A connection that the
	// provider finds is not a connection request of its transport is
	// handed to Fallback, its bytes intact, instead of being dropped; it
	// never becomes a CR. Fallback owns the connection (it must close it)
	// and should hand it off rather than serve it, since the provider
	// waits for calls in progress when the PSP is freed. Providers whose
	// connections are not set up over a TCP socket of their own (verbs,
	// through rdma_cm) ignore it.
	Fallback func(net.Conn)
	// Control, if not nil, is called on the listening socket after it is
	// created and before it is bound, as net.ListenConfig.Control (network
	// "tcp4" or "tcp6", the listen address); an error it returns fails
	// the creation. An extension beyond DAT; providers that do not listen
	// on a socket of their own (verbs) ignore it.
	Control func(network, address string, c syscall.RawConn) error
	// KeepAlive and KeepAliveConfig set up dead-peer detection on the
	// connections accepted through the PSP, with the conventions of
	// net.ListenConfig (zero: probes after 15 s idle; negative KeepAlive:
	// off) and the behaviour ConnectOptions.KeepAlive describes. An
	// extension beyond DAT.
	KeepAlive       time.Duration
	KeepAliveConfig net.KeepAliveConfig
}

// CreatePSP starts listening on qual (dat_psp_create). Requests are
// reported on evd, which needs the CR stream flag. With PSPProvider each
// request comes with a provider-created EP in TENTATIVE_CONNECTION_PENDING
// that has default attributes and no PZ or EVDs: set them with Modify
// before accepting. A qualifier in use gives DAT_CONN_QUAL_IN_USE.
func (ia *IA) CreatePSP(qual ConnQual, evd *EVD, flags PSPFlags, opts *PSPOptions) (*PSP, error) {
	const op = "dat_psp_create"
	if qual == 0 || qual > 0xFFFF {
		return nil, newError(op, InvalidParameter, Arg(2), "connection qualifier %d: must be a port 1..65535 (CreatePSPAny picks one)", qual)
	}
	return ia.createPSP(op, qual, evd, flags, opts)
}

// CreatePSPAny is CreatePSP on a qualifier the provider picks
// (dat_psp_create_any); Qual reports it.
func (ia *IA) CreatePSPAny(evd *EVD, flags PSPFlags, opts *PSPOptions) (*PSP, error) {
	return ia.createPSP("dat_psp_create_any", 0, evd, flags, opts)
}

func (ia *IA) createPSP(op string, qual ConnQual, evd *EVD, flags PSPFlags, opts *PSPOptions) (*PSP, error) {
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	if flags != PSPConsumer && flags != PSPProvider {
		return nil, newError(op, InvalidParameter, Arg(4), "PSP flags %d", flags)
	}
	if opts == nil {
		opts = &PSPOptions{}
	}
	if opts.Backlog < 0 {
		return nil, newError(op, InvalidParameter, Arg(5), "backlog %d is negative", opts.Backlog)
	}
	if err := ia.attachCREVD(op, evd); err != nil {
		return nil, err
	}
	lis, err := ia.prov.Listen(driver.ListenConfig{Port: uint16(qual), Backlog: opts.Backlog, SharePort: opts.SharePort, Fallback: opts.Fallback,
		Control: opts.Control, KeepAlive: opts.KeepAlive, KeepAliveConfig: opts.KeepAliveConfig})
	if err != nil {
		ia.detachCREVD(evd)
		return nil, providerError(op, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	psp := &PSP{ia: ia, qual: ConnQual(portOf(lis.Addr())), evd: evd, flags: flags, lis: lis, stop: stop}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		stop()
		lis.Close()
		return nil, err
	}
	ia.psps[psp] = struct{}{}
	ia.bg.Add(1)
	ia.mu.Unlock()
	if n, ok := lis.(driver.RequestNotifier); ok {
		n.NotifyRequests(psp.deliver)
	}
	go func() {
		defer ia.bg.Done()
		psp.serve(ctx)
	}()
	return psp, nil
}

// attachCREVD checks an EVD for the CR stream and takes a reference.
func (ia *IA) attachCREVD(op string, evd *EVD) error {
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		return err
	}
	if err := evd.check(op, ia, EVDCR, HandleEVDCR); err != nil {
		return err
	}
	if why := evd.canAddOther(nil); why != "" {
		return newError(op, InvalidParameter, Arg(3), "%s", why)
	}
	evd.refs++
	evd.streams.cr++
	return nil
}

func (ia *IA) detachCREVD(evd *EVD) {
	ia.mu.Lock()
	evd.refs--
	evd.streams.cr--
	ia.mu.Unlock()
}

// Qual is the connection qualifier the PSP listens on.
func (psp *PSP) Qual() ConnQual { return psp.qual }

// Addr is the address the PSP listens on.
func (psp *PSP) Addr() net.Addr { return psp.lis.Addr() }

// serve turns each request the provider queues for Accept into a CR
// until the PSP is freed. With a provider that hands requests over as they
// arrive (driver.RequestNotifier) it only takes those queued before
// NotifyRequests, and waits for the listener's end.
func (psp *PSP) serve(ctx context.Context) {
	ia := psp.ia
	for {
		req, err := psp.lis.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			ia.async.post(Event{Number: AsyncErrorProviderInternalError, Async: AsyncData{Handle: psp}})
			return
		}
		psp.deliver(req)
	}
}

// deliver turns a provider request into a CR and its event, or refuses
// it if the PSP or the IA is gone, or the EVD cannot take the event.
func (psp *PSP) deliver(req driver.Request) {
	ia := psp.ia
	ia.mu.Lock()
	if psp.freed || ia.closed {
		ia.mu.Unlock()
		req.Abort()
		return
	}
	cr := &CR{ia: ia, req: req, psp: psp, qual: psp.qual}
	ia.crs[cr] = struct{}{}
	if psp.flags == PSPProvider {
		ep := &EP{ia: ia, state: EPTentativeConnectionPending, providerOwned: true, attr: ia.defaultEPAttr(nil, nil), cr: cr}
		ia.eps[ep] = struct{}{}
		cr.ep = ep
	}
	ia.mu.Unlock()
	ev := Event{Number: ConnectionRequestEvent, CR: ConnRequestData{SP: psp, LocalAddr: req.Info().Local, Qual: psp.qual, CR: cr}}
	if !psp.evd.post(ev) {
		// The consumer never sees this request: refuse it.
		cr.discard()
	}
}

// Free stops the PSP (dat_psp_free). Requests already reported stay valid;
// later ones are refused as non-peer rejects.
func (psp *PSP) Free() error {
	const op = "dat_psp_free"
	if psp == nil {
		return newError(op, InvalidHandle, HandlePSP, "PSP is nil")
	}
	ia := psp.ia
	ia.mu.Lock()
	if psp.freed {
		ia.mu.Unlock()
		return newError(op, InvalidHandle, HandlePSP, "PSP is freed")
	}
	psp.freed = true
	delete(ia.psps, psp)
	psp.evd.refs--
	psp.evd.streams.cr--
	ia.mu.Unlock()
	psp.shutdown()
	return nil
}

// shutdown closes the listener, which ends serve.
func (psp *PSP) shutdown() {
	psp.stop()
	psp.lis.Close()
}

// RSP is a Reserved Service Point (DAT_RSP_HANDLE): a one-shot listener
// bound to one consumer EP. The first request consumes it.
type RSP struct {
	ia    *IA
	qual  ConnQual
	evd   *EVD
	ep    *EP // guarded by ia.mu; nil once consumed or freed
	lis   driver.Listener
	stop  context.CancelFunc
	freed bool
}

// CreateRSP reserves ep for the first request on qual (dat_rsp_create).
// The EP must be UNCONNECTED and becomes RESERVED; when a request arrives
// it becomes PASSIVE_CONNECTION_PENDING, the RSP disappears and the
// request event (with a nil SP) goes to evd.
func (ia *IA) CreateRSP(qual ConnQual, ep *EP, evd *EVD) (*RSP, error) {
	const op = "dat_rsp_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	if qual > 0xFFFF {
		return nil, newError(op, InvalidParameter, Arg(2), "connection qualifier %d: must be a port 1..65535", qual)
	}
	if err := ep.lock(op); err != nil {
		return nil, err
	}
	if ep.ia != ia {
		ia.mu.Unlock()
		return nil, newError(op, InvalidHandle, HandleEP, "EP belongs to another IA")
	}
	if ep.state != EPUnconnected {
		err := ep.stateError(op)
		ia.mu.Unlock()
		return nil, err
	}
	ia.mu.Unlock()
	if err := ia.attachCREVD(op, evd); err != nil {
		return nil, err
	}
	lis, err := ia.prov.Listen(driver.ListenConfig{Port: uint16(qual), Backlog: 1})
	if err != nil {
		ia.detachCREVD(evd)
		return nil, providerError(op, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	rsp := &RSP{ia: ia, qual: ConnQual(portOf(lis.Addr())), evd: evd, lis: lis, stop: stop}
	ia.mu.Lock()
	if ep.freed || ep.state != EPUnconnected {
		err := ep.stateError(op)
		if ep.freed {
			err = newError(op, InvalidHandle, HandleEP, "EP is freed")
		}
		evd.refs--
		evd.streams.cr--
		ia.mu.Unlock()
		stop()
		lis.Close()
		return nil, err
	}
	ep.setStateLocked(EPReserved)
	ep.rsp = rsp
	rsp.ep = ep
	ia.rsps[rsp] = struct{}{}
	ia.bg.Add(1)
	ia.mu.Unlock()
	go func() {
		defer ia.bg.Done()
		rsp.serve(ctx)
	}()
	return rsp, nil
}

// Qual is the connection qualifier the RSP listens on.
func (rsp *RSP) Qual() ConnQual { return rsp.qual }

// serve waits for the one request the RSP takes.
func (rsp *RSP) serve(ctx context.Context) {
	ia := rsp.ia
	req, err := rsp.lis.Accept(ctx)
	if err != nil {
		return
	}
	ia.mu.Lock()
	ep := rsp.ep
	if rsp.freed || ep == nil || ep.state != EPReserved {
		ia.mu.Unlock()
		req.Abort()
		return
	}
	rsp.freed = true
	rsp.ep = nil
	delete(ia.rsps, rsp)
	rsp.evd.refs--
	rsp.evd.streams.cr--
	cr := &CR{ia: ia, req: req, qual: rsp.qual, ep: ep}
	ia.crs[cr] = struct{}{}
	ep.rsp = nil
	ep.cr = cr
	ep.setStateLocked(EPPassiveConnectionPending)
	ia.mu.Unlock()
	rsp.shutdown() // one request only: the RSP is gone
	ev := Event{Number: ConnectionRequestEvent, CR: ConnRequestData{LocalAddr: req.Info().Local, Qual: rsp.qual, CR: cr}}
	if !rsp.evd.post(ev) {
		cr.discard()
	}
}

// Free releases the RSP (dat_rsp_free); its EP returns to UNCONNECTED.
func (rsp *RSP) Free() error {
	const op = "dat_rsp_free"
	if rsp == nil {
		return newError(op, InvalidHandle, HandleRSP, "RSP is nil")
	}
	ia := rsp.ia
	ia.mu.Lock()
	if rsp.freed {
		ia.mu.Unlock()
		return newError(op, InvalidHandle, HandleRSP, "RSP is freed or was consumed by a request")
	}
	rsp.freed = true
	delete(ia.rsps, rsp)
	rsp.evd.refs--
	rsp.evd.streams.cr--
	if ep := rsp.ep; ep != nil && ep.state == EPReserved {
		ep.setStateLocked(EPUnconnected)
		ep.rsp = nil
	}
	rsp.ep = nil
	ia.mu.Unlock()
	rsp.shutdown()
	return nil
}

func (rsp *RSP) shutdown() {
	rsp.stop()
	rsp.lis.Close()
}
