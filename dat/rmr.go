package dat

import "github.com/rdmanet/rdmanet/dat/driver"

// RMR is a Remote Memory Region (DAT_RMR_HANDLE): a memory window that
// exposes part of an LMR to peers under its own rmr_context, with its own
// remote rights, and can be moved or withdrawn without touching the LMR.
//
// Scope: a bound RMR is usable by any connection of its PZ
// (DAT_RMR_SCOPE_PZ), which is what iWARP type 1 windows give.
type RMR struct {
	ia *IA
	pz *PZ

	// Guarded by ia.mu.
	freed  bool
	lmr    *LMR // the LMR it is bound over, nil when unbound
	win    driver.Window
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
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		return nil, err
	}
	if err := pz.check(op, ia); err != nil {
		return nil, err
	}
	if !ia.attr.MemoryWindows {
		return nil, newError(op, ModelNotSupported, NoSubtype, "the provider has no memory windows")
	}
	r := &RMR{ia: ia, pz: pz}
	pz.refs++
	ia.rmrs[r] = struct{}{}
	return r, nil
}

func (r *RMR) lock(op string) error {
	if r == nil {
		return newError(op, InvalidHandle, HandleRMR, "RMR is nil")
	}
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
// target of length 0 unbinds the RMR. A previous binding ends first, so
// its rmr_context stops working.
//
// The binding takes effect before Bind returns; its completion, a
// DAT_RMR_BIND_COMPLETION_EVENT carrying cookie, goes to ep's request EVD
// unless flags has CompletionSuppress. Errors: the LMR or EP in another PZ
// (DAT_PROTECTION_VIOLATION), privileges the LMR lacks
// (DAT_PRIVILEGES_VIOLATION), a range outside the LMR
// (DAT_INVALID_PARAMETER).
func (r *RMR) Bind(target LMRTriplet, priv MemPriv, ep *EP, cookie uint64, flags CompletionFlags) (uint32, error) {
	const op = "dat_rmr_bind"
	if err := r.lock(op); err != nil {
		return 0, err
	}
	ia := r.ia
	locked := true
	defer func() {
		if locked {
			ia.mu.Unlock()
		}
	}()
	if ep == nil || ep.freed || ep.ia != ia {
		return 0, newError(op, InvalidHandle, HandleEP, "EP is nil, freed or of another IA")
	}
	if ep.pz != r.pz {
		return 0, newError(op, ProtectionViolation, NoSubtype, "the EP is in another protection zone")
	}
	if flags&^CompletionSuppress != 0 {
		return 0, newError(op, InvalidParameter, Arg(6), "completion flags %#x: only SUPPRESS applies to a bind", flags)
	}
	if priv&^(MemPrivRemoteRead|MemPrivRemoteWrite) != 0 {
		return 0, newError(op, InvalidParameter, Arg(3), "privileges %#x: a window grants only remote read and write", priv)
	}
	var lmr *LMR
	if target.Length > 0 {
		var ok bool
		lmr, ok = ia.lmrByContext[target.Context]
		if !ok {
			return 0, newError(op, InvalidParameter, Arg(2), "no LMR has lmr_context %#x", target.Context)
		}
		if lmr.pz != r.pz {
			return 0, newError(op, ProtectionViolation, NoSubtype, "the LMR is in another protection zone")
		}
		if priv&^lmr.priv != 0 {
			return 0, newError(op, PrivilegesViolation, NoSubtype, "the window asks for %#x, the LMR grants %#x", priv, lmr.priv)
		}
		base, size := lmr.prov.Addr(), uint64(len(lmr.buf))
		if target.Addr < base || target.Addr-base > size || uint64(target.Length) > size-(target.Addr-base) {
			return 0, newError(op, InvalidParameter, Arg(2), "range [%#x, +%d) leaves its LMR", target.Addr, target.Length)
		}
	}
	old := r.unbindLocked()
	var acc driver.Access
	if priv&MemPrivRemoteRead != 0 {
		acc |= driver.AccessRemoteRead
	}
	if priv&MemPrivRemoteWrite != 0 {
		acc |= driver.AccessRemoteWrite
	}
	evd := ep.reqEVD
	locked = false
	ia.mu.Unlock()
	if old != nil {
		old.Close()
	}
	var rkey uint32
	status := DTOSuccess
	if lmr != nil {
		win, err := r.pz.prov.BindWindow(lmr.prov, target.Addr, uint64(target.Length), acc)
		if err != nil {
			return 0, providerError(op, err)
		}
		ia.mu.Lock()
		if r.freed || lmr.freed {
			// Freed meanwhile: undo rather than leave a window behind.
			ia.mu.Unlock()
			win.Close()
			return 0, newError(op, InvalidHandle, HandleRMR, "RMR or LMR freed during the bind")
		}
		r.win, r.lmr, r.target, r.priv = win, lmr, target, priv
		lmr.windows++
		ia.mu.Unlock()
		rkey = win.RKey()
	}
	if evd != nil && flags&CompletionSuppress == 0 {
		evd.post(Event{Number: RMRBindCompletionEvent, RMRBind: RMRBindCompletion{RMR: r, Cookie: cookie, Status: status}})
	}
	return rkey, nil
}

// unbindLocked drops the current binding and returns the window to close
// once ia.mu is released. Callers hold ia.mu.
func (r *RMR) unbindLocked() driver.Window {
	w := r.win
	if r.lmr != nil {
		r.lmr.windows--
	}
	r.win, r.lmr, r.target, r.priv = nil, nil, LMRTriplet{}, 0
	return w
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
	if err := r.lock(op); err != nil {
		return RMRParam{}, err
	}
	defer r.ia.mu.Unlock()
	p := RMRParam{IA: r.ia, PZ: r.pz, Target: r.target, Priv: r.priv}
	if r.win != nil {
		p.Context = r.win.RKey()
	}
	return p, nil
}

// Free unbinds and destroys the RMR (dat_rmr_free).
func (r *RMR) Free() error {
	const op = "dat_rmr_free"
	if err := r.lock(op); err != nil {
		return err
	}
	ia := r.ia
	r.freed = true
	w := r.unbindLocked()
	r.pz.refs--
	delete(ia.rmrs, r)
	ia.mu.Unlock()
	if w != nil {
		w.Close()
	}
	return nil
}

// RMRBindCompletion is the data of a DAT_RMR_BIND_COMPLETION_EVENT.
type RMRBindCompletion struct {
	RMR    *RMR
	Cookie uint64
	Status DTOStatus
}
