package dat

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// ConnectOptions are options of an EP's active connections that DAT's EP
// parameters have no room for, an extension beyond DAT: the local port to
// connect from (DAT reports an EP's local port but never lets the consumer
// choose it), a hook on the connection's socket, and dead-peer detection.
// The zero value asks for nothing beyond what Connect does without
// options: the IA's address, a port the provider picks, no hook, and
// keepalive with package net's defaults (see KeepAlive).
//
// The accepting side of a connection takes its keepalive from the PSP
// (PSPOptions), as net.ListenConfig gives it to accepted connections.
type ConnectOptions struct {
	// LocalAddr is the address to connect from. An invalid Addr means the
	// IA's address; a valid one must be the IA's address when the IA is
	// bound to one (DAT_INVALID_ADDRESS otherwise, reported as the
	// connection's failure). A non-zero port is the local port. A fixed
	// port makes no sense for DupConnect, whose new connection would
	// reuse the same four-tuple; the consumer leaves it 0 there.
	LocalAddr netip.AddrPort
	// Control, if not nil, is called on the connection's socket after it
	// is created and before it is bound and connected, as
	// net.Dialer.ControlContext: network is "tcp4" or "tcp6", address the
	// remote "host:port". An error it returns fails the connection
	// (NON_PEER_REJECTED, with the error in the event). Providers that do
	// not connect over a socket of their own (verbs) ignore it.
	Control func(ctx context.Context, network, address string, c syscall.RawConn) error
	// KeepAlive is the idle time before the first keepalive probe, as
	// net.Dialer.KeepAlive: zero means 15 s, negative turns keepalive
	// off. It is ignored when KeepAliveConfig.Enable is true.
	//
	// What a probe is depends on the provider: the iwarp provider uses
	// TCP keepalive on its socket (and bounds unacknowledged data by the
	// same time, TCP_USER_TIMEOUT), the verbs provider sends an RDMA-level
	// probe on InfiniBand and RoCE devices. A connection whose peer is
	// gone then ends as BROKEN, with an error that matches
	// syscall.ETIMEDOUT, within about Idle + Interval × Count of its last
	// sign of life.
	KeepAlive time.Duration
	// KeepAliveConfig sets the probes in detail, as
	// net.Dialer.KeepAliveConfig: when Enable is true it applies as is
	// (zero fields get the defaults: 15 s, 15 s, 9 probes).
	KeepAliveConfig net.KeepAliveConfig
	// Background says the connection is made ahead of need (a spare a
	// consumer keeps for later): nobody waits for it yet, and the
	// provider may favour the work of connections in use over its speed.
	Background bool
}

// SetConnectOptions sets the options the EP's next Connect or DupConnect
// uses (nil: none), an extension beyond DAT (see ConnectOptions). The
// options stay with the EP across Reset. They are checked when the EP
// connects: a provider whose QPs do not take options
// (driver.OptionsConnector) fails a Connect that asks for a local
// address or a socket hook with DAT_MODEL_NOT_SUPPORTED, and ignores
// keepalive settings.
func (ep *EP) SetConnectOptions(opts *ConnectOptions) error {
	const op = "dat_ep_set_connect_options"
	if err := ep.lock(op); err != nil {
		return err
	}
	defer ep.ia.mu.Unlock()
	if opts == nil {
		ep.connOpts = nil
		return nil
	}
	o := *opts
	ep.connOpts = &o
	return nil
}

// connectOptionsLocked returns the provider's form of the EP's options,
// or nil when there are none. It fails with DAT_MODEL_NOT_SUPPORTED when
// they ask for something only a driver.OptionsConnector can do and the
// EP's QP is not one. Callers hold ia.mu.
func (ep *EP) connectOptionsLocked(op string) (*driver.ConnectOptions, error) {
	o := ep.connOpts
	if o == nil {
		return nil, nil
	}
	d := &driver.ConnectOptions{Control: o.Control, KeepAlive: o.KeepAlive, KeepAliveConfig: o.KeepAliveConfig, Background: o.Background}
	if o.LocalAddr.Addr().IsValid() || o.LocalAddr.Port() != 0 {
		a := o.LocalAddr.Addr()
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice(), Zone: a.Zone(), Port: int(o.LocalAddr.Port())}
	}
	if _, ok := ep.qp.(driver.OptionsConnector); !ok {
		if d.LocalAddr != nil || d.Control != nil {
			return nil, newError(op, ModelNotSupported, NoSubtype, "the provider takes no local address or socket hook for a connection")
		}
		return nil, nil // keepalive is best effort, as in package net
	}
	return d, nil
}

// connectQP runs the provider's connect, with opts when there are any.
func connectQP(ctx context.Context, qp driver.QP, dst net.Addr, pd []byte, opts *driver.ConnectOptions) (driver.ConnectResult, error) {
	if opts != nil {
		if oc, ok := qp.(driver.OptionsConnector); ok {
			return oc.ConnectWith(ctx, dst, pd, *opts)
		}
	}
	return qp.Connect(ctx, dst, pd)
}
