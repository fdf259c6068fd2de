package dat

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// EP is an Endpoint (DAT_EP_HANDLE): one reliable connection and its
// state machine. Methods are safe for concurrent use, though DAT marks
// several of them MT-unsafe and callers should not race them against each
// other on one EP.
type EP struct {
	ia *IA

	// evMu orders the establishment of a connection and the provider's
	// report of its end: connectDone and acceptDone hold it from the state
	// change through posting ESTABLISHED, and transportEnded takes it, so
	// DISCONNECTED or BROKEN can never be queued ahead of ESTABLISHED. It
	// is taken before ia.mu, and never held across a call into the
	// provider that may wait for OnDisconnect.
	evMu sync.Mutex

	// srqHeld counts the SRQ receives the EP's QP holds whose events the
	// consumer has not taken (driver.QPConfig.SRQHeld).
	srqHeld atomic.Int32

	// All fields below are guarded by ia.mu.
	state   EPState
	freed   bool
	pz      *PZ
	recvEVD *EVD
	reqEVD  *EVD
	connEVD *EVD
	srq     *SRQ
	attr    EPAttr

	// qp is the provider's QP, created once the EP has a PZ; tag is its
	// Tag. A QP connects once: dat_ep_reset replaces it.
	qp  driver.QP
	tag uint32
	// attempt is the connection establishment (or graceful disconnect) in
	// progress; a new attempt or an abort replaces it, so a late outcome
	// of a superseded attempt is recognised and dropped.
	attempt *attempt
	// providerOwned: created by a PSP with PSPProvider; a reject returns it
	// to the provider, which frees it.
	providerOwned bool
	// cr and rsp link the EP to its pending request or reserving RSP.
	cr  *CR
	rsp *RSP

	// Connection identity, for query and dup_connect.
	localAddr, remoteAddr netip.Addr
	localPort, remotePort PortQual
	// connQual is the qualifier this EP connected to (active side), kept
	// as given so dup_connect is exact.
	connQual ConnQual
	// connOpts are the options of the EP's active connections
	// (SetConnectOptions); nil: none.
	connOpts *ConnectOptions

	// recvPosted records that a Recv was ever posted, which freezes the
	// recv completion flags ([SEED-modify]).
	recvPosted atomic.Bool
	// view is what posts read instead of the fields above (see epView).
	view atomic.Pointer[epView]
	// recvQ and sendQ are the outstanding work of each queue, in post
	// order; their lengths are the outstanding counts get_status reports.
	recvQ, sendQ wrQueue
	// recvMu and sendMu serialise the posts of each queue. Taken before
	// ia.mu and the queue's own lock.
	recvMu, sendMu sync.Mutex
	// recvSGE and sendSGE are the queues' segment scratch, guarded by
	// recvMu and sendMu.
	recvSGE, sendSGE [maxInlineSGE]driver.SGE
	// list is PostSendList's scratch, guarded by sendMu; it grows to the
	// longest list posted and is kept.
	list sendListScratch
}

// attempt is one asynchronous connection operation of an EP.
type attempt struct {
	cancel context.CancelFunc
	// lost records that the provider reported the new connection's end
	// (with lostErr) before the attempt itself completed; guarded by ia.mu.
	lost    bool
	lostErr error
}

// CreateEP creates an endpoint in DAT_EP_STATE_UNCONNECTED (dat_ep_create).
//
// Any EVD may be nil: the consumer is then not interested in that stream.
// A nil attr takes provider defaults, which Query reports. pz may be nil;
// the EP then cannot connect or accept until Modify sets one
// (DAT_INVALID_STATE/EP_NOTREADY).
//
// EP completion streams sharing an EVD must have compatible completion
// flags (DAT_INVALID_PARAMETER otherwise). In particular an EVD that also
// carries connection, CR or software events (one created with EVDSoftware)
// only takes streams whose flags are CompletionEVDThreshold (or
// CompletionDefault, which means the same).
func (ia *IA) CreateEP(pz *PZ, recv, req, conn *EVD, attr *EPAttr) (*EP, error) {
	return ia.createEP("dat_ep_create", pz, recv, req, conn, nil, attr)
}

