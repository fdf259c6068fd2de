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
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// bindTimeout bounds how long BindWindow waits for its bind's completion.
// A bind is a local operation and completes at once, but its completion
// comes in send-queue order, after everything posted before it: a Send
// held up by receiver-not-ready retries (rnr_retry 7 retries forever)
// would hold it up for ever. A variable so that tests can shorten it.
var bindTimeout = 10 * time.Second

// bindWait is the provider's record of the bind posted on a QP (at most
// one at a time, QP.bindMu). Its wr_id is a handle of kind wrBind with the
// QP's bind number (wrid.go), so its completion is told from package
// dat's and never reaches it: whoever polls the CQ (package dat's waiter,
// or BindWindow itself) hands it here.
type bindWait struct {
	seq    uint64
	done   chan struct{} // closed once the completion (or flush) arrives
	once   sync.Once
	status uint32 // ibv_wc_status; written before done is closed
}

// finish records the bind's completion status; the first call wins.
func (b *bindWait) finish(status uint32) {
	b.once.Do(func() {
		b.status = status
		close(b.done)
	})
}

// bindDone takes the completion of bind number seq.
func (q *QP) bindDone(seq uint64, status uint32) {
	if b := q.bind.Load(); b != nil && b.seq == seq {
		b.finish(status)
	}
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
func (wq windowQP) BindWindow(dw driver.Window, dm driver.MR, addr, length uint64, access driver.Access) (uint32, error) {
	return wq.bindWindow(dw, dm, addr, length, access)
}

func (q *QP) bindWindow(dw driver.Window, dm driver.MR, addr, length uint64, access driver.Access) (uint32, error) {
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

	q.bindMu.Lock()
	defer q.bindMu.Unlock()
	bw, c, rkey, err := q.postBind(w, target, addr, length, access)
	if err != nil {
		if own {
			w.pd.deregOwn(target)
		}
		return 0, err // nothing was posted: the window is unchanged
	}
	err = q.awaitBind(bw, c)
	q.bind.Store(nil)
	if err != nil {
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

// postBind posts the bind. Callers hold bindMu.
func (q *QP) postBind(w *Window, target *C.struct_ibv_mr, addr, length uint64, access driver.Access) (*bindWait, *conn, uint32, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpConnected {
		return nil, nil, 0, errInvalidState("bind window", q.state)
	}
	if p, _ := pdOf(q.cfg.PD); p != w.pd {
		return nil, nil, 0, fmt.Errorf("verbs: bind window: the window is in another PD than the QP: %w", driver.ErrInvalidAddress)
	}
	q.bindSeq++
	bw := &bindWait{seq: q.bindSeq, done: make(chan struct{})}
	q.bind.Store(bw)
	var rkey C.uint32_t
	q.sendPosted.Add(1)
	rc := C.shim_bind_mw(q.conn.qp, w.mw, C.uint64_t(wrHandleOf(wrBind, bw.seq)), target,
		C.uint64_t(addr), C.uint64_t(length), mwAccess(access), &rkey)
	if rc != 0 {
		q.sendPosted.Add(^uint64(0))
		q.bind.Store(nil)
		return nil, nil, 0, postError("ibv_bind_mw", errnoOf(rc))
	}
	return bw, q.conn, uint32(rkey), nil
}

// awaitBind waits, bounded, for the bind's completion and reports a
// failure. It polls the send CQ itself (into the CQ's stash, for package
// dat), since nobody else may be polling it.
func (q *QP) awaitBind(bw *bindWait, c *conn) error {
	if q.pollFor(bw.done, c.scq, bindTimeout) {
		return bindStatusError(bw.status)
	}
	err := fmt.Errorf("verbs: connection broken: a window bind did not complete within %v", bindTimeout)
	// Breaking the connection quiesces the QP, which ends the bind one
	// way or the other (flushed, or finished as flushed once the QP is
	// destroyed), so the bind is not pending when the window is
	// deallocated.
	go q.lost(err)
	<-c.quiesced
	<-bw.done
	return fmt.Errorf("verbs: bind window: no completion within %v, the requests posted before it are stuck; the connection is broken: %w",
		bindTimeout, context.DeadlineExceeded)
}

// pollFor polls cq into its stash until done is closed (true) or timeout
// passes (false).
func (q *QP) pollFor(done <-chan struct{}, cq *CQ, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for pause := 5 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		cq.collect()
		select {
		case <-done:
			return true
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
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
