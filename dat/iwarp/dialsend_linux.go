//go:build linux

package iwarp

import (
	"context"
	"net"
	"os"
	"sync"
	"syscall"
)

// A quickDial is the dialer of one connection whose MPA Request goes
// out with the TCP connect (see newQuickDial). It is pooled: its hooks
// are made once, and a dial copies the caller's net.Dialer into it, so
// that a dial allocates nothing of its own for the quick connect.
type quickDial struct {
	d     net.Dialer // the caller's, with the hooks below
	sent  int        // how much of req the connect's hook wrote
	raddr *net.TCPAddr
	laddr *net.TCPAddr // the caller's local address, bound by the hook
	req   []byte
	user  func(ctx context.Context, network, address string, c syscall.RawConn) error
	v4    bool  // the socket's family (network "tcp4")
	err   error // connectFD's outcome

	control   func(ctx context.Context, network, address string, c syscall.RawConn) error // q.hook
	connectFD func(fd uintptr)                                                            // q.connect
	sa4       syscall.SockaddrInet4
	sa6       syscall.SockaddrInet6
	lsa4      syscall.SockaddrInet4
	lsa6      syscall.SockaddrInet6
}

var quickDials = sync.Pool{New: func() any {
	q := new(quickDial)
	q.control, q.connectFD = q.hook, q.connect
	return q
}}

// newQuickDial returns the dialer of a connection like d's that writes
// req, the MPA Request, on the socket as soon as connect(2) has started
// the connection, or nil where d is to dial as it is: a fixed local
// port, an IPv6 zone, a local address of the other family. The caller
// dials with q.d, reads q.sent, and frees q.
//
// net.Dialer waits for the network poller to report the connect before
// it returns. On loopback, where the handshake is over when connect
// returns, that parks the dialing goroutine until another thread has
// seen the socket become writable: a wake-up that cost about a tenth of
// a dial (BenchmarkDial in rdmanet), and the Request left that much
// later. So q.d's Control hook (after the caller's own, if any) binds
// the socket to d.LocalAddr, connects it (twice: the second connect
// finds the handshake over and marks the socket connected) and writes
// req without waiting; package net's own connect then finds the socket
// connected (EISCONN) and does not wait either. A connect still in
// progress (another host) gets nothing written yet: package net's
// connect waits for it as usual (EALREADY), and the caller writes the
// Request after. A connect that fails at once is the Control hook's
// error, which net.Dialer reports as a *net.OpError for "dial" as it
// would its own.
func newQuickDial(d *net.Dialer, raddr *net.TCPAddr, req []byte) *quickDial {
	laddr, _ := d.LocalAddr.(*net.TCPAddr)
	if raddr.Zone != "" || laddr != nil && (laddr.Port != 0 || laddr.Zone != "" ||
		laddr.IP != nil && (laddr.IP.To4() == nil) != (raddr.IP.To4() == nil)) {
		return nil
	}
	q := quickDials.Get().(*quickDial)
	q.d = *d
	// The hook binds the socket itself: package net binds after it.
	q.d.LocalAddr = nil
	q.d.ControlContext = q.control
	q.raddr, q.laddr, q.req, q.user, q.sent = raddr, laddr, req, d.ControlContext, 0
	return q
}

// free returns q to the pool, holding on to nothing of its dial.
func (q *quickDial) free() {
	control, connectFD := q.control, q.connectFD
	*q = quickDial{control: control, connectFD: connectFD}
	quickDials.Put(q)
}

// hook is q.d's ControlContext: the caller's hook, then connect.
func (q *quickDial) hook(ctx context.Context, network, address string, c syscall.RawConn) error {
	if q.user != nil {
		if err := q.user(ctx, network, address, c); err != nil {
			return err
		}
	}
	q.v4, q.err = network == "tcp4", nil
	if err := c.Control(q.connectFD); err != nil {
		return err
	}
	return q.err
}

// connect binds fd to q.laddr (if not nil), connects it to q.raddr and
// writes what of q.req the socket takes at once, which it counts in
// q.sent; q.err is its failure.
func (q *quickDial) connect(fd uintptr) {
	s := int(fd)
	q.sent = 0
	if q.laddr != nil {
		if err := syscall.Bind(s, q.sockaddr(q.laddr, &q.lsa4, &q.lsa6)); err != nil {
			q.err = os.NewSyscallError("bind", err)
			return
		}
	}
	sa := q.sockaddr(q.raddr, &q.sa4, &q.sa6)
	switch err := syscall.Connect(s, sa); err {
	case nil:
	case syscall.EINPROGRESS, syscall.EINTR:
		// EINTR: the connect goes on in the background, as after
		// EINPROGRESS (package net treats it so too). Connect again,
		// which on loopback, where the handshake is over, marks the
		// socket connected before anything is sent: package net's own
		// connect then finds it so (EISCONN). Left connecting, package
		// net's connect would settle it, and a peer that answered the
		// Request and reset the connection by then (a server of
		// another protocol: its banner, then a reset for the unread
		// Request) would fail it as a connect, its answer discarded,
		// instead of the reading of the answer telling what it is.
		switch err := syscall.Connect(s, sa); err {
		case nil, syscall.EISCONN:
		case syscall.EALREADY, syscall.EINPROGRESS, syscall.EINTR:
			return // still connecting: package net waits, the caller writes req
		default:
			q.err = os.NewSyscallError("connect", err)
			return
		}
	default:
		q.err = os.NewSyscallError("connect", err)
		return
	}
	for {
		// MSG_NOSIGNAL: a connection that failed reports its error
		// or EPIPE here, never a signal.
		n, err := syscall.SendmsgN(s, q.req, nil, nil, syscall.MSG_NOSIGNAL)
		switch err {
		case syscall.EINTR:
			continue
		case nil:
			q.sent = n
		case syscall.EAGAIN:
			// No room: the caller writes req.
		default:
			// Reset already: the caller's write of req reports it,
			// as without the quick connect.
		}
		return
	}
}

// sockaddr is a's socket address in the family of the socket, filled
// into sa4 or sa6 (q's own, which spares an allocation per call); a nil
// IP is the unspecified address.
func (q *quickDial) sockaddr(a *net.TCPAddr, sa4 *syscall.SockaddrInet4, sa6 *syscall.SockaddrInet6) syscall.Sockaddr {
	if q.v4 {
		*sa4 = syscall.SockaddrInet4{Port: a.Port}
		if ip4 := a.IP.To4(); ip4 != nil {
			copy(sa4.Addr[:], ip4)
		}
		return sa4
	}
	*sa6 = syscall.SockaddrInet6{Port: a.Port}
	copy(sa6.Addr[:], a.IP.To16())
	return sa6
}
