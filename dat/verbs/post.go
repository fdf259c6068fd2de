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

// PostRecv posts a receive. Before the connection's ibv_qp exists the
// receive waits and is posted when the QP is created, ahead of
// establishment (iWARP has no RNR retry, so receives must be there
// first). Once the connection is over it is dropped: package dat flushes
// it.
func (q *QP) PostRecv(wr driver.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.state == qpClosed:
		return fmt.Errorf("verbs: post recv: %w", net.ErrClosed)
	case q.state == qpDead:
		return nil
	case q.cfg.SRQ != nil:
		return fmt.Errorf("verbs: post recv: QP receives from an SRQ: %w", driver.ErrNotSupported)
	case len(wr.Local) > q.cfg.MaxRecvSGE || len(wr.Local) > maxSGE:
		return fmt.Errorf("verbs: post recv: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxRecvSGE, driver.ErrResources)
	}
	c := q.conn
	if c == nil || c.qp == nil {
		if len(q.pending) >= q.cfg.MaxRecvWR {
			return fmt.Errorf("verbs: post recv: %d receives posted: %w", len(q.pending), driver.ErrQueueFull)
		}
		q.pending = append(q.pending, pendingRecv{id: wr.ID, sges: append([]driver.SGE(nil), wr.Local...)})
		return nil
	}
	wrid, err := encodeWRID(wr.ID, true)
	if err != nil {
		return err
	}
	n := q.fillSGEs(wr.Local)
	q.recvPosted.Add(1)
	if rc := C.shim_post_recv(c.qp, C.uint64_t(wrid), &q.sges[0], C.int(n)); rc != 0 {
		q.recvPosted.Add(^uint64(0))
		return postError("ibv_post_recv", errnoOf(rc))
	}
	return nil
}

// PostSend posts a Send, RDMA Write or RDMA Read on an established
// connection. Every request is posted signalled (the QP has sq_sig_all),
// so each completes: package dat takes the completion of a request it
// posted unsignalled like any other, and a graceful disconnect counts
// them. Once the connection is over the request is dropped: package dat
// flushes it.
func (q *QP) PostSend(wr driver.SendWR) error {
	var opcode C.int
	switch wr.Op {
	case driver.OpSend:
		opcode = C.IBV_WR_SEND
	case driver.OpRDMAWrite:
		opcode = C.IBV_WR_RDMA_WRITE
	case driver.OpRDMARead:
		opcode = C.IBV_WR_RDMA_READ
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
	switch q.state {
	case qpConnected:
	case qpDead:
		return nil
	case qpClosed:
		return fmt.Errorf("verbs: post send: %w", net.ErrClosed)
	default:
		return errInvalidState("post send", q.state)
	}
	if len(wr.Local) > q.cfg.MaxSendSGE || len(wr.Local) > maxSGE {
		return fmt.Errorf("verbs: post send: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxSendSGE, driver.ErrResources)
	}
	if wr.Op == driver.OpRDMARead && q.cfg.ORD == 0 {
		// With no outbound read credit rxe queues the Read forever and
		// siw refuses it; say why instead.
		return fmt.Errorf("verbs: post RDMA Read: the QP's ORD (max_rdma_read_out) is 0: %w", driver.ErrResources)
	}
	wrid, err := encodeWRID(wr.ID, false)
	if err != nil {
		return err
	}
	n := q.fillSGEs(wr.Local)
	if n == 1 && wr.Op != driver.OpRDMARead && q.ia.lim.splitSmall {
		n = q.splitSmallSGE()
	}
	q.sendPosted.Add(1)
	rc := C.shim_post_send(q.conn.qp, C.uint64_t(wrid), opcode, flags, &q.sges[0], C.int(n),
		C.uint64_t(wr.Remote.Addr), C.uint32_t(wr.Remote.RKey))
	if rc != 0 {
		q.sendPosted.Add(^uint64(0))
		return postError("ibv_post_send", errnoOf(rc))
	}
	return nil
}
