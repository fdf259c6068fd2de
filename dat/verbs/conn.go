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
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// drainTimeout bounds how long quiesce waits for the device to flush what
// is posted once the QP is in the error state. Both rxe and siw flush at
// the transition; what they never complete is a request posted after the
// device itself moved the QP to the error state (see drain), and then
// the ibv_qp is destroyed anyway. A variable so that tests can shorten it.
var drainTimeout = 2 * time.Second

// extraSendWR is the room kept in the send queue beyond the configured
// depth on a device with memory windows: one window bind (binds are
// serialised, bindMu). Elsewhere nothing but the consumer's requests is
// posted. The room is not free: siw rounds a queue up to a power of two,
// and 64 requests plus one would double the send queue's pages. One
// keepalive probe takes room too (at most one is outstanding,
// keepalive.go): without it, a send queue full of requests that never
// complete would keep the keeper from probing, and so from ever
// declaring the peer gone.
func (ia *IA) extraSendWR() int {
	n := 1
	if ia.lim.windows {
		n++
	}
	return n
}

// newConnID creates an rdma_cm id on the IA's channel whose events go to q.
func (q *QP) newConnID() (*conn, error) {
	c := newConn()
	c.key = register(q)
	if rc := C.shim_create_id(q.ia.ch, &c.id, C.uintptr_t(c.key)); rc != 0 {
		unregister(c.key)
		return nil, localError("rdma_create_id", errnoOf(rc))
	}
	return c, nil
}

// createVerbsQP builds the connection's RC QP on c.id from cfg, attaches
// it to its CQs and posts the receives that were waiting for it.
func (q *QP) createVerbsQP(c *conn, cfg driver.QPConfig) (err error) {
	pd, _ := pdOf(cfg.PD)
	if pd == nil {
		return fmt.Errorf("QP has no PD: %w", driver.ErrNotConnected)
	}
	if c.id.verbs != q.ia.ctx {
		return fmt.Errorf("the connection uses another RDMA device than the IA: %w", driver.ErrInvalidAddress)
	}
	var srq *C.struct_ibv_srq
	s, _ := cfg.SRQ.(*SRQ)
	sendWR, recvWR := max(cfg.MaxSendWR, 1)+q.ia.extraSendWR(), max(cfg.MaxRecvWR, 1)
	sEnt, rEnt := sendWR, recvWR
	if s != nil {
		srq = s.srq
		rEnt = s.cfg.MaxRecvWR // every SRQ receive may complete on this QP's CQ
	}
	scq, rcq := q.sendCQ, q.recvCQ
	if scq == nil && rcq == nil {
		// Nothing will be posted, but the provider's own requests
		// complete somewhere.
		if c.private, err = q.ia.newCQ(sEnt + rEnt); err != nil {
			return err
		}
		scq, rcq = c.private, c.private
	}
	if scq == nil {
		scq = rcq
	}
	if rcq == nil {
		rcq = scq
	}
	sseg, err := scq.attach(sEnt)
	if err != nil {
		return err
	}
	rseg, err := rcq.attach(rEnt)
	if err != nil {
		scq.detach(sseg, sEnt)
		return err
	}
	c.scq, c.rcq, c.sseg, c.rseg, c.sEnt, c.rEnt = scq, rcq, sseg, rseg, sEnt, rEnt
	q.srq = s
	sendSGE := max(cfg.MaxSendSGE, 1)
	if q.ia.lim.splitSmall {
		sendSGE = max(sendSGE, 2) // room for splitSmallSGE
	}
	create := func(inline uint32, got *C.uint32_t) C.int {
		return C.shim_create_qp(c.id, pd.pd, sseg.cq, rseg.cq, srq,
			C.uint32_t(sendWR), C.uint32_t(recvWR),
			C.uint32_t(sendSGE), C.uint32_t(max(cfg.MaxRecvSGE, 1)),
			C.uint32_t(inline), got, C.uintptr_t(q.key))
	}
	var gotInline C.uint32_t
	inline := q.ia.inline.next()
	rc := create(inline, &gotInline)
	for prev := inline; rc != 0 && prev > 0 && errors.Is(errnoOf(rc), syscall.EINVAL); {
		// The device may hold less inline data than asked: try less,
		// and remember the refusal only if less is accepted (inline.go).
		try := inlineBelow(prev)
		if create(try, &gotInline) == 0 {
			q.ia.debug("inline data refused", slog.Uint64("max_inline_data", uint64(prev)), slog.Uint64("granted", uint64(gotInline)))
			q.ia.inline.refuse(prev)
			rc = 0
			break
		}
		prev = try
	}
	if rc != 0 {
		scq.detach(sseg, sEnt)
		rcq.detach(rseg, rEnt)
		c.scq, c.rcq, c.sseg, c.rseg = nil, nil, nil, nil
		return localError(fmt.Sprintf("rdma_create_qp(%d/%d send/receive WRs, %d/%d SGEs)", sendWR, recvWR, sendSGE, max(cfg.MaxRecvSGE, 1)), errnoOf(rc))
	}
	qp := C.shim_id_qp(c.id)
	c.qpNum = uint32(C.shim_qp_num(qp))
	lockCQs(scq, rcq)
	scq.qps[c.qpNum] = q
	rcq.qps[c.qpNum] = q
	unlockCQs(scq, rcq)

	q.mu.Lock()
	defer q.mu.Unlock()
	c.qp = qp
	c.maxInline, c.pd = uint32(gotInline), pd
	pending := q.pending
	q.pending = nil
	for _, p := range pending {
		wrid, err := encodeWRID(p.id, true)
		if err != nil {
			return err
		}
		n := q.fillSGEs(p.sges)
		q.recvPosted.Add(1)
		if rc := C.shim_post_recv(qp, C.uint64_t(wrid), &q.sges[0], C.int(n)); rc != 0 {
			q.recvPosted.Add(^uint64(0))
			return postError("ibv_post_recv", errnoOf(rc))
		}
	}
	return nil
}

