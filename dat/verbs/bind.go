//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// bindTimeout bounds how long BindWindow waits for its bind's completion.
// A bind is a local operation and completes at once, but its completion
// comes in send-queue order, after everything posted before it: a Send
// held up by receiver-not-ready retries (rnr_retry 7 retries forever)
// would hold it up for ever. A variable so that tests can shorten it.
var bindTimeout = 10 * time.Second

// bindWait is the provider's own record of a posted bind: it sits in the
// send queue's FIFO like any request, so completions keep pairing with
// entries in post order, but its completion goes to the waiting
// BindWindow, never to the handler.
type bindWait struct {
	done   chan struct{} // closed once the completion (or flush) arrives
	status uint32        // ibv_wc_status; written before done is closed
}

// finish records the bind's completion status. Callers hold QP.mu; an
// entry completes exactly once.
func (b *bindWait) finish(status uint32) {
	b.status = status
	close(b.done)
}

// BindWindow binds dw over [addr, addr+length) of dm through the QP's send
// queue (ibv_bind_mw, type 1), or unbinds it (dm nil, length 0), and waits
// for the bind's completion. The QP must be connected and in the window's
// PD.
//
// Range and rights are left to the device, which checks them against the
// region (package dat has validated them against the LMR already), except
// where the window gets a registration of its own (Window), whose range
// is checked here (driver.ErrInvalidAddress). A bind the device refuses
// completes with IBV_WC_MW_BIND_ERR, which moves the QP to the error
// state, so the connection is reported broken, as after any failed
// request, and BindWindow returns an error wrapping
// driver.ErrAccessRefused. A bind flushed by a connection ending
// meanwhile wraps driver.ErrNotConnected. A bind not completed within
// bindTimeout breaks the connection (so that the device flushes it and
// nothing stays in limbo) and wraps context.DeadlineExceeded. After any
// of these the window is unbound (resetLocked says why); after an error
// returned before the bind was posted it is unchanged.
func (q *QP) BindWindow(dw driver.Window, dm driver.MR, addr, length uint64, access driver.Access) (uint32, error) {
	w, ok := dw.(*Window)
	if !ok || w.pd.ia != q.ia {
		return 0, fmt.Errorf("verbs: bind window: window %T is not of this IA: %w", dw, driver.ErrInvalidAddress)
	}
	var m *MR
	if dm != nil {
		if m, ok = dm.(*MR); !ok || m.pd != w.pd {
			return 0, fmt.Errorf("verbs: bind window: region %T is not of the window's PD: %w", dm, driver.ErrInvalidAddress)
		}
	} else if length != 0 {
		return 0, fmt.Errorf("verbs: bind window: %d bytes of no region: %w", length, driver.ErrInvalidAddress)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return 0, fmt.Errorf("verbs: bind window: window closed: %w", net.ErrClosed)
	case w.mw == nil:
		return 0, fmt.Errorf("verbs: bind window: the window was lost after a failed bind: %w", driver.ErrResources)
	}

	// target is what the device binds the window over.
	var target *C.struct_ibv_mr
	own := false
	switch {
	case m == nil && w.target == nil:
		// Nothing to unbind and nothing to post, but the same rule as
		// for a real bind.
		q.mu.Lock()
		s := q.state
		q.mu.Unlock()
		if s != qpConnected {
			return 0, errInvalidState("bind window", s)
		}
		return 0, nil
	case m == nil:
		target, addr = w.target, 0
	case q.ia.lim.windowBoundsByRegion:
		r, err := w.pd.regExact(m, addr, length, access)
		if err != nil {
			return 0, err
		}
		target, own = r, true
	default:
		target = m.mr
	}

	bw, rkey, err := q.postBind(w, target, addr, length, access)
	if err != nil {
		if own {
			w.pd.deregOwn(target)
		}
		return 0, err // nothing was posted: the window is unchanged
	}
	if err := q.awaitBind(bw); err != nil {
		var extra *C.struct_ibv_mr
		if own {
			extra = target
		}
		w.resetLocked(extra)
		return 0, err
	}
	prev, prevOwn := w.target, w.own
	w.target, w.own, w.rkey = nil, false, 0
	if length > 0 {
		w.target, w.own, w.rkey = target, own, rkey
	} else {
		rkey = 0
	}
	if prevOwn && prev != w.target {
		// The device has replaced that binding: the window's own
		// registration for it is referenced no more.
		w.pd.deregOwn(prev)
	}
	return rkey, nil
}

// postBind queues a bind entry and posts the bind.
func (q *QP) postBind(w *Window, target *C.struct_ibv_mr, addr, length uint64, access driver.Access) (*bindWait, uint32, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpConnected {
		return nil, 0, errInvalidState("bind window", q.state)
	}
	if q.cfg.PD != driver.PD(w.pd) {
		return nil, 0, fmt.Errorf("verbs: bind window: the window is in another PD than the QP: %w", driver.ErrInvalidAddress)
	}
	if q.sq.len() >= q.cfg.MaxSendWR {
		// DAT counts binds among the EP's max_request_dtos.
		return nil, 0, fmt.Errorf("verbs: bind window: %d requests outstanding: %w", q.sq.len(), driver.ErrQueueFull)
	}
	q.seq++
	bw := &bindWait{done: make(chan struct{})}
	q.sq.push(wrEntry{seq: q.seq, state: wrPosted, signaled: true, bind: bw})
	var rkey C.uint32_t
	rc := C.shim_bind_mw(q.conn.qp, w.mw, C.uint64_t(wrID(wrKindSend, q.seq)), target,
		C.uint64_t(addr), C.uint64_t(length), mwAccess(access), &rkey)
	if rc != 0 {
		q.sq.dropNewest()
		return nil, 0, postError("ibv_bind_mw", errnoOf(rc))
	}
	return bw, uint32(rkey), nil
}

// awaitBind waits, bounded, for the bind's completion and reports a
// failure.
func (q *QP) awaitBind(bw *bindWait) error {
	t := time.NewTimer(bindTimeout)
	defer t.Stop()
	select {
	case <-bw.done:
		return bindStatusError(bw.status)
	case <-t.C:
	}
	err := fmt.Errorf("verbs: connection broken: a window bind did not complete within %v", bindTimeout)
	q.mu.Lock()
	if q.state == qpConnected {
		q.lostLocked(err)
	}
	q.mu.Unlock()
	// The QP is in the error state now (or being torn down), so the
	// device flushes the bind; wait for that, so the bind is not still
	// pending when the window is deallocated.
	t.Reset(drainTimeout)
	select {
	case <-bw.done:
	case <-t.C:
	}
	return fmt.Errorf("verbs: bind window: no completion within %v, the requests posted before it are stuck; the connection is broken: %w",
		bindTimeout, context.DeadlineExceeded)
}

// bindStatusError maps a bind's work completion status.
func bindStatusError(status uint32) error {
	switch status {
	case C.IBV_WC_SUCCESS:
		return nil
	case C.IBV_WC_WR_FLUSH_ERR:
		return fmt.Errorf("verbs: bind window: the connection ended before the bind completed: %w", driver.ErrNotConnected)
	case C.IBV_WC_MW_BIND_ERR:
		return fmt.Errorf("verbs: bind window: the device refused the bind (%s), and the connection is broken: %w",
			wcStatusString(status), driver.ErrAccessRefused)
	}
	return fmt.Errorf("verbs: bind window: the bind failed (%s), and the connection is broken", wcStatusString(status))
}

func wcStatusString(status uint32) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}
