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
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// CQ is one or more ibv_cqs on a completion channel of their own. It
// implements driver.CQ.
//
// Package dat's waiter polls it and sleeps in Wait, in Go's netpoller on
// the channel's fd: no goroutine of the provider stands between the device
// and the waiter. The provider polls it too, while it drains a QP that is
// going away or waits for a window bind (nobody else may be polling
// then); what it takes that is package dat's goes to the stash, which
// Poll hands out before anything still in the device's queues, so order
// is kept.
//
// On a device that can resize a CQ there is one ibv_cq, which grows as
// QPs attach. On one that cannot (siw), each ibv_cq is sized from what
// the consumer asked and what attaches, and a QP that finds no room in
// them gets a new ibv_cq on the same channel (a segment): the CQ stays
// small for the common case of one connection per CQ and still takes any
// number of QPs. A QP's work queues complete on the segment it was given,
// so the order of each queue's completions is the device's.
type CQ struct {
	ia   *IA
	key  uintptr // orders CQ locks (lockCQs)
	comp *C.struct_ibv_comp_channel
	f    *os.File // non-blocking duplicate of comp's fd, for the netpoller
	rc   syscall.RawConn

	// interrupted is set by Interrupt and consumed by Wait.
	interrupted atomic.Bool

	// mu serialises everything that touches the ibv_cqs or the stash:
	// polls, arming, resizing, attaching and detaching QPs, destroying.
	mu     sync.Mutex
	segs   []*cqSeg // the ibv_cqs; none for a CQ without a device (tests)
	next   int      // the segment the next poll starts with
	closed bool
	// qps maps the qp_num of each attached verbs QP to its QP: a work
	// completion names its QP only by number.
	qps   map[uint32]*QP
	stash []driver.Completion // polled for dat, not yet returned
	wcs   [C.SHIM_POLL_BATCH]C.struct_shim_wc
	// private marks a CQ the provider made for a QP with no CQ for
	// either queue; it is closed with the QP.
	private bool
}

// cqSeg is one ibv_cq of a CQ.
type cqSeg struct {
	cq   *C.struct_ibv_cq
	cqe  int // entries the ibv_cq holds
	need int // entries the work queues attached to it can fill
}

var _ driver.CQ = (*CQ)(nil)

// minCQE is the smallest ibv_cq made: 64 entries fill one page on siw
// (32-byte entries and an 8-byte trailer), and one more entry would take
// a second one, since siw rounds a CQ up to a power of two.
const minCQE = 64

// CreateCQ creates a CQ of at least cfg.Size entries on its own
// completion channel.
func (ia *IA) CreateCQ(cfg driver.CQConfig) (driver.CQ, error) {
	if err := ia.live(); err != nil {
		return nil, err
	}
	if cfg.Size < 0 || cfg.Size > ia.lim.maxCQE {
		return nil, fmt.Errorf("verbs: create CQ: %d entries exceed the device's %d: %w", cfg.Size, ia.lim.maxCQE, driver.ErrResources)
	}
	c, err := ia.newCQ(cfg.Size)
	if err != nil {
		return nil, err
	}
	if !ia.cqs.Add(c) {
		c.Close()
		return nil, errIAClosed
	}
	return c, nil
}

func (ia *IA) newCQ(size int) (_ *CQ, err error) {
	c := &CQ{ia: ia, key: newKey(), qps: make(map[uint32]*QP)}
	var comp *C.struct_ibv_comp_channel
	if rc := C.shim_create_comp_channel(ia.ctx, &comp); rc != 0 {
		return nil, fmt.Errorf("verbs: %w", localError("ibv_create_comp_channel", errnoOf(rc)))
	}
	c.comp = comp
	defer func() {
		if err != nil {
			c.destroy()
		}
	}()
	fd := int(comp.fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("verbs: completion channel: set non-blocking: %w", err)
	}
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, fmt.Errorf("verbs: completion channel: dup: %w", e)
	}
	c.f = os.NewFile(dup, "completions "+ia.ip.String())
	if c.rc, err = c.f.SyscallConn(); err != nil {
		return nil, fmt.Errorf("verbs: completion channel: %w", err)
	}
	if _, err := c.addSegLocked(size); err != nil {
		return nil, err
	}
	return c, nil
}

