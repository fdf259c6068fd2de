//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// PostRecv posts a receive. Before the connection's verbs QP exists the
// receive waits in the queue and is posted when the QP is created, ahead
// of establishment (iWARP has no RNR retry, so receives must be there
// first). On a disconnected QP it completes flushed, after anything still
// outstanding, as DAT requires.
func (q *QP) PostRecv(wr driver.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.state == qpClosed:
		return fmt.Errorf("verbs: post recv: %w", net.ErrClosed)
	case q.cfg.SRQ != nil:
		return fmt.Errorf("verbs: post recv: QP receives from an SRQ: %w", driver.ErrNotSupported)
	case len(wr.Local) > q.cfg.MaxRecvSGE || len(wr.Local) > maxSGE:
		return fmt.Errorf("verbs: post recv: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxRecvSGE, driver.ErrResources)
	}
	q.seq++
	e := wrEntry{seq: q.seq, cookie: wr.Cookie, op: driver.OpRecv, signaled: true}
	if q.state == qpDisconnected {
		q.flushLocked(&q.rq, e)
		return nil
	}
	if q.rq.len() >= q.cfg.MaxRecvWR {
		return fmt.Errorf("verbs: post recv: %d receives posted: %w", q.rq.len(), driver.ErrQueueFull)
	}
	if q.conn == nil || q.conn.qp == nil {
		e.state = wrPending
		e.sges = wr.Local
		q.rq.push(e)
		return nil
	}
	e.state = wrPosted
	q.rq.push(e)
	n := q.fillSGEs(wr.Local)
	if rc := C.shim_post_recv(q.conn.qp, C.uint64_t(wrID(wrKindRecv, e.seq)), &q.sges[0], C.int(n)); rc != 0 {
		q.rq.dropNewest()
		return postError("ibv_post_recv", errnoOf(rc))
	}
	return nil
}

// PostSend posts a Send, RDMA Write or RDMA Read. Every request
// is posted signalled, so each yields exactly one completion in post
// order; the Completion's Signaled flag reports whether the poster asked
// for one (driver.SendSignaled) and package dat suppresses the rest. On a
// disconnected QP the request completes flushed, after anything still
// outstanding.
func (q *QP) PostSend(wr driver.SendWR) error {
	var opcode C.int
	var length uint32
	for _, s := range wr.Local {
		length += s.Length
	}
	switch wr.Op {
	case driver.OpSend:
		opcode = C.IBV_WR_SEND
	case driver.OpRDMAWrite:
		opcode = C.IBV_WR_RDMA_WRITE
	case driver.OpRDMARead:
		opcode = C.IBV_WR_RDMA_READ
		length = wr.Remote.Length
	default:
		return fmt.Errorf("verbs: post send: opcode %d: %w", wr.Op, driver.ErrNotSupported)
	}
	flags := C.int(C.IBV_SEND_SIGNALED)
	if wr.Flags&driver.SendSolicited != 0 && wr.Op == driver.OpSend {
		flags |= C.IBV_SEND_SOLICITED
	}
	if wr.Flags&driver.SendFence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(wr.Local) > q.cfg.MaxSendSGE || len(wr.Local) > maxSGE {
		return fmt.Errorf("verbs: post send: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxSendSGE, driver.ErrResources)
	}
	if wr.Op == driver.OpRDMARead && q.cfg.ORD == 0 {
		// With no outbound read credit rxe queues the Read forever and
		// siw refuses it; say why instead.
		return fmt.Errorf("verbs: post RDMA Read: the QP's ORD (max_rdma_read_out) is 0: %w", driver.ErrResources)
	}
	q.seq++
	e := wrEntry{seq: q.seq, cookie: wr.Cookie, op: wr.Op, signaled: wr.Flags&driver.SendSignaled != 0, length: length}
	switch q.state {
	case qpConnected:
	case qpDisconnected:
		q.flushLocked(&q.sq, e)
		return nil
	case qpClosed:
		return fmt.Errorf("verbs: post send: %w", net.ErrClosed)
	default:
		return errInvalidState("post send", q.state)
	}
	if q.sq.len() >= q.cfg.MaxSendWR {
		return fmt.Errorf("verbs: post send: %d requests outstanding: %w", q.sq.len(), driver.ErrQueueFull)
	}
	e.state = wrPosted
	q.sq.push(e)
	n := q.fillSGEs(wr.Local)
	rc := C.shim_post_send(q.conn.qp, C.uint64_t(wrID(wrKindSend, e.seq)), opcode, flags, &q.sges[0], C.int(n),
		C.uint64_t(wr.Remote.Addr), C.uint32_t(wr.Remote.RKey))
	if rc != 0 {
		q.sq.dropNewest()
		return postError("ibv_post_send", errnoOf(rc))
	}
	return nil
}
