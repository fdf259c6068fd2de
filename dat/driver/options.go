package driver

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"time"
)

// ConnectOptions are what a connection asks of its transport beyond the
// remote address and the private data of QP.Connect: where to connect
// from, a hook on the socket before it connects, and how to notice a peer
// that is gone. Package dat passes them to a QP that implements
// OptionsConnector. The zero value asks for what QP.Connect does: the IA's
// address and a port the provider picks, no hook, and keepalive with the
// defaults of package net (see KeepAlive).
//
// They are a separate struct, rather than fields of QPConfig, because
// they belong to one connection attempt, not to the queue pair, and
// because a provider that cannot honour one of them must be found out
// (by the type assertion) instead of silently ignoring it.
type ConnectOptions struct {
	// LocalAddr is the local address to connect from, a *net.TCPAddr
	// (nil: the IA's address). An unspecified IP means the IA's address;
	// a specified one must be the IA's when the IA is bound to one. A
	// non-zero Port is the local port (the TCP port on iWARP, the rdma_cm
	// port elsewhere); 0 lets the provider pick one.
	LocalAddr net.Addr
	// Control, if not nil, is called on the connection's socket after it
	// is created and before it is bound and connected, with the network
	// ("tcp4" or "tcp6") and the remote address, as net.Dialer's
	// ControlContext. An error it returns fails the connect with that
	// error wrapped. Providers that do not connect over a socket of their
	// own (verbs: the kernel's rdma_cm owns the connection) ignore it.
	Control func(ctx context.Context, network, address string, c syscall.RawConn) error
	// KeepAlive and KeepAliveConfig set up dead-peer detection on the
	// established connection with package net's conventions: see
	// ResolveKeepAlive.
	KeepAlive       time.Duration
	KeepAliveConfig net.KeepAliveConfig
	// Background says the connection is made ahead of need: nobody
	// waits for it yet, so the provider need not hurry it at the expense
	// of the connections in use (the iwarp provider then waits for the
	// TCP connect before it sends its MPA Request).
	Background bool
}

// OptionsConnector is implemented by a QP that takes ConnectOptions.
// Package dat calls ConnectWith instead of Connect when the consumer set
// options; with a QP that does not implement it, options that ask for a
// local address or a socket hook fail the connect (DAT_MODEL_NOT_SUPPORTED)
// and keepalive settings are ignored, as package net ignores them on
// protocols without keepalive.
type OptionsConnector interface {
	// ConnectWith is QP.Connect with options. QP.Connect is ConnectWith
	// with the zero ConnectOptions.
	ConnectWith(ctx context.Context, remote net.Addr, privateData []byte, opts ConnectOptions) (ConnectResult, error)
}

// Keepalive defaults, those of package net for TCP (net.Dialer and
// net.KeepAliveConfig): the first probe after 15 s of silence, then one
// every 15 s, and the peer is declared gone after 9 unanswered ones.
const (
	DefaultKeepAliveIdle     = 15 * time.Second
	DefaultKeepAliveInterval = 15 * time.Second
	DefaultKeepAliveCount    = 9
)

// ResolveKeepAlive turns the KeepAlive and KeepAliveConfig fields of
// ConnectOptions and ListenConfig into the keepalive a connection gets,
// with the rules of net.Dialer: if cfg.Enable is true, cfg applies (period
// is ignored); otherwise a negative period disables keepalive, and a zero
// or positive one enables it with period as the idle time (zero: 15 s).
// Zero Idle, Interval and Count get the defaults above; negative ones are
// left negative, which tells a TCP socket to keep the system's value and
// other transports to use the default. The result has Enable false when
// keepalive is off.
//
// Providers share this function so that "zero means on, negative means
// off" means the same on every transport.
func ResolveKeepAlive(period time.Duration, cfg net.KeepAliveConfig) net.KeepAliveConfig {
	if !cfg.Enable {
		if period < 0 {
			return net.KeepAliveConfig{}
		}
		cfg = net.KeepAliveConfig{Enable: true, Idle: period}
	}
	if cfg.Idle == 0 {
		cfg.Idle = DefaultKeepAliveIdle
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultKeepAliveInterval
	}
	if cfg.Count == 0 {
		cfg.Count = DefaultKeepAliveCount
	}
	return cfg
}

// OpenConfig is what package dat passes to a Driver that implements
// ConfigOpener: the registry's arguments, as Open gets them, and what the
// consumer asked of the IA itself.
type OpenConfig struct {
	// Args are the provider-specific instance parameters from the
	// registry entry, as for Driver.Open.
	Args []string
	// Logger receives the provider's diagnostics (conditions nobody can
	// act on, such as unexpected errors of a device's event loop), at
	// Debug level with structured attributes. Nil means slog.Default() at
	// the time of logging.
	Logger *slog.Logger
}

// ConfigOpener is implemented by a Driver that takes an OpenConfig;
// package dat calls OpenWith instead of Open then. Drivers need it only
// if they have something to do with the OpenConfig's fields beyond Args.
type ConfigOpener interface {
	// OpenWith opens one IA; Open(ctx, args) is OpenWith with only Args
	// set.
	OpenWith(ctx context.Context, cfg OpenConfig) (IA, error)
}