// addSegLocked creates an ibv_cq of at least size entries (minCQE at
// least, the device's maximum at most) on the CQ's channel. Callers hold
// mu, or own the CQ alone.
func (c *CQ) addSegLocked(size int) (*cqSeg, error) {
	size = min(max(size, minCQE), c.ia.lim.maxCQE)
	var cq *C.struct_ibv_cq
	if rc := C.shim_create_cq(c.ia.ctx, C.int(size), c.comp, &cq); rc != 0 {
		return nil, fmt.Errorf("verbs: %w", localError(fmt.Sprintf("ibv_create_cq(%d)", size), errnoOf(rc)))
	}
	s := &cqSeg{cq: cq, cqe: int(C.shim_cq_size(cq))}
	c.segs = append(c.segs, s)
	return s, nil
}

// destroy frees the C objects. The file goes first: its Close waits for
// a Wait inside RawConn.Read to leave, so nothing uses the channel after.
func (c *CQ) destroy() {
	if c.f != nil {
		c.f.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.segs {
		if rc := C.shim_destroy_cq(s.cq); rc != 0 {
			c.ia.debug("ibv_destroy_cq failed", slog.String("error", errnoOf(rc).Error()))
		}
	}
	c.segs = nil
	if c.comp != nil {
		C.ibv_destroy_comp_channel(c.comp)
		c.comp = nil
	}
}

// Close destroys the CQ; a Wait in progress returns net.ErrClosed.
// Package dat closes it only once no QP uses it.
func (c *CQ) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	n := len(c.qps)
	c.mu.Unlock()
	if n > 0 {
		c.ia.debug("closing a CQ that QPs still use", slog.Int("qps", n))
	}
	c.destroy()
	c.ia.cqs.Remove(c)
	return nil
}

// attach reserves room for a verbs QP's work queue (entries: the most
// completions it can have outstanding at once) and returns the ibv_cq the
// queue is to complete on. A CQ that overflows loses completions and
// breaks every QP on it, so the room must be there before the QP is:
// the ibv_cq grows if needed (ibv_resize_cq), and on a device that
// cannot resize, a queue that fits in no segment gets a new one, as large
// as all the others together (so a CQ shared by many QPs has few).
func (c *CQ) attach(entries int) (*cqSeg, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("verbs: CQ closed: %w", net.ErrClosed)
	}
	if entries > c.ia.lim.maxCQE {
		return nil, fmt.Errorf("verbs: %d completions outstanding exceed the device's CQ size %d: %w", entries, c.ia.lim.maxCQE, driver.ErrResources)
	}
	if !c.ia.lim.cqResizable {
		total := 0
		for _, s := range c.segs {
			if s.need+entries <= s.cqe {
				s.need += entries
				return s, nil
			}
			total += s.cqe
		}
		s, err := c.addSegLocked(max(entries, total))
		if err != nil {
			return nil, err
		}
		s.need = entries
		return s, nil
	}
	s := c.segs[0]
	need := s.need + entries
	if need > s.cqe {
		want := min(max(need, 2*s.cqe), c.ia.lim.maxCQE)
		if need > want {
			return nil, fmt.Errorf("verbs: %d completions outstanding exceed the device's CQ size %d: %w", need, c.ia.lim.maxCQE, driver.ErrResources)
		}
		if rc := C.shim_resize_cq(s.cq, C.int(want)); rc != 0 {
			return nil, fmt.Errorf("verbs: %w", localError(fmt.Sprintf("ibv_resize_cq(%d) for %d completions outstanding", want, need), errnoOf(rc)))
		}
		s.cqe = int(C.shim_cq_size(s.cq))
	}
	s.need = need
	return s, nil
}

// detach gives back what attach reserved on s. An emptied segment stays
// for the CQ's life: QPs come and go on a shared CQ, and its completions
// may still be queued until the next poll.
func (c *CQ) detach(s *cqSeg, entries int) {
	c.mu.Lock()
	s.need -= entries
	c.mu.Unlock()
}

// Poll moves up to len(dst) completions into dst: the stash first, then
// the device's queues.
func (c *CQ) Poll(dst []driver.Completion) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(dst, c.stash)
	if n > 0 {
		k := copy(c.stash, c.stash[n:])
		clear(c.stash[k:])
		c.stash = c.stash[:k]
	}
	if n < len(dst) {
		n += c.pollLocked(dst[n:])
	}
	return n
}

