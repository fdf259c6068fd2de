//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

// Completion order. Package dat pairs completions with posts per queue in
// post order, and an InfiniBand or RoCE RC send queue completes in that
// order. Kernel siw does not: it completes a Send or RDMA Write as soon as
// it has transmitted it (siw_qp_sq_process), while an RDMA Read posted
// before it completes only when its Read Response has arrived, so "Read,
// then Send" completes the Send first. Such an early completion is held
// here and paired once every request before it has completed, so the
// consumer still sees post order (as with the iwarp provider, which holds
// a finished request behind an outstanding Read the same way).

// holdEarlyLocked keeps wc, the completion of a request of w that is
// posted but not the oldest, until replayEarlyLocked can pair it. It
// reports false, keeping nothing, if no posted request of w has wc's
// wr_id. Callers hold mu.
func (q *QP) holdEarlyLocked(w *wrQueue, wc *C.struct_shim_wc) bool {
	seq := uint64(wc.wr_id) & wrSeqMask
	posted := false
	w.each(func(e *wrEntry) {
		if e.seq == seq && e.state == wrPosted {
			posted = true
		}
	})
	if posted {
		q.early = append(q.early, *wc)
	}
	return posted
}

// replayEarlyLocked pairs each held completion whose request has become
// the oldest of its queue, and reports whether it paired any. Callers hold
// mu.
func (q *QP) replayEarlyLocked() bool {
	paired := false
	for i := 0; i < len(q.early); {
		wc := q.early[i]
		w := &q.sq
		if uint64(wc.wr_id)>>wrKindShift == wrKindRecv {
			w = &q.rq
		}
		if e := w.front(); e == nil || e.state != wrPosted || e.seq != uint64(wc.wr_id)&wrSeqMask {
			i++
			continue
		}
		q.early = append(q.early[:i], q.early[i+1:]...)
		q.completeLocked(&wc)
		// Pairing it may have made another held one the oldest.
		paired, i = true, 0
	}
	return paired
}
