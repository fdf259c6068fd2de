package rdmanet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// Dialer holds options for dialing rdmanet connections. The zero value
// dials with the defaults (the "iwarp" IA, DefaultBufferSize, no timeout
// beyond the context's). As with net.Dialer, use it by pointer: it keeps
// lazily initialised state, the live connections it can duplicate.
type Dialer struct {
	// Timeout bounds a dial, resolution included (0: none).
	Timeout time.Duration
	// Deadline is an absolute limit for a dial (zero: none). The earlier
	// of Timeout, Deadline and the context's deadline applies.
	Deadline time.Time
	// LocalAddr is the local address to dial from; only its IP is used
	// (the provider picks the port). It also selects the IA: the default
	// iWARP IA is opened bound to this address.
	LocalAddr net.Addr
	// IA names the DAT interface adapter: a registry name, a provider name
	// or "provider:args" (see package dat). Empty means "iwarp".
	IA string
	// BufferSize is the connection's receive ring and staging buffer size
	// in bytes (0: DefaultBufferSize).
	BufferSize int
	// FallbackTCP dials plain TCP when the rdma dial fails for a reason
	// other than the context or the deadline (no rdmanet listener, no
	// usable IA). The connection returned is then a *net.TCPConn.
	FallbackTCP bool
	// NoDup turns off dup-connect reuse (below).
	NoDup bool
	// Poll says how a Read, Write or Close blocked on the connection
	// waits for its completions: the zero value spins for as long as the
	// IA's provider advises, then sleeps; dat.PollBusy never sleeps (the
	// lowest latency, a busy core per blocked call); dat.PollEvent sleeps
	// at once.
	Poll dat.PollPolicy

	// Live connections by "IA|address": a new dial to an address the
	// Dialer already has a live connection to is made with DAT's
	// dup_connect on that connection's EP (Conn.Dup).
	mu   sync.Mutex
	live map[string]*Conn
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
// the context no longer matters. The connection is a *Conn (or a
// *net.TCPConn with FallbackTCP). Errors are *net.OpError with Op "dial".
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := d.dialContext(ctx)
	defer cancel()
	var local *Addr
	if d.LocalAddr != nil {
		local = addrFrom(d.LocalAddr)
	}
	aps, err := resolve(ctx, network, address, false)
	if err != nil {
		return nil, opError("dial", local, nil, err)
	}
	var first error
	for _, ap := range aps {
		c, err := d.dialAddr(ctx, ap, local, nil)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if d.FallbackTCP && ctx.Err() == nil {
		var nd net.Dialer
		if local != nil {
			nd.LocalAddr = &net.TCPAddr{IP: local.IP.AsSlice()}
		}
		if c, err := nd.DialContext(ctx, "tcp", address); err == nil {
			return c, nil
		}
	}
	return nil, first
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
// when tmpl is given or the Dialer has a live connection to ap.
func (d *Dialer) dialAddr(ctx context.Context, ap netip.AddrPort, local *Addr, tmpl *Conn) (*Conn, error) {
	dst := &Addr{IP: ap.Addr(), Port: ap.Port()}
	var lip netip.Addr
	if local != nil {
		lip = local.IP
	}
	name := iaName(d.IA, lip)
	key := name + "|" + ap.String()
	if tmpl == nil && !d.NoDup {
		tmpl = d.template(key)
	}
	var s *sharedIA
	var err error
	if tmpl != nil {
		s = tmpl.ia
		s.hold()
	} else if s, err = acquireIA(ctx, name); err != nil {
		return nil, opError("dial", local, dst, err)
	}
	defer s.release() // the Conn holds its own reference
	c, err := newConn(s, newConnConfig(d.bufferSize(), d.Poll))
	if err != nil {
		return nil, opError("dial", local, dst, err)
	}
	c.dialer, c.dialKey = d, key
	timeout := dat.TimeoutInfinite
	if dl, ok := ctx.Deadline(); ok {
		if timeout = dat.TimeoutOf(time.Until(dl)); timeout == 0 {
			timeout = 1
		}
	}
	hello := c.hello()
	if testHelloHook != nil {
		hello = testHelloHook(hello)
	}
	err = errNotConnected
	if tmpl != nil {
		err = c.ep.DupConnect(tmpl.ep, timeout, hello, dat.QoSBestEffort)
	}
	if err != nil {
		// No template, or it is no longer connected: a plain connect.
		err = c.ep.Connect(ap.Addr(), dat.ConnQual(ap.Port()), timeout, hello, dat.QoSBestEffort, dat.ConnectDefault)
	}
	if err != nil {
		c.destroy()
		c.releaseMemory()
		return nil, opError("dial", local, dst, err)
	}
	err = c.awaitSetup(ctx.Done(), func() error { return contextError(ctx.Err()) })
	if err != nil {
		c.abandon()
		return nil, opError("dial", local, dst, err)
	}
	c.flushControl() // the first message: the initiator speaks first
	if !d.NoDup {
		d.remember(key, c)
	}
	return c, nil
}

// testHelloHook lets tests send a Hello of their making.
var testHelloHook func([]byte) []byte

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

// template returns a live connection to dup, if the Dialer has one.
func (d *Dialer) template(key string) *Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.live[key]
	if c == nil {
		return nil
	}
	c.mu.Lock()
	ok := c.lc == lcOpen && c.err == nil
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c
}

// remember makes c the template for key if there is none.
func (d *Dialer) remember(key string, c *Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live == nil {
		d.live = map[string]*Conn{}
	}
	if old := d.live[key]; old == nil || old.isDone() {
		d.live[key] = c
	}
}

// forget drops a closing connection from the template table.
func (d *Dialer) forget(c *Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live[c.dialKey] == c {
		delete(d.live, c.dialKey)
	}
}

func (c *Conn) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closedLocked() || c.err != nil
}

// Dup opens another connection to the same peer through DAT's
// dup_connect on this connection's EP (same remote address and
// qualifier, same IA, no name resolution). c must be a dialed, connected
// Conn.
func (c *Conn) Dup(ctx context.Context) (*Conn, error) {
	if c.dialer == nil {
		return nil, opError("dial", c.laddr, c.raddr, ErrNotDialed)
	}
	if c.isDone() {
		return nil, opError("dial", c.laddr, c.raddr, net.ErrClosed)
	}
	ctx, cancel := c.dialer.dialContext(ctx)
	defer cancel()
	dup, err := c.dialer.dialAddr(ctx, c.raddr.AddrPort(), nil, c)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			oe.Source = nil
		}
		return nil, err
	}
	return dup, nil
}
