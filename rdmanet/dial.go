package rdmanet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// Dialer holds options for dialing rdmanet connections. The zero value
// dials with the defaults (the "iwarp" IA, adaptive buffers, no timeout
// beyond the context's). Like net.Dialer it is plain configuration: it
// may be copied, and one Dialer may be used by many goroutines at once.
// (The live connections that dup-connect reuses are kept per IA, not in
// the Dialer.)
type Dialer struct {
	// Timeout bounds a dial, resolution included (0: none).
	Timeout time.Duration
	// Deadline is an absolute limit for a dial (zero: none). The earlier
	// of Timeout, Deadline and the context's deadline applies.
	Deadline time.Time
	// LocalAddr is the local address to dial from, as net.Dialer's: its
	// IP, if set, also selects the IA (the default iWARP IA is opened
	// bound to it), and a non-zero port is the connection's local port
	// (the TCP port with the iwarp provider, the rdma_cm port with verbs);
	// 0 lets the system pick. A dial from a fixed port is made afresh,
	// never through dup-connect (see NoDup), whose connection would have
	// the same four-tuple as the one it copies, and so is Conn.Dup's
	// connection, from a port the system picks. The TCP fallback dials
	// from the same address and port.
	LocalAddr net.Addr
	// Control, if not nil, is called on the connection's socket after it
	// is created and before it is bound and connected, with the network
	// ("tcp4" or "tcp6") and the remote address, as net.Dialer.Control:
	// it lets a program set socket options (SO_MARK, a TOS, a device
	// binding) that rdmanet does not know. An error it returns fails the
	// dial with that error in the *net.OpError. It reaches the socket of
	// a provider that connects over TCP (iwarp) and that of the TCP
	// fallback; the verbs provider has no socket of its own (the kernel's
	// rdma_cm owns the connection) and ignores it.
	Control func(network, address string, c syscall.RawConn) error
	// ControlContext is Control with the dial's context; if it is not
	// nil, Control is ignored, as with net.Dialer.
	ControlContext func(ctx context.Context, network, address string, c syscall.RawConn) error
	// KeepAlive is how long a connection may stay silent before it is
	// probed to find out whether the peer is still there, with package
	// net's conventions: zero means the default, 15 s; negative turns
	// probes off. It is ignored when KeepAliveConfig.Enable is true.
	//
	// A peer that vanishes (its host crashed, its network is gone)
	// without closing the connection then fails a Read or Write blocked
	// on it, with an error that matches syscall.ETIMEDOUT, about
	// Idle + Interval × Count after it last answered (2 min 30 s with the
	// defaults). With the iwarp provider the probes are TCP keepalives on
	// its socket, and unacknowledged data is given up after the same time
	// (TCP_USER_TIMEOUT), so a Write blocked with data in flight fails as
	// soon. With the verbs provider they are zero-length RDMA Writes
	// sent after Idle of silence, and one not answered within
	// Interval × Count breaks the connection: on InfiniBand or RoCE its
	// completion is the answer; on iWARP devices such as siw, the
	// acknowledgement of the connection's TCP socket, as the kernel
	// reports it.
	KeepAlive time.Duration
	// KeepAliveConfig sets the probes in detail, as
	// net.Dialer.KeepAliveConfig: when Enable is true it applies as it
	// is, zero fields getting the defaults (Idle and Interval 15 s, Count
	// 9); otherwise KeepAlive decides.
	KeepAliveConfig net.KeepAliveConfig
	// IA names the DAT interface adapter: a registry name, a provider name
	// or "provider:args" (see package dat). Empty means "iwarp".
	IA string
	// BufferSize fixes the connection's receive ring and staging buffer
	// size in bytes. 0 (the default) makes them adaptive: they start at
	// DefaultBufferSize, grow up to MaxBufferSize while the round trip
	// limits a stream, and shrink back when the connection idles.
	BufferSize int
	// FallbackTCP dials plain TCP to the same address when RDMA cannot
	// be had: no usable IA, nothing listening, a server that answers the
	// connection request in another protocol or does not answer it in
	// time, an rdmanet server of another version. The connection returned
	// is then a *FallbackConn saying why (its Reason), and the fallback is
	// counted (Listing.Fallbacks) and logged at Info.
	//
	// Falling back stays within the dial's own time (Timeout, Deadline,
	// the context): a server that refuses or answers falls back at once,
	// and a silent one (many TCP servers wait for a request line) is given
	// at most FallbackWait of it, or half of what is left if that is less,
	// so that the TCP dial has the rest. The RDMA attempt's TCP
	// connection is closed as soon as it is abandoned.
	FallbackTCP bool
	// NoDup turns off dup-connect reuse: by default a dial to an address
	// this process already has a live dialed connection to, on the same
	// IA, is made with DAT's dup_connect on that connection's EP
	// (Conn.Dup), which skips address and route resolution. Once a dial
	// to a peer was made that way, the IA dials spare connections to it
	// ahead (two at most, which the server accepts when they are made)
	// for the next such dials, so that they need not wait for a whole
	// connection set-up; the spares are closed with the connection they
	// were dialed from. NoDup dials afresh and does not offer the new
	// connection for reuse either.
	NoDup bool
	// NoWriteImm keeps every data announcement in a control Send. By
	// default, where both ends' transports have RDMA Write with Immediate
	// (InfiniBand, RoCE; not iWARP) and both Hellos say so, the last RDMA
	// Write of each chunk carries its announcement as immediate data, and
	// no Send follows it. Set it for an adapter that mishandles the
	// operation, or to measure what it saves.
	NoWriteImm bool
	// Poll says how a Read, Write or Close blocked on the connection
	// waits for its completions: the zero value spins for as long as the
	// IA's provider advises, then sleeps; dat.PollBusy never sleeps (the
	// lowest latency, a busy core per blocked call); dat.PollEvent sleeps
	// at once.
	Poll dat.PollPolicy
	// Logger receives the connection's life-cycle records: dialed and
	// closed at Debug, failures (a rejected handshake, a timeout, a peer
	// reset) at Info. Nothing is logged per Read or Write. Nil means
	// slog.Default() at the time of logging.
	Logger *slog.Logger
}