// lockCQs locks one or two CQs in a fixed order (by key), so that two
// QPs on the same pair never deadlock.
func lockCQs(a, b *CQ) {
	if a == b {
		a.mu.Lock()
		return
	}
	if a.key > b.key {
		a, b = b, a
	}
	a.mu.Lock()
	b.mu.Lock()
}

func unlockCQs(a, b *CQ) {
	a.mu.Unlock()
	if a != b {
		b.mu.Unlock()
	}
}

// fillSGEs copies sges into the post scratch. Callers hold mu and have
// checked len(sges) <= maxSGE.
func (q *QP) fillSGEs(sges []driver.SGE) int {
	for i, s := range sges {
		q.sges[i] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
	}
	return len(sges)
}

// siwMaxHdrInline bounds the payloads kernel siw copies into the packet
// header itself (siw_try_1seg, MAX_HDR_INLINE: 32 bytes), doubled for
// margin: splitting a larger SGE changes nothing but the path.
const siwMaxHdrInline = 64

// splitSmallSGE works around a kernel siw bug (6.1, and upstream still):
// a Send or RDMA Write of at most 32 bytes from one SGE is copied into the
// packet header, and when its memory crosses a page boundary and the
// copy is made by siw's transmit thread (the send queue was busy at the
// post) it copies bytes - (PAGE_SIZE - off) bytes from the first page
// instead of PAGE_SIZE - off, reading past its end, and takes the rest
// from the wrong offset: the peer gets damaged data, and the request
// completes successfully (TestSmallSendsAcrossPages). A request with
// two SGEs never takes that path, so such an SGE is split at the page
// boundary into two with the same key. sges ends with the request's one
// SGE; it returns sges with that SGE split if it needs to be.
func splitSmallSGE(sges []C.struct_ibv_sge) []C.struct_ibv_sge {
	i := len(sges) - 1
	s := sges[i]
	ps := uint64(pageSize)
	head := ps - uint64(s.addr)%ps // bytes on the first page
	if uint64(s.length) > siwMaxHdrInline || uint64(s.length) <= head {
		return sges
	}
	sges[i].length = C.uint32_t(head)
	return append(sges, C.struct_ibv_sge{addr: s.addr + C.uint64_t(head), length: s.length - C.uint32_t(head), lkey: s.lkey})
}

var pageSize = os.Getpagesize()

