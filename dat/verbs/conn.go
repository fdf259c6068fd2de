//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// How long teardown waits for the device to flush what is posted after the
// QP moved to the error state, before destroying it and completing the
// rest as flushed itself. rxe flushes from a kernel tasklet, siw at once.
const drainTimeout = 2 * time.Second

// newConnID creates an rdma_cm id on the IA's channel whose events go to q.
func (q *QP) newConnID() (*conn, error) {
	c := newConn()
	c.key = register(q)
	if rc := C.shim_create_id(q.ia.ch, &c.id, C.uintptr_t(c.key)); rc != 0 {
		unregister(c.key)
		return nil, fmt.Errorf("rdma_create_id: %w", errnoOf(rc))
	}
	return c, nil
}

// createVerbsQP builds the connection's CQ and RC QP on c.id from cfg and
// posts the receives that were waiting for it.
func (q *QP) createVerbsQP(c *conn, cfg driver.QPConfig) error {
	pd, _ := cfg.PD.(*PD)
	if pd == nil {
		return fmt.Errorf("QP has no PD: %w", driver.ErrNotConnected)
	}
	if c.id.verbs != q.ia.ctx {
		return fmt.Errorf("the connection uses another RDMA device than the IA: %w", driver.ErrInvalidAddress)
	}
	var srq *C.struct_ibv_srq
	recvWR := cfg.MaxRecvWR
	if s, ok := cfg.SRQ.(*SRQ); ok {
		srq = s.srq
		recvWR = s.cfg.MaxRecvWR // every SRQ receive may complete on this QP's CQ
	}
	if cfg.MaxSendWR+recvWR+1 > q.ia.lim.maxCQE {
		return fmt.Errorf("%d send + %d SRQ receive WRs exceed the device's CQ size %d: %w",
			cfg.MaxSendWR, recvWR, q.ia.lim.maxCQE, driver.ErrResources)
	}
	// One CQ per connection for both queues: completions of one QP are
	// then polled, paired and delivered by one goroutine in order.
	cqe := max(cfg.MaxSendWR+recvWR+1, 2)

	q.cqMu.Lock()
	defer q.cqMu.Unlock()
	cq, err := C.shim_create_cq(q.ia.ctx, C.int(cqe), C.uintptr_t(q.key), q.ia.comp)
	if cq == nil {
		return fmt.Errorf("ibv_create_cq(%d): %v: %w", cqe, err, driver.ErrResources)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	rc := C.shim_create_qp(c.id, pd.pd, cq, srq,
		C.uint32_t(max(cfg.MaxSendWR, 1)), C.uint32_t(max(cfg.MaxRecvWR, 1)),
		C.uint32_t(max(cfg.MaxSendSGE, 1)), C.uint32_t(max(cfg.MaxRecvSGE, 1)), C.uintptr_t(q.key))
	if rc != 0 {
		C.ibv_destroy_cq(cq)
		return fmt.Errorf("rdma_create_qp: %v: %w", errnoOf(rc), driver.ErrResources)
	}
	c.qp = C.shim_id_qp(c.id)
	q.cq = cq
	C.shim_arm_cq(cq)
	var perr error
	q.rq.each(func(e *wrEntry) {
		if perr != nil || e.state != wrPending {
			return
		}
		n := q.fillSGEs(e.sges)
		if rc := C.shim_post_recv(c.qp, C.uint64_t(wrID(wrKindRecv, e.seq)), &q.sges[0], C.int(n)); rc != 0 {
			perr = postError("ibv_post_recv", errnoOf(rc))
			return
		}
		e.state = wrPosted
		e.sges = e.sges[:0]
		q.rq.posted++
	})
	return perr
}

// fillSGEs copies sges into the post scratch. Callers hold mu and have
// checked len(sges) <= maxSGE.
func (q *QP) fillSGEs(sges []driver.SGE) int {
	for i, s := range sges {
		q.sges[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
	}
	return len(sges)
}

// waitIdle waits until the device has completed every posted send (and,
// with recvToo, every posted receive), or timeout passes, or stop closes.
func (q *QP) waitIdle(recvToo bool, timeout time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		q.mu.Lock()
		if q.sq.posted == 0 && (!recvToo || q.rq.posted == 0) {
			q.mu.Unlock()
			return
		}
		if q.progress == nil {
			q.progress = make(chan struct{})
		}
		p := q.progress
		q.mu.Unlock()
		select {
		case <-p:
		case <-t.C:
			return
		case <-stop:
			return
		}
	}
}

// drain polls the CQ until the device has completed every posted request
// or timeout passes. It polls instead of waiting for completion events:
// siw does not reliably raise one for the flushed completions of a QP in
// the error state, and Close must not sit out drainTimeout for them.
func (q *QP) drain(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		q.cqMu.Lock()
		if q.cq != nil {
			q.pollLocked()
		}
		q.cqMu.Unlock()
		q.mu.Lock()
		idle := q.sq.posted == 0 && q.rq.posted == 0
		q.mu.Unlock()
		if idle || time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
	}
}

// teardown destroys a connection's verbs objects. The QP goes to the
// error state first so the device flushes everything posted; what it has
// not completed within drainTimeout is completed as flushed here, after a
// last poll, so every posted request gets exactly one completion.
func (q *QP) teardown(c *conn) {
	if c.busy != nil {
		<-c.busy
	}
	q.mu.Lock()
	qp := c.qp
	q.mu.Unlock()
	if qp != nil {
		C.shim_qp_to_error(qp)
		q.drain(drainTimeout)
	}
	q.cqMu.Lock()
	if q.cq != nil {
		q.pollLocked()
	}
	if qp != nil {
		// Under cmMu: librdmacm may be moving this QP's state inside
		// rdma_get_cm_event (see fetchCM).
		q.ia.cmMu.Lock()
		C.rdma_destroy_qp(c.id)
		q.ia.cmMu.Unlock()
	}
	q.mu.Lock()
	c.qp = nil
	q.mu.Unlock()
	if q.cq != nil {
		C.ibv_destroy_cq(q.cq)
		q.cq = nil
	}
	q.cqMu.Unlock()
	C.shim_destroy_id(c.id)
	unregister(c.key)
	q.mu.Lock()
	q.flushAllLocked()
	q.mu.Unlock()
}