// Dial connects to address on network "rdma", "rdma4" or "rdma6" with the
// default Dialer, as net.Dial does for TCP.
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.Dial(network, address)
}

// DialTimeout is Dial with a timeout.
func DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	d := Dialer{Timeout: timeout}
	return d.Dial(network, address)
}

// Dial connects to address; see DialContext.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address ("host:port") on network "rdma",
// "rdma4" or "rdma6". The context bounds the whole dial; once it returns,
// the context no longer matters. The connection is a *Conn (or, with
// FallbackTCP, possibly a *FallbackConn). Errors are *net.OpError with Op "dial";
// a dial whose time ran out (Timeout, Deadline or the context's deadline)
// fails with an error that is a net.Error with Timeout() true and matches
// both context.DeadlineExceeded and os.ErrDeadlineExceeded.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	// The connections made keep this configuration (Conn.Dup dials with
	// it), so they get a copy that later changes to d do not touch.
	cfg := *d
	d = &cfg
	ctx, cancel := d.dialContext(ctx)
	defer cancel()
	var local *Addr
	if d.LocalAddr != nil {
		local = localFrom(d.LocalAddr)
	}
	aps, err := resolve(ctx, network, address, false)
	if err != nil {
		return nil, d.dialFailed(address, timedOut(ctx, opError("dial", local, nil, err)))
	}
	rctx, rcancel := ctx, context.CancelFunc(func() {})
	if d.FallbackTCP {
		rctx, rcancel = fallbackShare(ctx)
	}
	defer rcancel()
	var first error
	for _, ap := range aps {
		c, err := d.dialAddr(rctx, ap, local, nil, false)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if rctx.Err() != nil {
			break
		}
	}
	if d.FallbackTCP && ctx.Err() == nil {
		rcancel()
		c, err := d.tcpDialer(local).DialContext(ctx, tcpNetwork(network), address)
		if err == nil {
			fc := &FallbackConn{Conn: c, Reason: dialFallbackReason(first), Err: first}
			countFallback(d.Logger, fc)
			return fc, nil
		}
		if errors.Is(first, context.DeadlineExceeded) {
			// The time that ran out was only RDMA's share: the TCP
			// dial's failure is the one that says what went wrong.
			first = err
		}
	}
	return nil, d.dialFailed(address, first)
}

