package dat

import "github.com/rdmanet/rdmanet/dat/driver"

// LMR is a Local Memory Region (DAT_LMR_HANDLE): memory registered with the
// IA for DTOs and, with remote privileges, for peers' RDMA.
//
// Freeing an LMR while DTOs that use it are outstanding is the consumer's
// error, as in DAT; the provider keeps the memory reachable until they
// complete.
type LMR struct {
	ia    *IA
	pz    *PZ
	prov  driver.MR
	buf   []byte // keeps Go memory reachable while registered
	priv  MemPriv
	freed bool // guarded by ia.mu
	// windows counts RMRs bound over the LMR; guarded by ia.mu.
	windows int
}

// CreateLMR registers buf in pz with the given privileges (dat_lmr_create
// for DAT_MEM_TYPE_VIRTUAL). The memory must stay untouched by the Go
// runtime's movers: Go's heap does not move objects, and page-aligned
// regions from unix.Mmap work too.
func (ia *IA) CreateLMR(pz *PZ, buf []byte, priv MemPriv) (*LMR, error) {
	const op = "dat_lmr_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	if len(buf) == 0 {
		return nil, newError(op, InvalidParameter, Arg(3), "region is empty")
	}
	if priv&^MemPrivAll != 0 {
		return nil, newError(op, InvalidParameter, Arg(6), "privileges %#x", priv)
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
	pz.refs++
	ia.mu.Unlock()
	var acc driver.Access
	if priv&MemPrivLocalWrite != 0 {
		acc |= driver.AccessLocalWrite
	}
	if priv&MemPrivRemoteWrite != 0 {
		acc |= driver.AccessRemoteWrite
	}
	if priv&MemPrivRemoteRead != 0 {
		acc |= driver.AccessRemoteRead
	}
	mr, err := pz.prov.Register(buf, acc)
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err != nil {
		pz.refs--
		return nil, providerError(op, err)
	}
	l := &LMR{ia: ia, pz: pz, prov: mr, buf: buf, priv: priv}
	if ia.closed {
		pz.refs--
		mr.Close()
		return nil, newError(op, InvalidHandle, HandleIA, "IA closed during registration")
	}
	ia.lmrs[l] = struct{}{}
	ia.lmrMu.Lock()
	ia.lmrByContext[mr.LKey()] = l
	ia.lmrMu.Unlock()
	return l, nil
}

// LMRParam is what dat_lmr_query reports.
type LMRParam struct {
	IA   *IA
	PZ   *PZ
	Priv MemPriv
	// Context is the lmr_context (local key) and RMRContext the
	// rmr_context (remote key, the STag on iWARP).
	Context, RMRContext uint32
	// Addr and Length describe the registered region as DTOs and peers
	// address it.
	Addr   uint64
	Length uint64
}

// Query reports the LMR's parameters (dat_lmr_query).
func (l *LMR) Query() (LMRParam, error) {
	const op = "dat_lmr_query"
	if l == nil {
		return LMRParam{}, newError(op, InvalidHandle, HandleLMR, "LMR is nil")
	}
	l.ia.mu.Lock()
	defer l.ia.mu.Unlock()
	if l.freed {
		return LMRParam{}, newError(op, InvalidHandle, HandleLMR, "LMR is freed")
	}
	return LMRParam{IA: l.ia, PZ: l.pz, Priv: l.priv, Context: l.prov.LKey(), RMRContext: l.prov.RKey(),
		Addr: l.prov.Addr(), Length: uint64(len(l.buf))}, nil
}

// Free deregisters the LMR (dat_lmr_free).
func (l *LMR) Free() error {
	const op = "dat_lmr_free"
	if l == nil {
		return newError(op, InvalidHandle, HandleLMR, "LMR is nil")
	}
	ia := l.ia
	ia.mu.Lock()
	if l.freed {
		ia.mu.Unlock()
		return newError(op, InvalidHandle, HandleLMR, "LMR is freed")
	}
	if l.windows > 0 {
		ia.mu.Unlock()
		return newError(op, InvalidState, StateLMRInUse, "%d RMRs are bound over the LMR", l.windows)
	}
	l.freed = true
	l.pz.refs--
	delete(ia.lmrs, l)
	ia.lmrMu.Lock()
	delete(ia.lmrByContext, l.prov.LKey())
	ia.lmrMu.Unlock()
	ia.mu.Unlock()
	if err := l.prov.Close(); err != nil {
		return providerError(op, err)
	}
	return nil
}
