package iwarp

import (
	"fmt"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// A memory window is, to the data path, just another region: each binding
// is an *MR over a sub-slice of its parent's memory, with its own STag and
// rights, in the parent's PD. The placement checks (STag, key, PD, access,
// bounds) need nothing window-specific, and a peer can reach only the
// window's range. Rebinding releases the old binding's STag and takes a
// new one, so the old STag stops working at once.
//
// Nothing goes on the wire: the bind happens in BindWindow itself, so it
// is in effect when BindWindow returns, and no send-side work is
// involved. The QP is only checked (connected, same PD) so that package
// dat's EP rules hold the same on every provider.

// Window is a memory window of a PD. It implements driver.Window.
type Window struct {
	pd *PD

	mu     sync.Mutex
	cur    *MR // the current binding, nil when unbound
	closed bool
}

var _ driver.Window = (*Window)(nil)

// AllocWindow allocates an unbound window in pd.
func (pd *PD) AllocWindow() (driver.Window, error) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("iwarp: alloc window: PD closed: %w", net.ErrClosed)
	}
	return &Window{pd: pd}, nil
}

// Binding reports the current binding's STag.
func (w *Window) Binding() (uint32, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return 0, false
	}
	return w.cur.stag, true
}

// Close unbinds and frees the window. It is idempotent.
func (w *Window) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.cur != nil {
		w.cur.Close()
		w.cur = nil
	}
	return nil
}

// BindWindow binds w over [addr, addr+length) of m, or unbinds it (m nil,
// length 0). The QP must be connected and in the window's PD.
func (q *QP) BindWindow(dw driver.Window, m driver.MR, addr, length uint64, access driver.Access) (uint32, error) {
	w, ok := dw.(*Window)
	if !ok {
		return 0, fmt.Errorf("iwarp: bind window: window %T is not of this provider: %w", dw, driver.ErrInvalidAddress)
	}
	q.mu.Lock()
	s, pd := q.state, q.cfg.PD
	q.mu.Unlock()
	if s != qpConnected {
		return 0, errInvalidState("bind window", s)
	}
	if pd != driver.PD(w.pd) {
		return 0, fmt.Errorf("iwarp: bind window: the window is in another PD than the QP: %w", driver.ErrInvalidAddress)
	}
	var b *MR
	if m != nil || length != 0 {
		var err error
		if b, err = w.pd.windowRegion(m, addr, length, access); err != nil {
			return 0, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		if b != nil {
			b.Close()
		}
		return 0, fmt.Errorf("iwarp: bind window: window closed: %w", net.ErrClosed)
	}
	if w.cur != nil {
		w.cur.Close()
	}
	w.cur = b
	if b == nil {
		return 0, nil
	}
	return b.stag, nil
}

// windowRegion registers the region a binding of [addr, addr+length) of
// m exposes, under a new STag.
func (pd *PD) windowRegion(m driver.MR, addr, length uint64, access driver.Access) (*MR, error) {
	parent, ok := m.(*MR)
	if !ok || parent.pd != pd {
		return nil, fmt.Errorf("iwarp: bind window: region %T is not of the window's PD: %w", m, driver.ErrInvalidAddress)
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
		return nil, fmt.Errorf("iwarp: bind window: PD closed: %w", net.ErrClosed)
	}
	stag, ok := pd.ia.stags.alloc(w)
	if !ok {
		return nil, fmt.Errorf("iwarp: bind window: %d regions exist: %w", maxMRs, driver.ErrResources)
	}
	pd.mrs[stag] = w
	return w, nil
}