// FallbackWait bounds the share of a dial's time that a Dialer with
// FallbackTCP gives RDMA before it dials TCP, when the server neither
// accepts nor refuses the connection request.
const FallbackWait = 500 * time.Millisecond

// fallbackShare returns the context for the RDMA attempt of a dial that
// may fall back: it ends after FallbackWait, or half the time ctx has
// left if that is less.
func fallbackShare(ctx context.Context) (context.Context, context.CancelFunc) {
	share := FallbackWait
	if dl, ok := ctx.Deadline(); ok {
		share = min(share, time.Until(dl)/2)
	}
	return context.WithTimeout(ctx, share)
}

// tcpNetwork is the TCP network of an rdmanet network.
func tcpNetwork(network string) string {
	switch network {
	case "rdma4":
		return "tcp4"
	case "rdma6":
		return "tcp6"
	}
	return "tcp"
}

// dialFailed logs a failed dial, with its reason, and returns err. A dial
// its caller cancelled is logged at Debug only: net/http, for one, cancels
// the dials it no longer needs as a matter of course.
func (d *Dialer) dialFailed(address string, err error) error {
	level := slog.LevelInfo
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug
	}
	logger(d.Logger).LogAttrs(context.Background(), level, "rdmanet: dial failed",
		slog.String("remote", address), slog.String("reason", failureReason(err)), slog.String("error", err.Error()))
	return err
}

