//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// watchInterval is how often an errorWatch looks at its connections.
const watchInterval = 100 * time.Millisecond

// errorWatch finds connections that the device moved to the error state
// without telling anyone, on devices that do so (devLimits.silentErrors).
//
// rxe (6.1, measured) raises no async event when its responder refuses an
// RDMA access (a bad key, a range or right the region or window does not
// grant) or its requester gets the peer's NAK for one: both QPs just go to
// the error state. The requester's failed work completion says so, but
// only once someone polls its CQ, and package dat polls only when a
// consumer waits: a target whose peer posted a bad Write and never looks
// at its completions would not learn that its connection broke. So on
// such a device each IA checks the state of its connected QPs every
// watchInterval (one ibv_query_qp each) and reports a QP found in the
// error state as broken; the peer then gets the rdma_disconnect. Devices
// that raise the event (hardware, per the IB spec's "local access
// violation" affiliated error) and siw (which terminates the connection)
// need no watch.
type errorWatch struct {
	mu   sync.Mutex
	qps  map[*QP]struct{}
	stop chan struct{}
	done chan struct{}
}

func startErrorWatch() *errorWatch {
	w := &errorWatch{qps: make(map[*QP]struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// add watches q, which has just connected. A nil watch does nothing.
func (w *errorWatch) add(q *QP) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.qps[q] = struct{}{}
	w.mu.Unlock()
}

// remove stops watching q.
func (w *errorWatch) remove(q *QP) {
	if w == nil {
		return
	}
	w.mu.Lock()
	delete(w.qps, q)
	w.mu.Unlock()
}

// close ends the watch and waits for its goroutine.
func (w *errorWatch) close() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
}

func (w *errorWatch) run() {
	defer close(w.done)
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	var qps []*QP
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		qps = qps[:0]
		for q := range w.qps {
			qps = append(qps, q)
		}
		w.mu.Unlock()
		for _, q := range qps {
			if !q.checkSilentError() {
				w.remove(q)
			}
		}
		clear(qps)
	}
}

// errSilentError is what a connection found in the error state broke of.
var errSilentError = errors.New("verbs: connection broken: the device moved the QP to the error state")

// checkSilentError reports the connection broken if the device moved its
// QP to the error state, and whether it is still worth watching.
func (q *QP) checkSilentError() bool {
	q.mu.Lock()
	if q.state != qpConnected {
		q.mu.Unlock()
		return false
	}
	// This side moves a QP to the error state only after it left
	// qpConnected, so here the device did. Under mu: the ibv_qp is not
	// destroyed meanwhile (destroyVerbsQP clears c.qp under mu first).
	c := q.conn
	if c.qp == nil || C.shim_qp_in_error(c.qp) == 0 {
		q.mu.Unlock()
		return true
	}
	q.mu.Unlock()
	q.ia.debug("QP found in the error state", slog.Uint64("qp", uint64(c.qpNum)))
	q.noteFault(errSilentError)
	go q.lost(errSilentError)
	return false
}
