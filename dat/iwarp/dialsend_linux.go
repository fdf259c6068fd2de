//go:build linux

package iwarp

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// errNoQuickDial says that dialSending leaves a connection to net.Dialer.
var errNoQuickDial = errors.New("iwarp: no quick dial for this connection")

// fileConnKeepAlive is the keepalive net.FileConn gives the TCP
// connections it makes (package net's defaults), which a connection
// configured the same way keeps without four more system calls.
var fileConnKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// dialSending opens a TCP connection to raddr and writes req, the MPA
// Request, on it as soon as connect(2) has started it. net.Dialer waits
// for the network poller to report the connect before it returns, which
// on loopback, where the handshake is over when connect returns, parks
// the dialing goroutine until another thread has seen the socket become
// writable: a wake-up that cost about a tenth of a dial (BenchmarkDial in
// rdmanet), and the Request left that much later. A connect still in
// progress (another host) takes nothing yet; the rest of req is then
// written as the poller reports room, that is once the connect is over,
// under ctx's deadline and cancellation, as net.Dialer waits for it.
//
// The socket gets what net.Dialer would give it without a Control hook
// (callers with one use net.Dialer): bound to laddr if not nil,
// TCP_NODELAY, and package net's default keepalive, which ka replaces
// unless it is the same (a disabled ka turns it off). Errors are
// *net.OpError for "dial", as from net.Dialer. errNoQuickDial leaves the
// connection to net.Dialer: addresses of two families, an IPv6 zone, a
// connection that met itself.
func dialSending(ctx context.Context, raddr, laddr *net.TCPAddr, req []byte, ka net.KeepAliveConfig) (*net.TCPConn, error) {
	family, sa := sockaddr(raddr)
	var lsa syscall.Sockaddr
	if laddr != nil {
		if laddr.IP == nil {
			ip := net.IPv4zero
			if family == syscall.AF_INET6 {
				ip = net.IPv6zero
			}
			laddr = &net.TCPAddr{IP: ip, Port: laddr.Port}
		}
		var lfamily int
		if lfamily, lsa = sockaddr(laddr); lfamily != family {
			sa = nil
		}
	}
	if sa == nil {
		return nil, errNoQuickDial
	}
	dialErr := func(op string, err error) error {
		if op != "" {
			err = os.NewSyscallError(op, err)
		}
		var src net.Addr
		if laddr != nil {
			src = laddr
		}
		return &net.OpError{Op: "dial", Net: "tcp", Source: src, Addr: raddr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		// Nothing leaves for a caller that gave up already.
		return nil, dialErr("", err)
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return nil, dialErr("socket", err)
	}
	// From here on the descriptor is f's, which closes it.
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	if lsa != nil {
		if err := syscall.Bind(fd, lsa); err != nil {
			return nil, dialErr("bind", err)
		}
	}
	switch err = syscall.Connect(fd, sa); err {
	case nil, syscall.EINPROGRESS, syscall.EINTR:
		// EINTR: the connect goes on in the background, as after
		// EINPROGRESS (package net treats it so too).
	default:
		return nil, dialErr("connect", err)
	}
	sent, err := sendNow(uintptr(fd), req)
	if err == nil && sent < len(req) {
		// Still connecting: f is in the network poller (os.NewFile
		// puts a non-blocking descriptor there), whose wait for room
		// is the wait for the connect.
		err = sendRest(ctx, f, req[sent:])
	}
	if err != nil {
		// The connect failed (on loopback a refusal is known before
		// connect returns), or ctx ended first.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, dialErr("", err)
		}
		return nil, dialErr("connect", err)
	}
	// net.FileConn duplicates the connected descriptor into a
	// *net.TCPConn, with TCP_NODELAY and package net's default
	// keepalive; f closes the original.
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, dialErr("", err)
	}
	tc := nc.(*net.TCPConn)
	// A connection to a port of this host nobody listens on can end up
	// connected to itself, when the kernel picks that very port as the
	// local one (TCP simultaneous open); net.Dialer tries again then.
	if la, ok := tc.LocalAddr().(*net.TCPAddr); ok && la.Port == raddr.Port && la.IP.Equal(raddr.IP) {
		resetClose(tc)
		return nil, errNoQuickDial
	}
	switch {
	case !ka.Enable:
		_ = tc.SetKeepAlive(false)
	case ka != fileConnKeepAlive:
		_ = tc.SetKeepAliveConfig(ka)
	}
	return tc, nil
}

// sendNow writes what of b the socket fd takes without waiting: 0 and no
// error while its connect is in progress.
func sendNow(fd uintptr, b []byte) (int, error) {
	for {
		// MSG_NOSIGNAL: a connection that failed reports its error
		// or EPIPE here, never a signal.
		n, err := syscall.SendmsgN(int(fd), b, nil, nil, syscall.MSG_NOSIGNAL)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		}
		return n, err
	}
}

// sendRest writes b to f's socket, waiting for room (the connect) under
// ctx's deadline and cancellation.
func sendRest(ctx context.Context, f *os.File, b []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		if err := f.SetWriteDeadline(d); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(aLongTimeAgo) })
	defer stop()
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		var n int
		n, werr = sendNow(fd, b)
		b = b[n:]
		return werr != nil || len(b) == 0
	})
	if err == nil {
		err = werr
	}
	return err
}

// sockaddr is the socket address of a, or a nil one where dialSending
// leaves a to net.Dialer (an IPv6 zone).
func sockaddr(a *net.TCPAddr) (family int, sa syscall.Sockaddr) {
	if ip4 := a.IP.To4(); ip4 != nil {
		sa4 := &syscall.SockaddrInet4{Port: a.Port}
		copy(sa4.Addr[:], ip4)
		return syscall.AF_INET, sa4
	}
	if ip6 := a.IP.To16(); ip6 != nil && a.Zone == "" {
		sa6 := &syscall.SockaddrInet6{Port: a.Port}
		copy(sa6.Addr[:], ip6)
		return syscall.AF_INET6, sa6
	}
	return 0, nil
}
