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
// connection. Once the connection is over the request is dropped: package
// dat flushes it.
//
// Signalling follows the request (the QP has no sq_sig_all): a Send or
// RDMA Write that package dat posts without driver.SendSignaled (a
// SUPPRESSed request) goes to the device unsignalled, so its success
// produces no work completion, and the completion of a later request
// implies it, as the driver contract allows. Such a request carries the
// wrQuiet wr_id, so a failure or flush of it still maps to dat's ID, and
// it is left out of the sendPosted count that drain and a graceful
// disconnect wait on (a marker covers it there, see waitSendIdle).
//
// A Send or RDMA Write of at most the QP's max_inline_data bytes is
// posted inline: the device takes the payload at the post, not from the
// registered memory later (inline.go).
func (q *QP) PostSend(wr driver.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.one[0] = wr
	_, err := q.postSendLocked(q.one[:])
	q.one[0] = driver.SendWR{} // keep no reference to dat's segments
	return err
}

// PostSendList posts wrs with as few ibv_post_send calls as it can: one
// chained list of up to sendListMax requests per call (one doorbell, and
// on rxe and siw one system call, instead of one per request). It is
// driver.SendListPoster; each request is treated as PostSend treats it.
func (q *QP) PostSendList(wrs []driver.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	posted := 0
	for posted < len(wrs) {
		n, err := q.postSendLocked(wrs[posted:min(len(wrs), posted+sendListMax)])
		posted += n
		if err != nil {
			return posted, err
		}
	}
	return posted, nil
}

// sendListMax bounds the requests of one ibv_post_send (SHIM_LIST_MAX).
const sendListMax = C.SHIM_LIST_MAX

// postSendLocked posts up to sendListMax requests in one ibv_post_send
// and reports how many the device took. Callers hold mu.
func (q *QP) postSendLocked(wrs []driver.SendWR) (int, error) {
	switch q.state {
	case qpConnected:
	case qpDead:
		return len(wrs), nil
	case qpClosed:
		return 0, fmt.Errorf("verbs: post send: %w", net.ErrClosed)
	default:
		return 0, errInvalidState("post send", q.state)
	}
	sges := q.sges[:0]
	if len(wrs) > 1 {
		sges = q.listSGEs[:0]
	}
	var signaled [sendListMax]bool
	for i := range wrs {
		var err error
		sges, signaled[i], err = q.prepareSend(&q.shimWRs[i], &wrs[i], sges)
		if err != nil {
			// Nothing of this call reached the device.
			return 0, err
		}
	}
	if len(wrs) > 1 {
		q.listSGEs = sges // keep what it grew to
	}
	nsig := uint64(0)
	for _, s := range signaled[:len(wrs)] {
		if s {
			nsig++
		}
	}
	q.sendPosted.Add(nsig)
	var took C.int
	var sgeBase *C.struct_ibv_sge // nil when no request has an SGE
	if cap(sges) > 0 {
		sgeBase = &sges[:1][0]
	}
	rc := C.shim_post_send_list(q.conn.qp, &q.shimWRs[0], C.int(len(wrs)), sgeBase, &took)
	n := int(took)
	for i := n; i < len(wrs); i++ {
		if signaled[i] {
			q.sendPosted.Add(^uint64(0)) // not posted: nothing will complete
		}
	}
	for i := range n {
		if q.shimWRs[i].flags&C.IBV_SEND_INLINE != 0 {
			q.inlined++
		}
	}
	if n > 0 {
		q.silentTail = !signaled[n-1]
	}
	if rc != 0 {
		return n, postError("ibv_post_send", errnoOf(rc))
	}
	return n, nil
}

