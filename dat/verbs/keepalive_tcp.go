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

// lookupTCP is tcpdiag.Lookup; tests replace it to take the fallback.
var lookupTCP = tcpdiag.Lookup

// tcpConn names the TCP connection an iWARP connection runs on.
type tcpConn struct{ local, remote netip.AddrPort }

// watchTCP returns c's TCP connection if the kernel shows it through
// sock_diag, established.
func watchTCP(c *conn) (*tcpConn, error) {
	la, ra := idAddr(c.id, false), idAddr(c.id, true)
	if la == nil || ra == nil {
		return nil, errors.New("the connection has no addresses")
	}
	t := &tcpConn{local: la.AddrPort(), remote: ra.AddrPort()}
	info, err := lookupTCP(t.local, t.remote)
	if err != nil {
		return nil, fmt.Errorf("%v -> %v: %w", t.local, t.remote, err)
	}
	if !info.Established() {
		return nil, fmt.Errorf("%v -> %v: TCP state %d, not established", t.local, t.remote, info.State)
	}
	return t, nil
}

// tcpdiagUsable reports whether this kernel answers sock_diag queries for
// TCP: asked about a connection that cannot exist (port 0 both ways), it
// says there is none.
var tcpdiagUsable = sync.OnceValue(func() bool {
	lo := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
	_, err := lookupTCP(lo, lo)
	return errors.Is(err, tcpdiag.ErrNotFound)
})

// tickTCP is tick for an iWARP connection whose TCP socket the kernel
// shows. The peer is alive while its TCP acknowledges what was sent; the
// connection is idle while nothing came from the peer. After Idle of
// that with nothing outstanding, a zero-length RDMA Write probe makes TCP
// send a segment; a peer that then acknowledges nothing (probe or data)
// for Idle + Interval × Count in all is gone.
func (k *keeper) tickTCP() {
	q, c := k.q, k.c
	k.collect()
	info, err := lookupTCP(k.tcp.local, k.tcp.remote)
	q.mu.Lock()
	if k.stopped || q.state != qpConnected || q.conn != c {
		q.mu.Unlock()
		return
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
