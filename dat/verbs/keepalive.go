//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Keepalive on an RC connection: a keeper watches the connection's
// completions and, once none has come for Idle, posts a probe: a
// zero-length operation whose completion proves that the peer's device
// answered. It touches no memory and raises no completion on the peer (a
// zero-length RDMA operation needs no valid remote key: IB C9-88, and RFC
// 5040's zero-length Read), so no consumer on either side sees it. Its
// successful completion is a sign of life like any other; a probe the
// device cannot deliver fails with retry exceeded, which breaks the
// connection like any failed request (with ETIMEDOUT, see wcFailure). The
// transport retries the probe itself, so TCP's repeated probes have no
// counterpart here: Interval × Count is instead how long a probe may stay
// unanswered, with no other completion meanwhile, before the keeper
// declares the peer gone itself. That bound is what detects a dead peer
// in practice: rxe takes a retry count of 7 (what rdma_connect is given
// here) as "retry forever", and an iWARP device's TCP retransmits for
// about 15 minutes (tcp_retries2) before it gives up.
//
// Which probe, and what answers it, depends on the transport:
//   - InfiniBand and RoCE: an RDMA Write. It completes only once the
//     peer's device acknowledged it.
//   - iWARP: a zero-length RDMA Write too, but its completion proves
//     nothing (it completes as soon as the local TCP has taken it), so
//     the keeper asks the kernel instead how long the connection's TCP
//     socket has heard nothing from the peer while something it sent is
//     unacknowledged (sock_diag's tcp_info, package tcpdiag: siw's sockets
//     are kernel sockets, without a descriptor). The probe only makes TCP
//     send a segment that must be acknowledged; a peer whose TCP
//     acknowledges nothing for Idle + Interval × Count while something is
//     outstanding (a probe, or data) is gone, as TCP keepalive would judge.
//     The kernel is asked from the keeper's first tick on, an Idle after
//     establishment, so that connection setup makes no sock_diag query:
//     the IA keeps one netlink socket for its keepers (tcpdiag.Socket,
//     opened by the first lookup, closed with the IA).
//     Where the kernel does not show the connection, the probe is a
//     zero-length RDMA Read instead, which completes only when the peer's
//     Read Response arrives. That is the fallback, not the rule, because
//     siw answers a zero-length Read wrongly when it arrives while siw is
//     transmitting: it takes the length and key of the response from the
//     request it sent before, so it sends stale bytes, or fails with an
//     invalid STag, and either way the connection is terminated (seen
//     under load: "rresp len N != 0", "STag unknown: 0x00000000"). A Read
//     needs an ORD, which is negotiated before the first tick, so the
//     fallback is decided in two places. A kernel without sock_diag at
//     all is known before connecting (tcpdiagUsable, probed once per
//     process): readDepths then asks for an ORD and IRD of 1. A kernel
//     that answers sock_diag but does not show this connection (a port
//     mapper that rewrote the port) is found out only at the first tick,
//     and the connection has the ORD its consumer asked for: with 0, as
//     rdmanet's, it has no probe and its keeper ends (logged at Debug).
//     A connection whose peer grants no inbound Read (IRD 0, hence ORD
//     0) on a kernel without sock_diag gets no keeper either. Probing
//     such a connection anyway would wedge it: siw refuses a Read on a QP
//     with ORD 0 only once the request is in its send queue, where it
//     then blocks every later request.
//
// Completions reach the counters the keeper reads (QP.sendDone and
// recvDone) only when someone polls the CQ, so each tick polls the QP's
// CQs into their stashes first (as drain does; package dat's waiter gets
// them from there).
type keeper struct {
	q *QP
	c *conn
	// idle is the silence before a probe; limit how long a probe may go
	// unacknowledged with no other completion (Interval × Count).
	idle, limit time.Duration
	// read: probe with an RDMA Read (iWARP where the kernel does not
	// show the TCP socket) instead of a Write. Guarded by q.mu, as tcp
	// and tcpSeen are.
	read bool
	// tcp is the connection's TCP four-tuple on iWARP, where the kernel's
	// view of that socket tells whether the peer answers (tickTCP); nil
	// once the first tick found that the kernel does not show it.
	tcp *tcpConn
	// tcpSeen: a tick found tcp established, so the kernel shows it.
	tcpSeen bool

	// done counts probes completed (any status), from mapWC.
	done atomic.Uint64

	// Guarded by q.mu.
	timer   *time.Timer
	stopped bool
	posted  uint64    // probes posted
	seen    uint64    // sendDone+recvDone at the last tick
	last    time.Time // the last tick
	quiet   time.Time // no completion since (a lower bound: the tick before the one that saw the last)
	alive   time.Time // the tick that saw the last completion (an upper bound)
	probeAt time.Time // when the outstanding probe was posted
}

