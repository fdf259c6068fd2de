package rdmanet

import (
	"context"
	"net"
	"net/netip"
	"syscall"

	"github.com/rdmanet/rdmanet/dat"
)

// How a Dialer's and a ListenConfig's socket-level options reach the
// provider. Package net's names and meanings are kept (Control,
// ControlContext, KeepAlive, KeepAliveConfig, a LocalAddr whose port is
// used), so that a program moving from TCP changes the network name only.
// They travel as dat.ConnectOptions on the EP of a dialed connection
// (EP.SetConnectOptions, read by the provider through
// driver.OptionsConnector) and as dat.PSPOptions on a listener's PSP
// (driver.ListenConfig). The iwarp provider applies them to its TCP socket
// as net.Dialer and net.ListenConfig would; the verbs provider binds the
// local port through rdma_cm, has no socket for Control, and keeps
// connections alive with an RDMA-level probe (see Dialer.KeepAlive).

// connectOptions returns the dat options of a dial to dst: with the
// LocalAddr's port unless dup is set (a dup_connect, or a Dup, would reuse
// the four-tuple of the connection it copies).
func (d *Dialer) connectOptions(local *Addr, dup bool) *dat.ConnectOptions {
	o := &dat.ConnectOptions{
		Control:         d.controlFunc(),
		KeepAlive:       d.KeepAlive,
		KeepAliveConfig: d.KeepAliveConfig,
	}
	if local != nil {
		port := local.Port
		if dup {
			port = 0
		}
		o.LocalAddr = netip.AddrPortFrom(local.IP, port)
	}
	return o
}

// controlFunc is the hook to run on the connection's socket: ControlContext
// if set, else Control (as net.Dialer chooses), marked so that its error
// is told from the provider's own (see controlError).
func (d *Dialer) controlFunc() func(ctx context.Context, network, address string, c syscall.RawConn) error {
	user := d.ControlContext
	if user == nil && d.Control != nil {
		ctl := d.Control
		user = func(_ context.Context, network, address string, c syscall.RawConn) error {
			return ctl(network, address, c)
		}
	}
	if user == nil {
		return nil
	}
	return func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if err := user(ctx, network, address, c); err != nil {
			return &controlError{err}
		}
		return nil
	}
}

// controlError marks the error of a Dialer's Control or ControlContext
// on its way through the provider and package dat, so that the dial
// reports it as itself (as net.Dialer does) rather than as a refused
// connection.
type controlError struct{ err error }

func (e *controlError) Error() string { return e.err.Error() }
func (e *controlError) Unwrap() error { return e.err }

// localFrom converts a Dialer's LocalAddr: like addrFrom, but a
// *net.TCPAddr with no IP and a port (":5000") keeps its port, with an
// invalid IP standing for "any local address".
func localFrom(a net.Addr) *Addr {
	if ta, ok := a.(*net.TCPAddr); ok && ta != nil && len(ta.IP) == 0 {
		return &Addr{Port: uint16(ta.Port)}
	}
	return addrFrom(a)
}

// tcpDialer is the net.Dialer of the TCP fallback: the same local
// address (port included), hooks and keepalive as the RDMA dial.
func (d *Dialer) tcpDialer(local *Addr) *net.Dialer {
	nd := &net.Dialer{
		Control:         d.Control,
		ControlContext:  d.ControlContext,
		KeepAlive:       d.KeepAlive,
		KeepAliveConfig: d.KeepAliveConfig,
	}
	if local != nil {
		nd.LocalAddr = net.TCPAddrFromAddrPort(local.AddrPort())
	}
	return nd
}

// pspOptions returns the dat options of a listener's PSP.
func (lc *ListenConfig) pspOptions() *dat.PSPOptions {
	return &dat.PSPOptions{
		SharePort:       lc.SharePort,
		Control:         lc.Control,
		KeepAlive:       lc.KeepAlive,
		KeepAliveConfig: lc.KeepAliveConfig,
	}
}