// pollLocked polls the device into dst, mapping each work completion and
// leaving out the provider's own. Each call starts with the next segment,
// so none starves the others. Callers hold mu.
func (c *CQ) pollLocked(dst []driver.Completion) int {
	n := 0
	for k := range c.segs {
		if n == len(dst) {
			break
		}
		n += c.pollSegLocked(c.segs[(c.next+k)%len(c.segs)], dst[n:])
	}
	if len(c.segs) > 1 {
		c.next = (c.next + 1) % len(c.segs)
	}
	return n
}

// pollSegLocked polls one ibv_cq into dst. Callers hold mu.
func (c *CQ) pollSegLocked(s *cqSeg, dst []driver.Completion) int {
	n := 0
	for n < len(dst) {
		got := int(C.shim_poll(s.cq, &c.wcs[0], C.int(min(len(dst)-n, len(c.wcs)))))
		if got <= 0 {
			if got < 0 {
				// ibv_poll_cq reports failure by a negative count,
				// not by errno.
				c.ia.debug("ibv_poll_cq failed", slog.Int("result", got))
			}
			break
		}
		for i := 0; i < got; i++ {
			w := &c.wcs[i]
			if comp, ok := c.mapLocked(wcRec{wrID: uint64(w.wr_id), status: uint32(w.status), opcode: uint32(w.opcode),
				byteLen: uint32(w.byte_len), qpNum: uint32(w.qp_num), imm: uint32(w.imm), hasImm: w.has_imm != 0}); ok {
				dst[n] = comp
				n++
			}
		}
		if got < len(c.wcs) && n < len(dst) {
			break // the queue is empty
		}
	}
	return n
}

// stashLocked polls everything the device holds into the stash, for the
// provider's own waits (drain, bind). It reports whether package dat got
// anything new. Callers hold mu.
func (c *CQ) stashLocked() bool {
	var buf [C.SHIM_POLL_BATCH]driver.Completion
	added := false
	for _, s := range c.segs {
		for {
			n := c.pollSegLocked(s, buf[:])
			c.stash = append(c.stash, buf[:n]...)
			added = added || n > 0
			if n < len(buf) {
				break
			}
		}
	}
	return added
}

// collect polls the device into the stash and, if that gave package dat
// anything, wakes its waiter: the completion event that would have told
// it may have been consumed already.
func (c *CQ) collect() {
	c.mu.Lock()
	added := c.stashLocked()
	c.mu.Unlock()
	if added {
		c.Interrupt()
	}
}

// Wait blocks until a completion is queued, Interrupt is called, the
// deadline passes or the CQ is closed. It arms the ibv_cqs, then polls
// once more into the stash: a completion that arrived between dat's last
// poll and the arming raises no event, and would otherwise be slept
// through. Then it sleeps in the netpoller until the channel has an event
// (taken and acked at once) or the file's read deadline, which Interrupt
// moves to now, passes.
func (c *CQ) Wait(deadline time.Time) error {
	if c.interrupted.Swap(false) {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("verbs: CQ wait: %w", net.ErrClosed)
	}
	if len(c.stash) > 0 {
		c.mu.Unlock()
		return nil
	}
	for _, s := range c.segs {
		if rc := C.shim_arm_cq(s.cq); rc != 0 {
			c.ia.debug("ibv_req_notify_cq failed", slog.String("error", errnoOf(rc).Error()))
		}
	}
	c.stashLocked()
	ready := len(c.stash) > 0
	c.mu.Unlock()
	if ready {
		return nil
	}
	if err := c.f.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("verbs: CQ wait: %w", net.ErrClosed)
	}
	// Interrupt sets the flag before the deadline: seen here, or its
	// deadline (set after ours) ends the Read.
	if c.interrupted.Swap(false) {
		return nil
	}
	err := c.rc.Read(func(uintptr) bool {
		// false: nothing queued yet, let the netpoller wait.
		return C.shim_take_cq_events(c.comp) > 0
	})
	c.interrupted.Store(false)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	// Nothing but Close ends the Read otherwise: RawConn.Read reports the
	// file closed under it as internal/poll's "use of closed file", which
	// is not os.ErrClosed.
	return fmt.Errorf("verbs: CQ wait: %v: %w", err, net.ErrClosed)
}

// Interrupt makes the current or next Wait return.
func (c *CQ) Interrupt() {
	c.interrupted.Store(true)
	c.f.SetReadDeadline(time.Unix(1, 0)) // in the past: the Read ends now
}