// minTick bounds how soon a keeper ticks again, so that a clock that
// says "due now" cannot make it spin.
const minTick = 10 * time.Millisecond

// keepaliveOf resolves what a connection's keepalive is, with package
// net's defaults for what ka leaves unset or to the system.
func keepaliveOf(ka net.KeepAliveConfig) (idle, limit time.Duration, on bool) {
	if !ka.Enable {
		return 0, 0, false
	}
	idle, interval, count := ka.Idle, ka.Interval, ka.Count
	if idle <= 0 {
		idle = driver.DefaultKeepAliveIdle
	}
	if interval <= 0 {
		interval = driver.DefaultKeepAliveInterval
	}
	if count <= 0 {
		count = driver.DefaultKeepAliveCount
	}
	return idle, interval * time.Duration(count), true
}

// readDepths is the IRD and ORD that a connection configured with cfg
// asks for: on iWARP where the kernel does not answer sock_diag,
// keepalive's fallback Read probe needs an ORD of at least 1, and a
// peer's probe an IRD of at least 1 (see keeper). Elsewhere they are the
// consumer's.
func (q *QP) readDepths(cfg driver.QPConfig, ka net.KeepAliveConfig) (ird, ord int) {
	ird, ord = cfg.IRD, cfg.ORD
	if _, _, on := keepaliveOf(ka); on && q.ia.attr.Transport == driver.TransportIWARP && !q.ia.diagUsable() {
		ird, ord = max(ird, min(1, q.ia.attr.MaxIRD)), max(ord, min(1, q.ia.attr.MaxORD))
	}
	return ird, ord
}

