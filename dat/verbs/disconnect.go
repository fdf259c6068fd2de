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
	"syscall"
	"time"
)

// How long a graceful Disconnect waits for the send queue to drain, and
// then for the CM to report the connection closed, before going on as an
// abrupt one.
const (
	gracefulDrainTimeout = 10 * time.Second
	closeWaitTimeout     = 2 * time.Second
)

// Disconnect ends the connection, or aborts an establishment in progress,
// and returns once the QP is quiescent; OnDisconnect is not called for it.
//
// Abrupt: rdma_disconnect tells the peer and the QP is quiesced (moved to
// the error state and drained, see quiesce). Graceful: first the device
// completes the send-side work posted (bounded by gracefulDrainTimeout),
// then rdma_disconnect (an IB DREQ, or an orderly TCP close on iWARP), and
// once the CM reports the connection closed (bounded by closeWaitTimeout)
// the QP is quiesced. Disconnecting a QP whose connection is over waits
// for its quiescence, and an abrupt call cuts a graceful one still in
// progress short. A QP that never connected is marked disconnected: its
// pending receives are dropped, for package dat to flush.
func (q *QP) Disconnect(graceful bool) error {
	q.mu.Lock()
	switch q.state {
	case qpIdle:
		q.state = qpDead
		q.pending = nil
		q.mu.Unlock()
		return nil
	case qpConnecting:
		a, c := q.attempt, q.conn
		a.cancel()
		q.state = qpDead
		q.hungUp.Store(true)
		q.mu.Unlock()
		<-a.done
		if c != nil {
			q.quiesce(c)
		}
		return nil
	case qpConnected:
		c := q.conn
		q.state = qpDead
		q.hungUp.Store(true)
		q.ops.Add(1)
		q.mu.Unlock()
		defer q.ops.Done()
		q.disconnect(c, graceful)
		return nil
	case qpDead:
		c := q.conn
		q.mu.Unlock()
		if c != nil {
			if !graceful {
				c.hurryUp()
			}
			<-c.quiesced
		}
		return nil
	}
	q.mu.Unlock()
	return fmt.Errorf("verbs: disconnect: %w", net.ErrClosed)
}

func (q *QP) disconnect(c *conn, graceful bool) {
	if !graceful {
		c.hurryUp()
		C.shim_disconnect(c.id)
		q.quiesce(c)
		return
	}
	q.waitSendIdle(c, gracefulDrainTimeout)
	C.shim_disconnect(c.id)
	t := time.NewTimer(closeWaitTimeout)
	select {
	case <-c.gone:
	case <-c.hurry:
	case <-t.C:
	}
	t.Stop()
	q.quiesce(c)
}

// waitSendIdle polls the send CQ until every send-side request posted has
// completed, or timeout passes, or the disconnect is hurried. It polls
// into the CQ's stash rather than waiting for completion events, which
// belong to package dat's waiter.
//
// A request posted unsignalled reports nothing when it succeeds, so when
// the newest one was, a signalled marker goes behind it (a zero-length
// RDMA Write, which no consumer sees): the send queue completes in order,
// so the marker's completion says everything before it is done. The
// marker may find the send queue full (ENOMEM): it is posted again once
// completions freed a slot.
func (q *QP) waitSendIdle(c *conn, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	q.mu.Lock()
	marker := q.silentTail
	q.mu.Unlock()
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		if marker {
			switch err := q.postDrainMarker(c); {
			case err == nil:
				marker = false
			case !errors.Is(err, syscall.ENOMEM):
				// The QP takes no more requests (the device moved it
				// to the error state): nothing is left to wait for.
				q.ia.debug("drain marker not posted", slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
				return
			}
		}
		if c.scq != nil {
			c.scq.collect()
		}
		if !marker && q.sendDone.Load() >= q.sendPosted.Load() || time.Now().After(deadline) {
			return
		}
		select {
		case <-c.hurry:
			return
		case <-time.After(pause):
		}
	}
}

// postDrainMarker posts waitSendIdle's marker: a signalled zero-length
// RDMA Write, which needs no memory and whose key no device checks. Its
// completion counts in sendDone and goes no further (mapWC).
func (q *QP) postDrainMarker(c *conn) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.qp == nil {
		return net.ErrClosed
	}
	q.sendPosted.Add(1)
	rc := C.shim_post_send(c.qp, C.uint64_t(wrHandleOf(wrDrain, 0)), C.IBV_WR_RDMA_WRITE, C.IBV_SEND_SIGNALED,
		&q.sges[0], 0, 0, 0, 0)
	if rc != 0 {
		q.sendPosted.Add(^uint64(0))
		return errnoOf(rc)
	}
	q.silentTail = false
	return nil
}
