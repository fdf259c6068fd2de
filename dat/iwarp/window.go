package iwarp

import (
	"fmt"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// A memory window is, to the data path, just another region: an *MR over a
// sub-slice of its parent's memory, with its own STag and rights, in the
// parent's PD. The placement checks (STag, key, PD, access, bounds) need
// nothing window-specific, and a peer can reach only the window's range.

// BindWindow binds a window over [addr, addr+length) of mr.
func (pd *PD) BindWindow(m driver.MR, addr, length uint64, access driver.Access) (driver.Window, error) {
	parent, ok := m.(*MR)
	if !ok || parent.pd != pd {
		return nil, fmt.Errorf("iwarp: bind window: region %T is not of this PD: %w", m, driver.ErrInvalidAddress)
	}
	if length == 0 || length > 1<<32-1 {
		return nil, fmt.Errorf("iwarp: bind window: length %d not in 1..2^32-1", length)
	}
	b, ok := parent.slice(addr, uint32(length))
	if !ok {
		return nil, fmt.Errorf("iwarp: bind window: [%#x, +%d) leaves the region: %w", addr, length, driver.ErrInvalidAddress)
	}
	w := &MR{pd: pd, buf: b, va: addr, access: access &^ driver.AccessLocalWrite}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("iwarp: bind window: PD closed: %w", driver.ErrNotConnected)
	}
	stag, ok := pd.ia.stags.alloc(w)
	if !ok {
		return nil, fmt.Errorf("iwarp: bind window: %d regions exist: %w", maxMRs, driver.ErrResources)
	}
	pd.mrs[stag] = w
	return w, nil
}