// CreateEPWithSRQ creates an endpoint whose receives come from srq
// (dat_ep_create_with_srq). attr must not be nil. max_recv_iov is ignored
// (the EP takes the SRQ's); every other attribute is honoured exactly or
// the call fails. The EP's PZ may differ from the SRQ's only where the
// provider supports it (ProviderAttr.SRQEPPZDifferenceSupported).
func (ia *IA) CreateEPWithSRQ(pz *PZ, recv, req, conn *EVD, srq *SRQ, attr *EPAttr) (*EP, error) {
	const op = "dat_ep_create_with_srq"
	if attr == nil {
		return nil, newError(op, InvalidParameter, Arg(7), "ep_attributes cannot be NULL")
	}
	if srq == nil {
		return nil, newError(op, InvalidHandle, HandleSRQ, "SRQ is nil")
	}
	return ia.createEP(op, pz, recv, req, conn, srq, attr)
}

func (ia *IA) createEP(op string, pz *PZ, recv, req, conn *EVD, srq *SRQ, attr *EPAttr) (*EP, error) {
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	if err := ia.checkEPHandles(op, pz, recv, req, conn, srq); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	var a EPAttr
	if attr == nil {
		a = ia.defaultEPAttr(recv, req)
	} else {
		a = *attr
	}
	if srq != nil {
		if !ia.attr.SRQPDDifference && pz != nil && pz != srq.pz {
			ia.mu.Unlock()
			return nil, newError(op, InvalidParameter, Arg(2),
				"the EP's PZ differs from the SRQ's and the provider lacks srq_ep_pz_difference_support")
		}
		// max_recv_iov is ignored: the SRQ's segments rule receives.
		a.MaxRecvIOV = srq.attr.MaxRecvIOV
	}
	if code, why := ia.attrProblem(&a, recv, req, srq != nil); code != Success {
		ia.mu.Unlock()
		return nil, newError(op, code, NoSubtype, "%s", why)
	}
	ep := &EP{ia: ia, state: EPUnconnected, attr: a}
	ep.recvQ.ep, ep.recvQ.recv, ep.sendQ.ep = ep, true, ep
	if why := ep.streamProblem(recv, req, conn, &a); why != "" {
		ia.mu.Unlock()
		return nil, newError(op, InvalidParameter, NoSubtype, "%s", why)
	}
	ep.attach(pz, recv, req, conn, srq)
	ia.eps[ep] = struct{}{}
	ia.mu.Unlock()

	if pz != nil {
		if err := ep.ensureQP(op); err != nil {
			ep.Free()
			return nil, err
		}
	}
	return ep, nil
}

// checkEPHandles validates the handles an EP is built from, giving
// DAT_INVALID_HANDLE with the subtype naming the bad handle, as
// dat_ep_create does for its handle arguments. Modify reuses it and turns
// those errors into DAT_INVALID_PARAMETER (handleAsParameter). Callers hold
// ia.mu.
func (ia *IA) checkEPHandles(op string, pz *PZ, recv, req, conn *EVD, srq *SRQ) error {
	if pz != nil {
		if err := pz.check(op, ia); err != nil {
			return err
		}
	}
	if recv != nil {
		if err := recv.check(op, ia, EVDDTO, HandleEVDRecv); err != nil {
			return err
		}
	}
	if req != nil {
		if err := req.check(op, ia, EVDDTO, HandleEVDRequest); err != nil {
			return err
		}
	}
	if conn != nil {
		if err := conn.check(op, ia, EVDConnection, HandleEVDConn); err != nil {
			return err
		}
	}
	if srq != nil {
		if err := srq.check(op, ia); err != nil {
			return err
		}
	}
	return nil
}

