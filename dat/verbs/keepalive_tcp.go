//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/internal/tcpdiag"
)

// tcpWatch is how an IA's keepers ask the kernel about TCP. The zero
// value asks it: tcpdiagUsable, then the IA's sock_diag socket. A test
// sets another on an IA of its own before the IA's first connection, to
// take the fallback or count the lookups; it is the IA's rather than the
// package's so that no keeper of another test, still running, reads what
// a test writes.
type tcpWatch struct {
	usable func() bool
	lookup func(s *tcpdiag.Socket, local, remote netip.AddrPort) (tcpdiag.Info, error)
}

// diagUsable is tcpdiagUsable, unless the IA's tcpWatch says otherwise.
func (ia *IA) diagUsable() bool {
	if u := ia.tcpWatch.usable; u != nil {
		return u()
	}
	return tcpdiagUsable()
}

// lookupTCP asks the IA's sock_diag socket about a TCP connection.
func (ia *IA) lookupTCP(local, remote netip.AddrPort) (tcpdiag.Info, error) {
	if l := ia.tcpWatch.lookup; l != nil {
		return l(&ia.diag, local, remote)
	}
	return ia.diag.Lookup(local, remote)
}

// errNoSockDiag is why a keeper cannot watch TCP on a kernel that does
// not answer sock_diag.
var errNoSockDiag = errors.New("the kernel does not answer sock_diag")

// tcpConn names the TCP connection an iWARP connection runs on.
type tcpConn struct{ local, remote netip.AddrPort }

// String is the four-tuple as "local -> remote", for messages.
func (t tcpConn) String() string { return t.local.String() + " -> " + t.remote.String() }

// tcpOf returns the four-tuple of c's TCP connection, as rdma_cm reports
// it (no syscall).
func tcpOf(c *conn) (*tcpConn, error) {
	la, ra := idAddr(c.id, false), idAddr(c.id, true)
	if la == nil || ra == nil {
		return nil, errors.New("the connection has no addresses")
	}
	return &tcpConn{local: la.AddrPort(), remote: ra.AddrPort()}, nil
}

// tcpdiagUsable reports whether this kernel answers sock_diag queries for
// TCP: asked about a connection that cannot exist (port 0 both ways), it
// says there is none. It asks once per process, on a socket of its own:
// readDepths needs the answer before the first connection is made.
var tcpdiagUsable = sync.OnceValue(func() bool {
	lo := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
	_, err := tcpdiag.Lookup(lo, lo)
	return errors.Is(err, tcpdiag.ErrNotFound)
})

// tickTCP is tick for an iWARP connection whose TCP socket t the kernel
// is expected to show. The peer is alive while its TCP acknowledges what
// was sent; the connection is idle while nothing came from the peer.
// After Idle of that with nothing outstanding, a zero-length RDMA Write
// probe makes TCP send a segment; a peer that then acknowledges nothing
// (probe or data) for Idle + Interval × Count in all is gone. The first
// tick that does not find the socket established takes the fallback
// (fallBack). Callers have collected the completions.
func (k *keeper) tickTCP(t *tcpConn) {
	q, c := k.q, k.c
	info, err := q.ia.lookupTCP(t.local, t.remote)
	q.mu.Lock()
	if k.stopped || q.state != qpConnected || q.conn != c {
		q.mu.Unlock()
		return
	}
	if !k.tcpSeen {
		if err == nil && !info.Established() {
			err = fmt.Errorf("TCP state %d, not established", info.State)
		}
		if err != nil {
			k.tcp = nil
			read := k.fallBack(fmt.Errorf("%v: %w", t, err))
			if read {
				k.read = true
			} else {
				k.stopped = true
				q.keep.Store(nil)
			}
			q.mu.Unlock()
			if read {
				k.tickCompletions()
			}
			return
		}
		k.tcpSeen = true
	}
	heard := min(info.LastAckRecv, info.LastDataRecv)
	var next time.Duration
	switch {
	case err != nil:
		// The socket left the kernel's table while the QP is still
		// connected: the device is taking the connection down, and
		// says so itself. Look again later in case it does not.
		q.ia.debug("keepalive: TCP state not available", slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
		next = k.idle
	case info.Unacked > 0 && heard >= k.idle+k.limit:
		k.stopped = true
		q.mu.Unlock()
		k.giveUp(fmt.Errorf("verbs: connection broken: keepalive: the peer's TCP acknowledged nothing for %v, %d segments outstanding: %w",
			heard.Round(time.Millisecond), info.Unacked, syscall.ETIMEDOUT))
		return
	case info.Unacked > 0:
		next = k.idle + k.limit - heard
	case heard >= k.idle && k.posted != k.done.Load():
		// The last probe has not completed (TCP has not taken it):
		// its slot is still in use.
		next = k.limit
	case heard >= k.idle:
		if err := k.probeLocked(); err != nil {
			q.ia.debug("keepalive: probe not posted", slog.Uint64("qp", uint64(c.qpNum)), slog.String("error", err.Error()))
			next = k.idle
		} else {
			k.probeAt = time.Now()
			next = k.limit
		}
	default:
		next = k.idle - heard
	}
	k.timer.Reset(max(next, minTick))
	q.mu.Unlock()
}