// dialContext applies Timeout and Deadline to ctx.
func (d *Dialer) dialContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline := d.Deadline
	if d.Timeout > 0 {
		if t := time.Now().Add(d.Timeout); deadline.IsZero() || t.Before(deadline) {
			deadline = t
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}

func (d *Dialer) bufferSize() int { return d.BufferSize }

// dialAddr makes one connection to ap, through dup_connect on tmpl's EP
// when tmpl is given or the IA has a live dialed connection to ap, taking
// the spare dialed ahead for such a dial if there is one (spare.go). d is
// the dial's own copy of the configuration: the Conn keeps it. A spare's
// own dial (spareDial) neither uses nor starts spares, is not offered for
// reuse and is not logged until a dial takes it.
func (d *Dialer) dialAddr(ctx context.Context, ap netip.AddrPort, local *Addr, tmpl *Conn, spareDial bool) (_ *Conn, err error) {
	defer func() { err = timedOut(ctx, err) }()
	dst := &Addr{IP: ap.Addr(), Port: ap.Port()}
	var lip netip.Addr
	if local != nil {
		lip = local.IP
	}
	var s *sharedIA
	if tmpl != nil {
		s = tmpl.ia
		s.hold()
	} else if s, err = acquireIA(ctx, iaName(d.IA, lip)); err != nil {
		return nil, opError("dial", local, dst, &noDeviceError{err})
	}
	defer s.release() // the Conn holds its own reference
	key := ap.String()
	fixedPort := local != nil && local.Port != 0
	if tmpl == nil && !d.NoDup && !fixedPort {
		tmpl = s.template(key)
	}
	if tmpl != nil && !spareDial {
		if c := s.takeSpare(ctx, key, tmpl, d); c != nil {
			s.startSpare(key, ap, tmpl, d, c)
			if !d.NoDup {
				s.remember(key, c)
			}
			c.logDebug("rdmanet: dialed", slog.Bool("dup", true), slog.Bool("spare", true))
			return c, nil
		}
	}
	cfg := newConnConfig(d.bufferSize(), d.Poll)
	cfg.noImm = d.NoWriteImm
	c, err := newConn(s, cfg, d.Logger, d)
	if err != nil {
		return nil, opError("dial", local, dst, err)
	}
	c.dialKey = key
	hello := c.hello()
	if h := testHelloHook.Load(); h != nil {
		hello = (*h)(hello)
	}
	// The connection is made in this goroutine (ConnectContext), which
	// would only wait for it otherwise: its outcome is on the EVD when
	// the call returns, and awaitSetup applies it without sleeping.
	options := func(dup bool) *dat.ConnectOptions {
		o := d.connectOptions(local, dup)
		// Nobody waits for a spare: the provider need not hurry it at
		// the expense of the connection just taken, whose first
		// exchange its dial would otherwise meet on both ends.
		o.Background = spareDial
		return o
	}
	err = errNotConnected
	dup := tmpl != nil
	if dup {
		if err = c.ep.SetConnectOptions(options(true)); err == nil {
			err = c.ep.DupConnectContext(ctx, tmpl.ep, hello, dat.QoSBestEffort)
		}
		dup = err == nil
	}
	if err != nil {
		// No template, or it is no longer connected: a plain connect.
		if err = c.ep.SetConnectOptions(options(false)); err == nil {
			err = c.ep.ConnectContext(ctx, ap.Addr(), dat.ConnQual(ap.Port()), hello, dat.QoSBestEffort, dat.ConnectDefault)
		}
	}
	if err != nil {
		c.destroy()
		c.releaseMemory()
		return nil, opError("dial", local, dst, err)
	}
	err = c.awaitSetup(ctx, func() error { return contextError(ctx.Err()) })
	if err != nil {
		c.abandon()
		return nil, opError("dial", local, dst, err)
	}
	c.setupTook = time.Since(c.born)
	if spareDial {
		c.releaseFirst() // nobody calls a spare until a dial takes it
		return c, nil
	}
	c.armFirst() // the first message waits for the application's first call
	if !d.NoDup {
		s.remember(key, c)
	}
	if dup {
		s.startSpare(key, ap, tmpl, d, c)
	}
	c.logDebug("rdmanet: dialed", slog.Bool("dup", dup))
	return c, nil
}

// timedOut makes err, a dial's *net.OpError, report ctx's end if ctx is
// done: whatever step the dial was at when its time ran out (opening the
// IA, resolving, the handshake), the caller sees the same timeout (or
// cancellation), as with package net.
func timedOut(ctx context.Context, err error) error {
	var oe *net.OpError
	if cerr := ctx.Err(); cerr != nil && errors.As(err, &oe) {
		oe.Err = contextError(cerr)
	}
	return err
}

// testHelloHook lets tests send a Hello of their making. Nil outside
// tests; atomic, since a test sets it while connections of earlier tests
// may still be dialing.
var testHelloHook atomic.Pointer[func([]byte) []byte]

// abandon tears down a connection that never reached its user.
func (c *Conn) abandon() {
	c.mu.Lock()
	c.moveLocked(lcClosing)
	if c.err == nil {
		c.err = net.ErrClosed // never open: teardown sends nothing
	}
	close(c.done)
	c.mu.Unlock()
	c.teardown()
}

func (c *Conn) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closedLocked() || c.err != nil
}

// Dup opens another connection to the same peer through DAT's
// dup_connect on this connection's EP (same remote address and
// qualifier, same IA, no name resolution). c must be a dialed, connected
// Conn. After the first Dup of c, the next ones take connections dialed
// ahead while c lives (see Dialer.NoDup).
func (c *Conn) Dup(ctx context.Context) (*Conn, error) {
	if c.dialer == nil {
		return nil, opError("dial", c.laddr, c.raddr, ErrNotDialed)
	}
	if c.isDone() {
		return nil, opError("dial", c.laddr, c.raddr, net.ErrClosed)
	}
	ctx, cancel := c.dialer.dialContext(ctx)
	defer cancel()
	dup, err := c.dialer.dialAddr(ctx, c.raddr.AddrPort(), nil, c, false)
	if err != nil {
		c.dialer.dialFailed(c.raddr.String(), err)
		var oe *net.OpError
		if errors.As(err, &oe) {
			oe.Source = nil
		}
		return nil, err
	}
	return dup, nil
}