// streamProblem applies the EVD completion-flag rules to the streams this
// EP would attach. Callers hold ia.mu.
func (ep *EP) streamProblem(recv, req, conn *EVD, a *EPAttr) string {
	recvFlags, reqFlags := a.RecvCompletionFlags, a.RequestCompletionFlags
	if recv != nil && recv == req && normFlags(recvFlags) != normFlags(reqFlags) {
		return "the EP's recv and request streams share an EVD but their completion flags differ"
	}
	if recv != nil {
		if why := recv.canAddDTO(recvFlags, ep); why != "" {
			return "recv EVD: " + why
		}
		if recv == conn && normFlags(recvFlags) != CompletionEVDThreshold {
			return "recv EVD is also the connection EVD, so only EVD_THRESHOLD completion flags are allowed"
		}
	}
	if req != nil {
		if why := req.canAddDTO(reqFlags, ep); why != "" {
			return "request EVD: " + why
		}
		if req == conn && normFlags(reqFlags) != CompletionEVDThreshold {
			return "request EVD is also the connection EVD, so only EVD_THRESHOLD completion flags are allowed"
		}
	}
	if conn != nil {
		if why := conn.canAddOther(ep); why != "" {
			return "connection EVD: " + why
		}
	}
	return ""
}

// attach takes references on the EP's objects. Callers hold ia.mu.
func (ep *EP) attach(pz *PZ, recv, req, conn *EVD, srq *SRQ) {
	ep.pz, ep.recvEVD, ep.reqEVD, ep.connEVD, ep.srq = pz, recv, req, conn, srq
	ep.syncQueues()
	if pz != nil {
		pz.refs++
	}
	if recv != nil {
		recv.refs++
		recv.addDTO(ep, true, ep.attr.RecvCompletionFlags)
	}
	if req != nil {
		req.refs++
		req.addDTO(ep, false, ep.attr.RequestCompletionFlags)
	}
	if conn != nil {
		conn.refs++
		conn.streams.conn++
	}
	if srq != nil {
		srq.refs++
	}
}

// detach drops the references attach took. Callers hold ia.mu.
func (ep *EP) detach() {
	if ep.pz != nil {
		ep.pz.refs--
	}
	if ep.recvEVD != nil {
		ep.recvEVD.refs--
		ep.recvEVD.removeDTO(ep)
	}
	if ep.reqEVD != nil {
		ep.reqEVD.refs--
		ep.reqEVD.removeDTO(ep)
	}
	if ep.connEVD != nil {
		ep.connEVD.refs--
		ep.connEVD.streams.conn--
	}
	if ep.srq != nil {
		ep.srq.refs--
	}
	ep.pz, ep.recvEVD, ep.reqEVD, ep.connEVD, ep.srq = nil, nil, nil, nil, nil
	ep.syncQueues()
}

// syncQueues brings the work queues in line with the EP's EVDs, flags and
// sizes. Callers hold ia.mu.
func (ep *EP) syncQueues() {
	ep.publishLocked()
	ep.recvQ.resize(ep.attr.MaxRecvDTOs)
	ep.sendQ.resize(ep.attr.MaxRequestDTOs)
	ep.recvQ.mu.Lock()
	ep.recvQ.evd, ep.recvQ.srq = ep.recvEVD, ep.srq
	ep.recvQ.solicitedOnly = normFlags(ep.attr.RecvCompletionFlags) == CompletionSolicitedWait
	ep.recvQ.mu.Unlock()
	ep.sendQ.mu.Lock()
	ep.sendQ.evd = ep.reqEVD
	ep.sendQ.mu.Unlock()
}

// check returns INVALID_HANDLE (subtype EP) unless ep is a live EP. Callers
// hold ep.ia.mu.
func (ep *EP) check(op string) error {
	if ep.freed {
		return newError(op, InvalidHandle, HandleEP, "EP is freed")
	}
	return nil
}

