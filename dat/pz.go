package dat

import "github.com/rdmanet/rdmanet/dat/driver"

// PZ is a Protection Zone (DAT_PZ_HANDLE): EPs may touch only LMRs and RMRs
// of their own PZ.
type PZ struct {
	ia    *IA
	prov  driver.PD
	refs  int // EPs, LMRs, RMRs and SRQs using the PZ; guarded by ia.mu
	freed bool
}

// CreatePZ creates a protection zone (dat_pz_create).
func (ia *IA) CreatePZ() (*PZ, error) {
	const op = "dat_pz_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	ia.mu.Unlock()
	pd, err := ia.prov.AllocPD()
	if err != nil {
		return nil, providerError(op, err)
	}
	pz := &PZ{ia: ia, prov: pd}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		pd.Close()
		return nil, err
	}
	ia.pzs[pz] = struct{}{}
	return pz, nil
}

// check returns an INVALID_HANDLE error (subtype PZ) unless pz is a live
// PZ of ia. Callers hold ia.mu.
func (pz *PZ) check(op string, ia *IA) error {
	if pz == nil || pz.freed || pz.ia != ia {
		return newError(op, InvalidHandle, HandlePZ, "PZ is nil, freed or of another IA")
	}
	return nil
}

// IA returns the PZ's IA (dat_pz_query).
func (pz *PZ) IA() *IA { return pz.ia }

// Free frees the PZ (dat_pz_free). It fails with
// DAT_INVALID_STATE/PZ_IN_USE while an EP, LMR, RMR or SRQ uses it.
func (pz *PZ) Free() error {
	const op = "dat_pz_free"
	if pz == nil {
		return newError(op, InvalidHandle, HandlePZ, "PZ is nil")
	}
	ia := pz.ia
	ia.mu.Lock()
	if err := pz.check(op, ia); err != nil {
		ia.mu.Unlock()
		return err
	}
	if pz.refs > 0 {
		ia.mu.Unlock()
		return newError(op, InvalidState, StatePZInUse, "%d objects still use the PZ", pz.refs)
	}
	pz.freed = true
	delete(ia.pzs, pz)
	ia.mu.Unlock()
	if err := pz.prov.Close(); err != nil {
		return providerError(op, err)
	}
	return nil
}
