//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// fetchCQ takes every queued completion event off the IA's completion
// channel (the completion loop's fetch step). Each is acked inside the
// shim, so ibv_destroy_cq never waits for this loop.
func (ia *IA) fetchCQ() bool {
	for {
		var key C.uintptr_t
		if rc := C.shim_next_cq_event(ia.comp, &key); rc != 0 {
			if e := syscall.Errno(-rc); e != syscall.EAGAIN && e != syscall.EINTR {
				ia.logf("ibv_get_cq_event: %v", e)
			}
			return len(ia.cqBatch) > 0
		}
		ia.cqBatch = append(ia.cqBatch, uintptr(key))
	}
}

// dispatchCQ polls the CQ of every QP that had an event.
func (ia *IA) dispatchCQ() {
	batch := ia.cqBatch
	ia.cqBatch = ia.cqBatch[:0]
	for i, k := range batch {
		if i > 0 && k == batch[i-1] {
			continue // one poll drains the CQ
		}
		if q, ok := lookup(k).(*QP); ok {
			q.cqEvent()
		}
	}
}

// cqEvent re-arms the QP's CQ and drains it. Arming before draining means
// a completion that arrives after the last poll raises a new event.
func (q *QP) cqEvent() {
	q.cqMu.Lock()
	defer q.cqMu.Unlock()
	if q.cq == nil {
		return // destroyed after the event was taken
	}
	C.shim_arm_cq(q.cq)
	q.pollLocked()
}

// pollLocked drains the CQ. Callers hold cqMu and not mu.
func (q *QP) pollLocked() {
	for {
		n := int(C.shim_poll(q.cq, &q.wcs[0], C.int(len(q.wcs))))
		if n <= 0 {
			if n < 0 {
				q.ia.logf("ibv_poll_cq: %v", syscall.Errno(-n))
			}
			return
		}
		q.mu.Lock()
		for i := 0; i < n; i++ {
			q.completeLocked(&q.wcs[i])
			q.replayEarlyLocked()
		}
		if q.progress != nil {
			close(q.progress)
			q.progress = nil
		}
		q.mu.Unlock()
		if n < len(q.wcs) {
			return
		}
	}
}

// completeLocked turns one work completion into a driver.Completion for
// the entry it pairs with. Callers hold mu.
func (q *QP) completeLocked(wc *C.struct_shim_wc) {
	wrid := uint64(wc.wr_id)
	st := wcStatus(wc.status)
	var c driver.Completion
	switch wrid >> wrKindShift {
	case wrKindSRQ:
		s, _ := q.cfg.SRQ.(*SRQ)
		if s == nil {
			return
		}
		cookie, ok := s.take(wrid)
		if !ok {
			q.ia.logf("completion for unknown SRQ receive %#x", wrid)
			return
		}
		c = driver.Completion{Cookie: cookie, Op: driver.OpRecv, Status: st, Signaled: true}
		if st == driver.StatusSuccess {
			c.Length = uint32(wc.byte_len)
			c.Solicited = true // verbs does not report SE; see doc.go
		}
		q.events.completion(c)
	case wrKindSend, wrKindRecv:
		w := &q.sq
		if wrid>>wrKindShift == wrKindRecv {
			w = &q.rq
		}
		e := w.front()
		if e == nil || e.state != wrPosted || e.seq != wrid&wrSeqMask {
			// siw completes a Send or Write ahead of an earlier Read: it
			// is paired when its turn comes (reorder.go). Never pair a
			// completion with the wrong cookie.
			if !q.holdEarlyLocked(w, wc) {
				q.ia.logf("completion %#x for no posted request", wrid)
			}
			return
		}
		ent := w.pop()
		if ent.bind != nil {
			// A window bind's completion (IBV_WC_BIND_MW, or its
			// error): the provider's, not a DTO's. Popping it in turn
			// keeps the requests around it paired.
			ent.bind.finish(uint32(wc.status))
			q.releaseFlushedLocked(w)
			break
		}
		c = driver.Completion{Cookie: ent.cookie, Op: ent.op, Status: st, Signaled: ent.signaled || st != driver.StatusSuccess}
		if st == driver.StatusSuccess {
			c.Length = ent.length
			if ent.op == driver.OpRecv {
				c.Length = uint32(wc.byte_len)
				c.Solicited = true // verbs does not report SE; see doc.go
			}
		}
		q.events.completion(c)
		q.releaseFlushedLocked(w)
	default:
		q.ia.logf("completion with foreign wr_id %#x", wrid)
		return
	}
	if st != driver.StatusSuccess && st != driver.StatusFlushed && q.state == qpConnected {
		// An RC QP is in the error state after a failed work request: the
		// connection is broken (DAT BROKEN), and the peer should know.
		q.lostLocked(fmt.Errorf("verbs: connection broken: work request failed: %s",
			C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(wc.status)))))
	}
}