// startKeepalive starts the keeper of q's new connection c, if ka asks for
// keepalive. Called once c is established.
func (q *QP) startKeepalive(c *conn, ka net.KeepAliveConfig) {
	idle, limit, on := keepaliveOf(ka)
	if !on {
		return
	}
	now := time.Now()
	k := &keeper{q: q, c: c, idle: idle, limit: limit, last: now, quiet: now, alive: now}
	if q.ia.attr.Transport == driver.TransportIWARP {
		// No syscall here: the first tick asks the kernel.
		t, err := tcpOf(c)
		if err == nil && !q.ia.diagUsable() {
			err = errNoSockDiag
		}
		switch {
		case err == nil:
			k.tcp = t
		case !k.fallBack(err):
			return
		default:
			k.read = true
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpConnected || q.conn != c {
		return
	}
	k.seen = q.sendDone.Load() + q.recvDone.Load()
	k.timer = time.AfterFunc(idle, k.tick)
	q.keep.Store(k)
}

// stopKeepalive stops q's keeper, if it has one. A tick already running
// finds the QP no longer connected and does nothing.
func (q *QP) stopKeepalive() {
	k := q.keep.Load()
	if k == nil {
		return
	}
	q.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	q.mu.Unlock()
}

// probeDone takes the completion of one of q's probes.
func (q *QP) probeDone() {
	if k := q.keep.Load(); k != nil {
		k.done.Add(1)
	}
}

// fallBack decides, for a keeper on iWARP whose connection's TCP socket
// the kernel does not show (err says why), whether it goes on with an
// RDMA Read probe, which needs an ORD, or stops; it logs which.
func (k *keeper) fallBack(err error) bool {
	ia, c := k.q.ia, k.c
	if c.ord < 1 {
		ia.debug("keepalive: off: the kernel does not show the connection's TCP socket, and the connection has no ORD for a Read probe",
			slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
		return false
	}
	ia.debug("keepalive: probing with an RDMA Read: the kernel does not show the connection's TCP socket",
		slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
	return true
}

// tick is the keeper's timer function.
func (k *keeper) tick() {
	k.collect()
	q := k.q
	q.mu.Lock()
	t := k.tcp
	q.mu.Unlock()
	if t != nil {
		k.tickTCP(t)
		return
	}
	k.tickCompletions()
}

// tickCompletions is tick for a keeper that judges the peer by the QP's
// completions (InfiniBand, RoCE, iWARP's Read fallback). Callers have
// collected the completions.
func (k *keeper) tickCompletions() {
	q, c := k.q, k.c
	now := time.Now()
	q.mu.Lock()
	if k.stopped || q.state != qpConnected || q.conn != c {
		q.mu.Unlock()
		return
	}
	if p := q.sendDone.Load() + q.recvDone.Load(); p != k.seen {
		k.seen = p
		k.quiet, k.alive = k.last, now
	}
	k.last = now
	var next time.Duration
	if k.posted != k.done.Load() {
		since := k.probeAt
		if k.alive.After(since) {
			since = k.alive
		}
		waited := now.Sub(since)
		if waited >= k.limit {
			k.stopped = true
			q.mu.Unlock()
			err := fmt.Errorf("verbs: connection broken: keepalive: no completion for %v, a probe unacknowledged for %v: %w",
				now.Sub(k.alive).Round(time.Millisecond), now.Sub(k.probeAt).Round(time.Millisecond), syscall.ETIMEDOUT)
			k.giveUp(err)
			return
		}
		next = k.limit - waited
	} else if age := now.Sub(k.quiet); age >= k.idle {
		if err := k.probeLocked(); err != nil {
			q.ia.debug("keepalive: probe not posted", slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
			next = k.idle
		} else {
			k.probeAt = now
			next = k.limit
		}
	} else {
		next = max(k.idle-age, k.idle/4)
	}
	k.timer.Reset(max(next, minTick))
	q.mu.Unlock()
}

// collect takes what completed on the connection's CQs off the device,
// so that it counts (sendDone, recvDone, done).
func (k *keeper) collect() {
	if c := k.c; c.scq != nil {
		c.scq.collect()
		if c.rcq != c.scq {
			c.rcq.collect()
		}
	}
}

// giveUp ends the connection of a peer that stopped answering, with err.
// Callers have set k.stopped, and no longer hold q.mu.
func (k *keeper) giveUp(err error) {
	q := k.q
	q.ia.debug("keepalive: peer gone", slog.Uint64("qp", uint64(k.c.qpNum)), slog.String("error", err.Error()))
	q.noteFault(err)
	// This side takes the connection down, as a Disconnect would: what
	// the teardown fails is flushed, not a failure of its own. siw
	// completes a Write it was transmitting with LOC_QP_OP_ERR once lost
	// disconnects, and that must not hide the reason, ETIMEDOUT, behind a
	// generic one.
	q.hungUp.Store(true)
	go q.lost(err)
}

// probeLocked posts a probe, a signalled zero-length RDMA Write or Read,
// in the send queue slot kept for it (extraSendWR). Callers hold q.mu.
func (k *keeper) probeLocked() error {
	q := k.q
	qp := k.c.qp
	if qp == nil {
		return fmt.Errorf("no verbs QP")
	}
	op, nsge := C.IBV_WR_RDMA_WRITE, 0
	if k.read {
		// siw takes a Read's size from its first SGE: give it one, of
		// length 0 (never checked against a region at that length).
		op, nsge = C.IBV_WR_RDMA_READ, 1
		q.sges[0] = C.struct_ibv_sge{}
	}
	q.sendPosted.Add(1)
	rc := C.shim_post_send(qp, C.uint64_t(wrHandleOf(wrProbe, k.posted)), C.int(op), C.IBV_SEND_SIGNALED,
		&q.sges[0], C.int(nsge), 0, 0, 0)
	if rc != 0 {
		q.sendPosted.Add(^uint64(0))
		return postError("ibv_post_send", errnoOf(rc))
	}
	k.posted++
	return nil
}

// wcFailure is the error a failed work completion breaks its connection
// with. The transport giving up on the peer (retries exhausted, no
// response) wraps syscall.ETIMEDOUT, which a TCP connection reports for a
// peer gone silent.
func wcFailure(status uint32) error {
	switch status {
	case C.IBV_WC_RETRY_EXC_ERR, C.IBV_WC_RESP_TIMEOUT_ERR:
		return fmt.Errorf("verbs: connection broken: work request failed: %s: %w", wcStatusString(status), syscall.ETIMEDOUT)
	}
	return fmt.Errorf("verbs: connection broken: work request failed: %s", wcStatusString(status))
}
