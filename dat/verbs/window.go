//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Window is a type 1 ibv_mw: a memory window of a PD, bound through a QP
// (QP.BindWindow, bind.go). It implements driver.Window.
//
// Type 1 because DAT's RMR belongs to its PZ and may be used by any of its
// connections (RMR scope PZ), which is what a type 1 window is; a type 2
// window is tied to the QP that bound it and must be invalidated before
// it can be bound again. A device with only type 2 windows therefore
// reports none (see queryAttr).
//
// On a device that checks window accesses against the region instead of
// the window (devLimits.windowBoundsByRegion: rxe), each binding is made
// over a registration of exactly the window's range, made for it and
// deregistered once the window no longer references it. That
// registration grants no remote rights of its own (only MW_BIND, and
// local write where a remote-write window needs it, C10-74), so its key
// opens nothing; the window's key reaches exactly its range.
type Window struct {
	pd *PD

	mu sync.Mutex
	mw *C.struct_ibv_mw // nil after Close, or after a failed re-allocation
	// target is the registration the window is bound over, nil while
	// unbound: the consumer's region, or one of the window's own, which
	// own says it must deregister.
	target *C.struct_ibv_mr
	own    bool
	rkey   uint32 // the key of the current binding, while bound
	// stale are own registrations a window that could not be deallocated
	// may still reference; Close deregisters them.
	stale  []*C.struct_ibv_mr
	closed bool
}

var _ driver.Window = (*Window)(nil)

// windowPD is a PD of a device with type 1 memory windows (rxe; not siw):
// only such PDs implement driver.WindowAllocator, and only such QPs
// driver.WindowBinder (windowQP), so package dat finds out by type
// assertion.
type windowPD struct{ *PD }

var _ driver.WindowAllocator = windowPD{}

// AllocWindow allocates an unbound type 1 window (ibv_alloc_mw).
func (p windowPD) AllocWindow() (driver.Window, error) { return p.allocWindow() }

func (pd *PD) allocWindow() (driver.Window, error) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("verbs: alloc window: PD closed: %w", net.ErrClosed)
	}
	var mw *C.struct_ibv_mw
	if rc := C.shim_alloc_mw(pd.pd, &mw); rc != 0 {
		return nil, allocMWError(errnoOf(rc))
	}
	return &Window{pd: pd, mw: mw}, nil
}

func allocMWError(err error) error {
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return fmt.Errorf("verbs: ibv_alloc_mw: %w: %w", err, driver.ErrNotSupported)
	}
	return fmt.Errorf("verbs: %w", localError("ibv_alloc_mw", err))
}

// Binding reports the key of the current binding.
func (w *Window) Binding() (uint32, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rkey, w.target != nil
}

// Close deallocates the window (ibv_dealloc_mw), which ends a binding at
// once: the device forgets the key. A bind in progress is waited for.
func (w *Window) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.mw == nil {
		return nil
	}
	if rc := C.shim_dealloc_mw(w.mw); rc != 0 {
		return fmt.Errorf("verbs: ibv_dealloc_mw: %w", errnoOf(rc))
	}
	w.mw = nil
	w.forgetTargetLocked()
	for _, r := range w.stale {
		w.pd.deregOwn(r)
	}
	w.stale = nil
	return nil
}

// forgetTargetLocked records the window as unbound, deregistering its
// own registration. Callers hold mu and know the device no longer
// references the registration.
func (w *Window) forgetTargetLocked() {
	if w.own {
		w.pd.deregOwn(w.target)
	}
	w.target, w.own, w.rkey = nil, false, 0
}

// resetLocked replaces the ibv_mw by a fresh, unbound one, and drops
// extra, the window's own registration for the failed bind (if any).
// After a bind that failed, was flushed or timed out, the device may or
// may not have applied it (rxe executes a bind before the completions
// ahead of it, and flushes it anyway if the QP fails meanwhile), so the
// window's binding is unknown; deallocating it is the one way to know it
// is gone, and to free the registration it may reference (ibv_dereg_mr
// fails while a window is bound to the region). Callers hold mu.
func (w *Window) resetLocked(extra *C.struct_ibv_mr) {
	if w.mw != nil {
		if rc := C.shim_dealloc_mw(w.mw); rc != 0 {
			// The window may be bound over the old or the new target:
			// keep reporting the old binding, so that package dat keeps
			// its region registered, and keep the new registration
			// for Close.
			w.pd.ia.debug("ibv_dealloc_mw after a failed bind failed", slog.String("error", errnoOf(rc).Error()))
			if extra != nil {
				w.stale = append(w.stale, extra)
			}
			return
		}
	}
	w.mw = nil
	w.forgetTargetLocked()
	if extra != nil {
		w.pd.deregOwn(extra)
	}
	var mw *C.struct_ibv_mw
	if rc := C.shim_alloc_mw(w.pd.pd, &mw); rc != 0 {
		// Later binds fail with ErrResources; Close is a no-op.
		w.pd.ia.debug("ibv_alloc_mw after a failed bind failed", slog.String("error", errnoOf(rc).Error()))
		return
	}
	w.mw = mw
}

// regExact registers [addr, addr+length) of m for a window to be bound
// over (devLimits.windowBoundsByRegion), after checking that the range is
// m's: the registration is the provider's own, and the window's key will
// reach whatever it covers.
func (pd *PD) regExact(m *MR, addr, length uint64, access driver.Access) (*C.struct_ibv_mr, error) {
	if addr < m.va || addr-m.va > uint64(len(m.buf)) || length > uint64(len(m.buf))-(addr-m.va) {
		return nil, fmt.Errorf("verbs: bind window: [%#x, +%d) leaves the region [%#x, +%d): %w", addr, length, m.va, len(m.buf), driver.ErrInvalidAddress)
	}
	flags := C.int(C.IBV_ACCESS_MW_BIND)
	if access&driver.AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_LOCAL_WRITE // C10-74: a remote-write window needs it
	}
	// The memory is m's, which package dat keeps registered (and its
	// Go slice reachable) while the window is bound over it.
	var r *C.struct_ibv_mr
	if rc := C.shim_reg_mr(pd.pd, C.uintptr_t(addr), C.size_t(length), flags, &r); rc != 0 {
		return nil, fmt.Errorf("verbs: bind window: %w", localError("ibv_reg_mr of the window's range", errnoOf(rc)))
	}
	return r, nil
}

// deregOwn deregisters a registration made by regExact.
func (pd *PD) deregOwn(r *C.struct_ibv_mr) {
	if rc := C.shim_dereg_mr(r); rc != 0 {
		pd.ia.debug("ibv_dereg_mr of a window's registration failed", slog.String("error", errnoOf(rc).Error()))
	}
}

// mwAccess maps a window's rights to ibv_access_flags. A window grants
// remote rights only; verbs has no local access through a window.
func mwAccess(a driver.Access) C.int {
	var f C.int
	if a&driver.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&driver.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}