// releaseFlushedLocked completes the flush entries that were waiting for
// the device's completions ahead of them.
func (q *QP) releaseFlushedLocked(w *wrQueue) {
	for e := w.front(); e != nil && e.state == wrFlush; e = w.front() {
		q.deliverFlushed(w.pop())
	}
}

// flushLocked completes e as flushed in post order: at once if nothing
// is ahead of it, else after the entries ahead complete.
func (q *QP) flushLocked(w *wrQueue, e wrEntry) {
	if w.len() == 0 {
		q.deliverFlushed(e)
		return
	}
	e.state = wrFlush
	e.sges = nil
	w.push(e)
}

// flushAllLocked completes every remaining entry of both queues as
// flushed, oldest first. Called once the device can produce no more
// completions (no verbs QP) or never got the entries (pending receives).
func (q *QP) flushAllLocked() {
	for _, w := range []*wrQueue{&q.sq, &q.rq} {
		for w.len() > 0 {
			// A request the device completed early keeps its status.
			if !q.replayEarlyLocked() {
				q.deliverFlushed(w.pop())
			}
		}
	}
	q.early = nil
}

func (q *QP) deliverFlushed(e wrEntry) {
	if e.bind != nil {
		e.bind.finish(C.IBV_WC_WR_FLUSH_ERR)
		return
	}
	q.events.completion(driver.Completion{Cookie: e.cookie, Op: e.op, Status: driver.StatusFlushed, Signaled: true})
}

// wcStatus maps ibv_wc_status to DAT DTO completion statuses, as DAPL's
// openib_common/cq.c does.
func wcStatus(s C.uint32_t) driver.Status {
	switch s {
	case C.IBV_WC_SUCCESS:
		return driver.StatusSuccess
	case C.IBV_WC_WR_FLUSH_ERR:
		return driver.StatusFlushed
	case C.IBV_WC_LOC_LEN_ERR:
		return driver.StatusLocalLength
	case C.IBV_WC_LOC_QP_OP_ERR:
		return driver.StatusLocalEP
	case C.IBV_WC_LOC_PROT_ERR, C.IBV_WC_LOC_ACCESS_ERR, C.IBV_WC_LOC_RDD_VIOL_ERR, C.IBV_WC_MW_BIND_ERR:
		// MW_BIND_ERR belongs to a window bind, whose completion never
		// becomes a driver.Completion (bind.go maps it); here only for
		// completeness.
		return driver.StatusLocalProtection
	case C.IBV_WC_BAD_RESP_ERR:
		return driver.StatusBadResponse
	case C.IBV_WC_REM_ACCESS_ERR:
		return driver.StatusRemoteAccess
	case C.IBV_WC_REM_INV_REQ_ERR, C.IBV_WC_REM_OP_ERR, C.IBV_WC_REM_INV_RD_REQ_ERR, C.IBV_WC_REM_ABORT_ERR:
		return driver.StatusRemoteResponder
	case C.IBV_WC_RNR_RETRY_EXC_ERR, C.IBV_WC_RESP_TIMEOUT_ERR:
		return driver.StatusReceiverNotReady
	}
	// LOC_EEC_OP_ERR, RETRY_EXC_ERR, INV_EECN_ERR, INV_EEC_STATE_ERR,
	// FATAL_ERR, GENERAL_ERR and anything newer.
	return driver.StatusTransport
}
