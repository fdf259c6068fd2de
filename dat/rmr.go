package dat

import (
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// RMR is a Remote Memory Region (DAT_RMR_HANDLE): a memory window that
// exposes part of an LMR to peers under its own rmr_context, with its own
// remote rights, and can be moved or withdrawn without touching the LMR.
//
// The provider's window exists from CreateRMR to Free, bound or not
// (verbs: ibv_alloc_mw to ibv_dealloc_mw); Bind binds it through an EP
// (driver.Window explains why the bind is the QP's).
//
// Scope: a bound RMR is usable by any connection of its PZ
// (DAT_RMR_SCOPE_PZ), which is what iWARP STags and verbs type 1 windows
// give.
type RMR struct {
	ia  *IA
	pz  *PZ
	win driver.Window

	// opMu serialises Bind and Free of this RMR. Both call the provider
	// without ia.mu, and the bookkeeping below must follow the window's
	// bindings one at a time. Taken before ia.mu.
	opMu sync.Mutex

	// Guarded by ia.mu.
	freed  bool
	lmr    *LMR // the LMR it is bound over, nil when unbound
	rkey   uint32
	target LMRTriplet
	priv   MemPriv
}

// CreateRMR creates an unbound RMR in pz (dat_rmr_create). An IA whose
// provider has no memory windows gives DAT_MODEL_NOT_SUPPORTED.
func (ia *IA) CreateRMR(pz *PZ) (*RMR, error) {
	const op = "dat_rmr_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	if err := pz.check(op, ia); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	alloc, ok := pz.prov.(driver.WindowAllocator)
	if !ok {
		ia.mu.Unlock()
		return nil, newError(op, ModelNotSupported, NoSubtype, "the provider has no memory windows")
	}
	pz.refs++ // the PZ cannot go while the provider allocates in it
	ia.mu.Unlock()
	win, err := alloc.AllocWindow()
	ia.mu.Lock()
	if err != nil {
		pz.refs--
		ia.mu.Unlock()
		return nil, providerError(op, err)
	}
	if ia.closed {
		pz.refs--
		ia.mu.Unlock()
		win.Close()
		return nil, newError(op, InvalidHandle, HandleIA, "IA closed during the allocation")
	}
	r := &RMR{ia: ia, pz: pz, win: win}
	ia.rmrs[r] = struct{}{}
	ia.mu.Unlock()
	return r, nil
}

func (r *RMR) lock(op string) error {
	r.ia.mu.Lock()
	if r.freed {
		r.ia.mu.Unlock()
		return newError(op, InvalidHandle, HandleRMR, "RMR is freed")
	}
	return nil
}

// Bind binds the RMR over the LMR range target with the remote privileges
// priv (MemPrivRemoteRead and/or MemPrivRemoteWrite), through ep
// (dat_rmr_bind), and returns the new rmr_context to give the peer. A
// target of length 0 unbinds the RMR (and returns 0). The previous
// binding's rmr_context stops working.
//
// A bind is a request of ep's: ep must be CONNECTED (DAT_INVALID_STATE
// otherwise, as in DAPL: verbs binds through the QP's send queue, which
// works only while connected), and it takes one of the EP's
// max_request_dtos (DAT_INSUFFICIENT_RESOURCES when they are all taken).
//
// The binding takes effect before Bind returns; its completion, a
// DAT_RMR_BIND_COMPLETION_EVENT carrying cookie, then goes to ep's request
// EVD unless flags has CompletionSuppress. That event is DAT's RMR bind
// stream: DTOs posted before the bind may complete after it. Errors: the
// LMR or EP in another PZ (DAT_PROTECTION_VIOLATION), privileges the LMR
// lacks or that the adapter refuses (DAT_PRIVILEGES_VIOLATION), a range
// outside the LMR (DAT_INVALID_PARAMETER). A bind the adapter failed also
// breaks the connection, as any failed request does, and may leave the
// RMR unbound (Query says).
func (r *RMR) Bind(target LMRTriplet, priv MemPriv, ep *EP, cookie uint64, flags CompletionFlags) (uint32, error) {
	const op = "dat_rmr_bind"
	if r == nil {
		return 0, newError(op, InvalidHandle, HandleRMR, "RMR is nil")
	}
	r.opMu.Lock()
	defer r.opMu.Unlock()
	if err := r.lock(op); err != nil {
		return 0, err
	}
	ia := r.ia
	lmr, err := r.checkBindLocked(op, target, priv, ep, flags)
	if err != nil {
		ia.mu.Unlock()
		return 0, err
	}
	var acc driver.Access
	if priv&MemPrivRemoteRead != 0 {
		acc |= driver.AccessRemoteRead
	}
	if priv&MemPrivRemoteWrite != 0 {
		acc |= driver.AccessRemoteWrite
	}
	var mr driver.MR
	if lmr != nil {
		// Held from now on: the adapter may reference the region as soon
		// as the bind is posted, so the LMR must not be freed under it.
		lmr.windows++
		mr = lmr.prov
	}
	qp, evd := ep.qp.(driver.WindowBinder), ep.reqEVD
	ia.mu.Unlock()

	rkey, err := qp.BindWindow(r.win, mr, target.Addr, uint64(target.Length), acc)
	stillBound := true
	if err != nil {
		_, stillBound = r.win.Binding() // a failure may have unbound it
	}

	ia.mu.Lock()
	if lmr != nil {
		lmr.windows-- // the hold becomes r's below if the bind took
	}
	if r.freed {
		// Only an abrupt IA close frees an RMR during a bind (Free waits
		// for opMu); it has taken the window over to close it.
		ia.mu.Unlock()
		return 0, newError(op, InvalidHandle, HandleRMR, "RMR freed by dat_ia_close during the bind")
	}
	if err != nil {
		if !stillBound {
			r.forgetLocked()
		}
		ia.mu.Unlock()
		return 0, providerError(op, err)
	}
	r.forgetLocked()
	if lmr != nil {
		lmr.windows++
		r.lmr, r.rkey, r.target, r.priv = lmr, rkey, target, priv
	} else {
		rkey = 0
	}
	ia.mu.Unlock()
	if evd != nil && flags&CompletionSuppress == 0 {
		evd.post(Event{Number: RMRBindCompletionEvent, RMRBind: RMRBindCompletion{RMR: r, Cookie: cookie, Status: DTOSuccess}})
	}
	return rkey, nil
}

// checkBindLocked validates a bind's arguments and returns the target
// LMR (nil for an unbind). Callers hold ia.mu.
func (r *RMR) checkBindLocked(op string, target LMRTriplet, priv MemPriv, ep *EP, flags CompletionFlags) (*LMR, error) {
	ia := r.ia
	if ep == nil || ep.freed || ep.ia != ia {
		return nil, newError(op, InvalidHandle, HandleEP, "EP is nil, freed or of another IA")
	}
	if ep.pz != r.pz {
		return nil, newError(op, ProtectionViolation, NoSubtype, "the EP is in another protection zone")
	}
	if flags&^CompletionSuppress != 0 {
		return nil, newError(op, InvalidParameter, Arg(6), "completion flags %#x: only SUPPRESS applies to a bind", flags)
	}
	if priv&^(MemPrivRemoteRead|MemPrivRemoteWrite) != 0 {
		return nil, newError(op, InvalidParameter, Arg(3), "privileges %#x: a window grants only remote read and write", priv)
	}
	if ep.state != EPConnected || ep.qp == nil {
		return nil, ep.stateError(op)
	}
	if _, ok := ep.qp.(driver.WindowBinder); !ok {
		return nil, newError(op, ModelNotSupported, NoSubtype, "the provider cannot bind memory windows")
	}
	ep.sendQ.mu.Lock()
	full := ep.sendQ.full()
	ep.sendQ.mu.Unlock()
	if full {
		return nil, newError(op, InsufficientResources, NoSubtype, "the EP's request queue is full (max_request_dtos %d)", ep.attr.MaxRequestDTOs)
	}
	if target.Length == 0 {
		return nil, nil
	}
	lmr, ok := ia.lmrByContext[target.Context]
	if !ok {
		return nil, newError(op, InvalidParameter, Arg(2), "no LMR has lmr_context %#x", target.Context)
	}
	if lmr.pz != r.pz {
		return nil, newError(op, ProtectionViolation, NoSubtype, "the LMR is in another protection zone")
	}
	if priv&^lmr.priv != 0 {
		return nil, newError(op, PrivilegesViolation, NoSubtype, "the window asks for %#x, the LMR grants %#x", priv, lmr.priv)
	}
	base, size := lmr.prov.Addr(), uint64(len(lmr.buf))
	if target.Addr < base || target.Addr-base > size || uint64(target.Length) > size-(target.Addr-base) {
		return nil, newError(op, InvalidParameter, Arg(2), "range [%#x, +%d) leaves its LMR", target.Addr, target.Length)
	}
	return lmr, nil
}

// forgetLocked drops the record of the current binding and its hold on
// the LMR. Callers hold ia.mu and have made sure the window no longer
// references the LMR (rebound, unbound or closed).
func (r *RMR) forgetLocked() {
	if r.lmr != nil {
		r.lmr.windows--
	}
	r.lmr, r.rkey, r.target, r.priv = nil, 0, LMRTriplet{}, 0
}

// RMRParam is what dat_rmr_query reports.
type RMRParam struct {
	IA *IA
	PZ *PZ
	// Target is the bound LMR range (zero when unbound), Priv its rights,
	// and Context the rmr_context peers use (0 when unbound).
	Target  LMRTriplet
	Priv    MemPriv
	Context uint32
}

// Query reports the RMR's parameters (dat_rmr_query).
func (r *RMR) Query() (RMRParam, error) {
	const op = "dat_rmr_query"
	if r == nil {
		return RMRParam{}, newError(op, InvalidHandle, HandleRMR, "RMR is nil")
	}
	if err := r.lock(op); err != nil {
		return RMRParam{}, err
	}
	defer r.ia.mu.Unlock()
	return RMRParam{IA: r.ia, PZ: r.pz, Target: r.target, Priv: r.priv, Context: r.rkey}, nil
}

// Free unbinds and destroys the RMR (dat_rmr_free). Its rmr_context stops
// working before Free returns. It needs no EP: the provider frees the
// window (verbs: ibv_dealloc_mw) rather than unbinding it through a QP.
func (r *RMR) Free() error {
	const op = "dat_rmr_free"
	if r == nil {
		return newError(op, InvalidHandle, HandleRMR, "RMR is nil")
	}
	r.opMu.Lock()
	defer r.opMu.Unlock()
	if err := r.lock(op); err != nil {
		return err
	}
	ia := r.ia
	r.freed = true
	ia.mu.Unlock()
	// The window goes first: until it is closed the adapter may still
	// reference the LMR, which therefore stays held.
	err := r.win.Close()
	ia.mu.Lock()
	if ia.rmrs != nil { // else dat_ia_close has taken the RMR over
		r.forgetLocked()
		r.pz.refs--
		delete(ia.rmrs, r)
	}
	ia.mu.Unlock()
	if err != nil {
		return providerError(op, err)
	}
	return nil
}

// releaseLocked marks the RMR freed, drops its bookkeeping and returns
// its window for the caller to close once ia.mu is released. For
// dat_ia_close, which frees every RMR. Callers hold ia.mu.
func (r *RMR) releaseLocked() driver.Window {
	r.freed = true
	r.forgetLocked()
	return r.win
}

// RMRBindCompletion is the data of a DAT_RMR_BIND_COMPLETION_EVENT.
type RMRBindCompletion struct {
	RMR    *RMR
	Cookie uint64
	Status DTOStatus
}
