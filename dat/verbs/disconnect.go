//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"time"
)

// How long a graceful Disconnect waits for the send queue to drain, and
// then for the CM to report the connection closed, before going on as an
// abrupt one.
const (
	gracefulDrainTimeout = 10 * time.Second
	closeWaitTimeout     = 2 * time.Second
)

// Disconnect tears the connection down, or aborts an establishment in
// progress; the handler gets no Disconnected call for it.
//
// Abrupt: the QP moves to the error state at once, so everything posted
// flushes, then rdma_disconnect tells the peer. Graceful: the device first
// completes the posted send-side work, then rdma_disconnect (an IB DREQ,
// or an orderly TCP close on iWARP) and the QP moves to the error state
// once the CM reports the connection closed, flushing the receives. Both
// return when the device has completed everything posted (bounded by
// drainTimeout). Disconnecting a disconnected QP is a no-op, except that
// an abrupt call cuts a graceful one still in progress short.
func (q *QP) Disconnect(graceful bool) error {
	q.mu.Lock()
	switch q.state {
	case qpConnecting:
		a := q.attempt
		a.cancel()
		q.state = qpDisconnected
		q.mu.Unlock()
		<-a.done
		return nil
	case qpConnected:
		c := q.conn
		q.state = qpDisconnected
		q.ops.Add(1)
		q.mu.Unlock()
		defer q.ops.Done()
		q.disconnect(c, graceful)
		return nil
	case qpDisconnected:
		c := q.conn
		q.mu.Unlock()
		if c != nil && !graceful {
			c.hurryUp()
		}
		return nil
	case qpClosed:
		q.mu.Unlock()
		return fmt.Errorf("verbs: disconnect: %w", net.ErrClosed)
	}
	s := q.state
	q.mu.Unlock()
	return errInvalidState("disconnect", s)
}

func (q *QP) disconnect(c *conn, graceful bool) {
	if !graceful {
		c.hurryUp()
		C.shim_qp_to_error(c.qp)
		C.shim_disconnect(c.id)
		q.waitIdle(true, drainTimeout, nil)
		return
	}
	q.waitIdle(false, gracefulDrainTimeout, c.hurry)
	C.shim_disconnect(c.id)
	t := time.NewTimer(closeWaitTimeout)
	select {
	case <-c.gone:
	case <-c.hurry:
	case <-t.C:
	}
	t.Stop()
	C.shim_qp_to_error(c.qp)
	q.waitIdle(true, drainTimeout, nil)
}