// Work completion opcodes and statuses the mapping needs (ibv_wc_opcode,
// ibv_wc_status).
const (
	wcOpSend      = C.IBV_WC_SEND
	wcOpRDMAWrite = C.IBV_WC_RDMA_WRITE
	wcOpRDMARead  = C.IBV_WC_RDMA_READ
	wcOpBindMW    = C.IBV_WC_BIND_MW
	wcOpRecv      = C.IBV_WC_RECV
	wcSuccess     = C.IBV_WC_SUCCESS
	wcFlushErr    = C.IBV_WC_WR_FLUSH_ERR
	wcRemAccess   = C.IBV_WC_REM_ACCESS_ERR
	wcMWBindErr   = C.IBV_WC_MW_BIND_ERR
)

// wcRec is one work completion in Go types.
type wcRec struct {
	wrID                           uint64
	status, opcode, byteLen, qpNum uint32
	// imm is the immediate value of a receive an RDMA Write with
	// Immediate consumed (hasImm).
	imm    uint32
	hasImm bool
}

// mapLocked turns a work completion into package dat's Completion, or
// consumes it (a provider request's, or one of a QP no longer attached).
// A failed request (not a flush) on an established connection means the
// device moved the QP to the error state: the connection is reported
// broken, from a goroutine of its own (never from inside Poll). Callers
// hold mu.
func (c *CQ) mapLocked(w wcRec) (driver.Completion, bool) {
	q := c.qps[w.qpNum]
	if q == nil {
		c.ia.debug("completion of a QP not on this CQ", slog.String("wr_id", fmt.Sprintf("%#x", w.wrID)), slog.Uint64("qp", uint64(w.qpNum)))
		return driver.Completion{}, false
	}
	if w.status != wcSuccess && w.status != wcFlushErr && q.hungUp.Load() {
		// A request caught by this side's own teardown (a Disconnect,
		// or the keeper giving up on the peer): it did not finish
		// because the connection was taken down, which is what a
		// flush says, and the teardown has its own reason. siw
		// completes the Send it was transmitting with LOC_QP_OP_ERR
		// rather than flushing it (drivertest's
		// Race/DisconnectWhilePosting).
		w.status = wcFlushErr
	}
	comp, ok := q.mapWC(w)
	if w.status != wcSuccess && w.status != wcFlushErr {
		err := wcFailure(w.status)
		q.noteFault(err)
		go q.lost(err)
	}
	return comp, ok
}

// mapWC maps one of q's work completions (see wrid.go for the wr_id).
func (q *QP) mapWC(w wcRec) (driver.Completion, bool) {
	id := w.wrID
	recv := false
	if id&wrHandle != 0 {
		switch wrKind(id) {
		case wrQuiet:
			// dat's request, posted unsignalled and not counted: it
			// completes only when it failed or was flushed.
			id &= wrIdxMask
		case wrBind:
			q.sendDone.Add(1)
			q.bindDone(id&wrIdxMask, w.status)
			return driver.Completion{}, false
		case wrProbe:
			q.sendDone.Add(1)
			q.probeDone()
			return driver.Completion{}, false
		case wrDrain:
			q.sendDone.Add(1)
			return driver.Completion{}, false
		default:
			return driver.Completion{}, false
		}
	} else {
		recv = id&wrRecvBit != 0
		id &= wrIDMask
		switch {
		case !recv:
			q.sendDone.Add(1)
		case q.srq != nil:
			q.srq.posted.Add(-1)
		default:
			q.recvDone.Add(1)
		}
	}
	if w.status == wcFlushErr {
		// The request was not finished: the provider drops it, and
		// package dat completes it as flushed once the connection's
		// end is reported.
		return driver.Completion{}, false
	}
	comp := driver.Completion{WRID: id, QPTag: q.tag, Status: wcStatus(w.status), Op: driver.OpSend}
	if recv {
		comp.Op = driver.OpRecv
	} // else: the device names no opcode on errors; package dat knows it
	if w.status == wcSuccess {
		comp.Length = w.byteLen
		switch w.opcode {
		case wcOpRDMAWrite:
			comp.Op = driver.OpRDMAWrite
		case wcOpRDMARead:
			comp.Op = driver.OpRDMARead
		}
		if recv {
			comp.Solicited = true // verbs does not report SE; see doc.go
			comp.WithImm, comp.Imm = w.hasImm, w.imm
		}
	}
	return comp, true
}

// wcStatus maps ibv_wc_status to DAT DTO completion statuses
// (the mapping DAPL's openib provider uses as well).
func wcStatus(s uint32) driver.Status {
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

func wcStatusString(status uint32) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}