// lock takes the IA lock and checks the handle, for the common prologue of
// EP methods. On error the lock is not held.
func (ep *EP) lock(op string) error {
	if ep == nil {
		return newError(op, InvalidHandle, HandleEP, "EP is nil")
	}
	ep.ia.mu.Lock()
	if err := ep.check(op); err != nil {
		ep.ia.mu.Unlock()
		return err
	}
	return nil
}

// stateError is DAT_INVALID_STATE with the subtype naming the EP's state.
func (ep *EP) stateError(op string) error {
	return newError(op, InvalidState, ep.state.subtype(), "EP is %v", ep.state)
}

// driverConfig is the provider view of the EP's attributes. Callers hold
// ia.mu.
func (ep *EP) driverConfig() driver.QPConfig {
	a := &ep.attr
	cfg := driver.QPConfig{
		MaxSendWR: a.MaxRequestDTOs, MaxRecvWR: a.MaxRecvDTOs,
		MaxSendSGE: a.MaxRequestIOV, MaxRecvSGE: a.MaxRecvIOV,
		IRD: a.MaxRDMAReadIn, ORD: a.MaxRDMAReadOut,
		MaxMessageSize: a.MaxMessageSize, MaxRDMASize: a.MaxRDMASize,
	}
	if ep.pz != nil {
		cfg.PD = ep.pz.prov
	}
	if ep.srq != nil {
		cfg.SRQ, cfg.SRQHeld = ep.srq.prov, &ep.srqHeld
	}
	if ep.recvEVD != nil {
		cfg.RecvCQ = ep.recvEVD.cq
	}
	if ep.reqEVD != nil {
		cfg.SendCQ = ep.reqEVD.cq
	}
	return cfg
}

// ensureQP creates the provider QP if the EP has a PZ and no QP yet.
func (ep *EP) ensureQP(op string) error {
	ia := ep.ia
	ia.mu.Lock()
	if ep.qp != nil || ep.pz == nil || ep.freed {
		ia.mu.Unlock()
		return nil
	}
	cfg := ep.driverConfig()
	ia.mu.Unlock()
	tag := ia.tagQP(ep)
	cfg.Tag = tag
	cfg.OnDisconnect = func(err error) { ep.transportEnded(tag, err) }
	qp, err := ia.prov.CreateQP(cfg)
	if err != nil {
		ia.untagQP(tag)
		return providerError(op, err)
	}
	ia.mu.Lock()
	if ep.qp != nil || ep.freed {
		ia.mu.Unlock()
		qp.Close()
		ia.untagQP(tag)
		return nil
	}
	ep.qp, ep.tag = qp, tag
	ep.publishLocked()
	ia.mu.Unlock()
	return nil
}

// Query reports the EP's parameters (dat_ep_query).
func (ep *EP) Query() (EPParam, error) {
	const op = "dat_ep_query"
	if err := ep.lock(op); err != nil {
		return EPParam{}, err
	}
	defer ep.ia.mu.Unlock()
	p := EPParam{
		IA: ep.ia, State: ep.state,
		LocalAddr: ep.localAddr, LocalPortQual: ep.localPort,
		RemoteAddr: ep.remoteAddr, RemotePortQual: ep.remotePort,
		PZ: ep.pz, RecvEVD: ep.recvEVD, RequestEVD: ep.reqEVD, ConnectEVD: ep.connEVD,
		SRQ: ep.srq, Attr: ep.attr,
	}
	if !p.LocalAddr.IsValid() {
		p.LocalAddr = ep.ia.localAddr()
	}
	p.Attr.TransportSpecific = append([]NamedAttr(nil), ep.attr.TransportSpecific...)
	p.Attr.ProviderSpecific = append([]NamedAttr(nil), ep.attr.ProviderSpecific...)
	return p, nil
}

// Status is what dat_ep_get_status reports.
type Status struct {
	State EPState
	// RecvIdle and RequestIdle report that no receive, respectively no
	// send-side DTO, is outstanding.
	RecvIdle, RequestIdle bool
}