// prepareSend checks wr and fills w, appending its SGEs to sges (w names
// them by offset). It reports whether the request is signalled. Callers
// hold mu.
func (q *QP) prepareSend(w *C.struct_shim_wr, wr *driver.SendWR, sges []C.struct_ibv_sge) ([]C.struct_ibv_sge, bool, error) {
	var opcode C.int
	switch wr.Op {
	case driver.OpSend:
		opcode = C.IBV_WR_SEND
	case driver.OpRDMAWrite:
		opcode = C.IBV_WR_RDMA_WRITE
	case driver.OpRDMARead:
		opcode = C.IBV_WR_RDMA_READ
	case driver.OpRDMAWriteImm:
		if q.ia.attr.Transport == driver.TransportIWARP {
			return sges, false, fmt.Errorf("verbs: post send: RDMA Write with Immediate on iWARP: %w", driver.ErrNotSupported)
		}
		opcode = C.IBV_WR_RDMA_WRITE_WITH_IMM
	default:
		return sges, false, fmt.Errorf("verbs: post send: opcode %d: %w", wr.Op, driver.ErrNotSupported)
	}
	signaled := wr.Flags&driver.SendSignaled != 0 || wr.Op == driver.OpRDMARead || wr.ID > wrIdxMask
	var flags C.int
	if signaled {
		flags = C.IBV_SEND_SIGNALED
	}
	if wr.Flags&driver.SendSolicited != 0 && wr.Op == driver.OpSend {
		flags |= C.IBV_SEND_SOLICITED
	}
	if wr.Flags&driver.SendFence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	if len(wr.Local) > q.cfg.MaxSendSGE || len(wr.Local) > maxSGE {
		return sges, false, fmt.Errorf("verbs: post send: %d SGEs exceed %d: %w", len(wr.Local), q.cfg.MaxSendSGE, driver.ErrResources)
	}
	if wr.Op == driver.OpRDMARead && q.cfg.ORD == 0 {
		// With no outbound read credit rxe queues the Read forever and
		// siw refuses it; say why instead.
		return sges, false, fmt.Errorf("verbs: post RDMA Read: the QP's ORD (max_rdma_read_out) is 0: %w", driver.ErrResources)
	}
	wrid, err := encodeWRID(wr.ID, false)
	if err != nil {
		return sges, false, err
	}
	if !signaled {
		wrid = wrHandleOf(wrQuiet, wr.ID)
	}
	off := len(sges)
	for _, s := range wr.Local {
		sges = append(sges, C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)})
	}
	if wr.Op != driver.OpRDMARead && q.inlineFits(wr.Local) {
		// The payload is copied at the post, which also keeps siw off
		// its page-crossing path (splitSmallSGE): the bytes are in the
		// work request, not in user pages.
		flags |= C.IBV_SEND_INLINE
	} else if len(wr.Local) == 1 && wr.Op != driver.OpRDMARead && q.ia.lim.splitSmall {
		sges = splitSmallSGE(sges)
	}
	*w = C.struct_shim_wr{wr_id: C.uint64_t(wrid), raddr: C.uint64_t(wr.Remote.Addr), rkey: C.uint32_t(wr.Remote.RKey),
		imm: C.uint32_t(wr.Imm), opcode: C.int32_t(opcode), flags: C.int32_t(flags), sge_off: C.int32_t(off), nsge: C.int32_t(len(sges) - off)}
	return sges, signaled, nil
}

// inlineFits reports whether a request of these SGEs can be posted inline:
// it moves at least one byte (a zero-length request has nothing to copy)
// and no more than the QP's max_inline_data, and every segment lies in a
// region of the QP's PD under its key. The device checks no key for
// inline data, so the provider does it here; a request that fails the
// check goes the ordinary way, and the device fails it as before
// (drivertest's Protection cases). Callers hold mu.
func (q *QP) inlineFits(sges []driver.SGE) bool {
	c := q.conn
	var total uint64
	for _, s := range sges {
		total += uint64(s.Length)
	}
	if total == 0 || total > uint64(c.maxInline) || c.pd == nil {
		return false
	}
	for _, s := range sges {
		if s.Length > 0 && !c.pd.covers(s) {
			return false
		}
	}
	return true
}