// quiesce makes the connection quiescent, once; later callers wait for
// the first. The QP goes to the error state, and the CQs are polled into
// their stashes until every request posted to the device has completed
// (the counts in QP), bounded by drainTimeout: the error state makes the
// device flush what it had not finished. Then the ibv_qp is destroyed,
// after which the device neither touches posted memory nor completes
// anything more, and the CQs are polled once more, so that every
// completion it made for the QP is in a stash or still in the CQ (some
// devices remove a destroyed QP's entries from its CQ: hence the polling
// before). The rdma_cm id is destroyed in the background (on iWARP that
// can wait for the peer); IA Close waits for it.
func (q *QP) quiesce(c *conn) {
	c.quiesceOnce.Do(func() {
		defer close(c.quiesced)
		q.stopKeepalive()
		if c.busy != nil {
			<-c.busy
		}
		q.mu.Lock()
		qp := c.qp
		q.mu.Unlock()
		if qp != nil {
			C.shim_qp_to_error(qp)
			q.drain(c)
			q.destroyVerbsQP(c)
		}
		if c.private != nil {
			c.private.Close()
		}
		q.ia.ids.Add(1)
		go func() {
			defer q.ia.ids.Done()
			C.shim_destroy_id(c.id)
			unregister(c.key)
		}()
	})
	<-c.quiesced
}

// drain polls the QP's CQs until every request posted to the device has
// completed, or drainTimeout passes. Nothing is posted meanwhile: the QP
// left the connected state before quiesce began.
//
// It counts rather than posting a marker behind the requests and waiting
// for its flush: rxe and siw take a post from user space into a ring the
// kernel reads only when told (siw: on no post at all; rxe: on a send,
// not on a receive), and a QP in the error state is flushed only on the
// transition, so a marker posted after it is never completed, and one
// posted before it could be consumed by a peer's Send. Requests posted
// before the transition are flushed by it.
//
// A QP on an SRQ has no receive queue of its own to count: SRQ receives
// are not flushed by a QP's error state, and destroying the QP ends
// whatever it was receiving.
func (q *QP) drain(c *conn) {
	start := time.Now()
	deadline := start.Add(drainTimeout)
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		c.scq.collect()
		if c.rcq != c.scq {
			c.rcq.collect()
		}
		sendLeft := q.sendPosted.Load() - q.sendDone.Load()
		recvLeft := q.recvPosted.Load() - q.recvDone.Load()
		if sendLeft == 0 && recvLeft == 0 {
			q.ia.debug("QP drained", slog.Uint64("qp", uint64(c.qpNum)), slog.Duration("took", time.Since(start)))
			return
		}
		if time.Now().After(deadline) {
			// Posted to a QP the device had already moved to the
			// error state (a peer's TERMINATE, an access error): such
			// requests never complete, and package dat flushes them.
			q.ia.debug("QP not drained; destroying it", slog.Uint64("qp", uint64(c.qpNum)),
				slog.Uint64("send_left", sendLeft), slog.Uint64("recv_left", recvLeft), slog.Duration("waited", drainTimeout))
			return
		}
		time.Sleep(pause)
	}
}

// destroyVerbsQP destroys the ibv_qp and takes what it left in its CQs.
// The CQs stay locked from before the destruction until the QP's number
// is forgotten: the device may give the number to a new QP at once.
func (q *QP) destroyVerbsQP(c *conn) {
	q.mu.Lock()
	c.qp = nil
	q.mu.Unlock()
	lockCQs(c.scq, c.rcq)
	c.scq.stashLocked()
	if c.rcq != c.scq {
		c.rcq.stashLocked()
	}
	// Under cmMu: librdmacm may be moving this QP's state inside
	// rdma_get_cm_event (see fetchCM).
	q.ia.cmMu.Lock()
	C.rdma_destroy_qp(c.id)
	q.ia.cmMu.Unlock()
	c.scq.stashLocked()
	delete(c.scq.qps, c.qpNum)
	if c.rcq != c.scq {
		c.rcq.stashLocked()
		delete(c.rcq.qps, c.qpNum)
	}
	wake := len(c.scq.stash) > 0 || len(c.rcq.stash) > 0
	unlockCQs(c.scq, c.rcq)
	c.scq.detach(c.sseg, c.sEnt)
	c.rcq.detach(c.rseg, c.rEnt)
	if wake {
		c.scq.Interrupt()
		if c.rcq != c.scq {
			c.rcq.Interrupt()
		}
	}
	// A bind still waiting will never complete now.
	if bw := q.bind.Load(); bw != nil {
		bw.finish(wcFlushErr)
	}
}