// GetStatus reports the EP's state and whether its DTO queues are idle
// (dat_ep_get_status).
func (ep *EP) GetStatus() (Status, error) {
	const op = "dat_ep_get_status"
	if err := ep.lock(op); err != nil {
		return Status{}, err
	}
	defer ep.ia.mu.Unlock()
	ep.recvQ.mu.Lock()
	recvIdle := ep.recvQ.outstanding() == 0
	ep.recvQ.mu.Unlock()
	ep.sendQ.mu.Lock()
	reqIdle := ep.sendQ.outstanding() == 0
	ep.sendQ.mu.Unlock()
	return Status{State: ep.state, RecvIdle: recvIdle, RequestIdle: reqIdle}, nil
}

// Reset returns a DISCONNECTED EP to UNCONNECTED so it can connect again
// (dat_ep_reset). On an UNCONNECTED EP it does nothing. Completions not yet
// dequeued may be lost. Other states give DAT_INVALID_STATE.
func (ep *EP) Reset() error {
	const op = "dat_ep_reset"
	if err := ep.lock(op); err != nil {
		return err
	}
	ia := ep.ia
	switch ep.state {
	case EPUnconnected:
		ia.mu.Unlock()
		return nil
	case EPDisconnected:
	default:
		err := ep.stateError(op)
		ia.mu.Unlock()
		return err
	}
	// A QP connects once: the old one goes (its completions were all
	// polled or flushed when the EP became DISCONNECTED) and a fresh one
	// takes its place.
	qp, tag := ep.qp, ep.tag
	ep.qp, ep.tag = nil, 0
	ep.publishLocked()
	ep.attempt = nil
	ep.setStateLocked(EPUnconnected)
	ep.localAddr, ep.remoteAddr, ep.localPort, ep.remotePort, ep.connQual = netip.Addr{}, netip.Addr{}, 0, 0, 0
	ia.mu.Unlock()
	if qp != nil {
		qp.Close()
		ia.untagQP(tag)
	}
	for _, q := range []*wrQueue{&ep.recvQ, &ep.sendQ} {
		q.mu.Lock()
		q.revive()
		q.mu.Unlock()
	}
	return ep.ensureQP(op)
}

// Free destroys the EP (dat_ep_free), aborting any connection or
// establishment in progress. An EP that is RESERVED by an RSP or has a
// pending connection request (PASSIVE or TENTATIVE_CONNECTION_PENDING)
// gives DAT_INVALID_STATE: free the RSP, or accept or reject the request,
// first.
func (ep *EP) Free() error {
	const op = "dat_ep_free"
	if err := ep.lock(op); err != nil {
		return err
	}
	switch ep.state {
	case EPReserved, EPPassiveConnectionPending, EPTentativeConnectionPending:
		err := ep.stateError(op)
		ep.ia.mu.Unlock()
		return err
	}
	ep.destroyLocked()
	ep.ia.mu.Unlock()
	ep.releaseProvider()
	return nil
}

// destroyLocked marks the EP freed, cancels its attempt and drops its
// references. Callers hold ia.mu and call releaseProvider afterwards.
func (ep *EP) destroyLocked() {
	ep.freed = true
	ep.publishLocked()
	if ep.attempt != nil {
		ep.attempt.cancel()
		ep.attempt = nil
	}
	if ep.rsp != nil {
		ep.rsp.ep = nil
		ep.rsp = nil
	}
	ep.detach()
	delete(ep.ia.eps, ep)
}

// releaseProvider closes the EP's QP. Called without ia.mu, after
// destroyLocked.
func (ep *EP) releaseProvider() {
	ep.ia.mu.Lock()
	qp, tag := ep.qp, ep.tag
	ep.qp, ep.tag = nil, 0
	ep.publishLocked()
	ep.ia.mu.Unlock()
	if qp != nil {
		qp.Close()
		ep.ia.untagQP(tag)
	}
}
