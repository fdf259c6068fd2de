//go:build linux

package iwarp

import (
	"context"
	"net"
	"os"
	"syscall"
)

// quickDialer returns d set up so that its dial writes req, the MPA
// Request, on the socket as soon as connect(2) has started the
// connection, and sent, which says after the dial whether it did; or d
// itself (sent never true) where it leaves the connection as it is: a
// fixed local port, an IPv6 zone, a local address of the other family.
//
// net.Dialer waits for the network poller to report the connect before
// it returns. On loopback, where the handshake is over when connect
// returns, that parks the dialing goroutine until another thread has
// seen the socket become writable: a wake-up that cost about a tenth of
// a dial (BenchmarkDial in rdmanet), and the Request left that much
// later. So d's Control hook (after the caller's own, if any) binds the
// socket to d.LocalAddr, connects it and writes req without waiting;
// package net's own connect then finds the socket connected (EISCONN)
// and does not wait either. A connect still in progress (another host)
// takes nothing yet (EAGAIN): package net's connect waits for it as
// usual (EALREADY), and the caller writes the Request after. A connect
// that fails at once is the Control hook's error, which net.Dialer
// reports as a *net.OpError for "dial" as it would its own.
func quickDialer(d *net.Dialer, raddr *net.TCPAddr, req []byte) (_ *net.Dialer, sent *int) {
	sent = new(int)
	laddr, _ := d.LocalAddr.(*net.TCPAddr)
	if raddr.Zone != "" || laddr != nil && (laddr.Port != 0 || laddr.Zone != "" ||
		laddr.IP != nil && (laddr.IP.To4() == nil) != (raddr.IP.To4() == nil)) {
		return d, sent
	}
	user := d.ControlContext
	q := *d
	// The hook binds the socket itself: package net binds after it.
	q.LocalAddr = nil
	q.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if user != nil {
			if err := user(ctx, network, address, c); err != nil {
				return err
			}
		}
		var err error
		if cerr := c.Control(func(fd uintptr) { err = connectSending(int(fd), network == "tcp4", raddr, laddr, req, sent) }); cerr != nil {
			return cerr
		}
		return err
	}
	return &q, sent
}

// connectSending binds fd, a socket of family v4 (AF_INET) or AF_INET6,
// to laddr (if not nil), connects it to raddr and writes what of req the
// socket takes at once, which it counts in *sent.
func connectSending(fd int, v4 bool, raddr, laddr *net.TCPAddr, req []byte, sent *int) error {
	*sent = 0
	if laddr != nil {
		if err := syscall.Bind(fd, sockaddr(laddr.IP, laddr.Port, v4)); err != nil {
			return os.NewSyscallError("bind", err)
		}
	}
	switch err := syscall.Connect(fd, sockaddr(raddr.IP, raddr.Port, v4)); err {
	case nil, syscall.EINPROGRESS, syscall.EINTR:
		// EINTR: the connect goes on in the background, as after
		// EINPROGRESS (package net treats it so too).
	default:
		return os.NewSyscallError("connect", err)
	}
	for {
		// MSG_NOSIGNAL: a connection that failed reports its error
		// or EPIPE here, never a signal.
		n, err := syscall.SendmsgN(fd, req, nil, nil, syscall.MSG_NOSIGNAL)
		switch err {
		case syscall.EINTR:
			continue
		case nil:
			*sent = n
			return nil
		case syscall.EAGAIN:
			return nil // still connecting: the caller writes req
		}
		// The connect failed: on loopback a refusal is known before
		// connect returns.
		return os.NewSyscallError("connect", err)
	}
}

// sockaddr is the socket address of ip and port in the family of the
// socket (v4: AF_INET); a nil ip is the unspecified address.
func sockaddr(ip net.IP, port int, v4 bool) syscall.Sockaddr {
	if v4 {
		sa := &syscall.SockaddrInet4{Port: port}
		if ip4 := ip.To4(); ip4 != nil {
			copy(sa.Addr[:], ip4)
		}
		return sa
	}
	sa := &syscall.SockaddrInet6{Port: port}
	copy(sa.Addr[:], ip.To16())
	return sa
}
