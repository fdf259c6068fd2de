package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Connect establishes a connection to remote (a *net.TCPAddr whose port is
// the connection qualifier) as the MPA initiator, sending privateData in
// the MPA Request. It is ConnectWith with no options.
func (q *QP) Connect(ctx context.Context, remote net.Addr, privateData []byte) (driver.ConnectResult, error) {
	return q.ConnectWith(ctx, remote, privateData, driver.ConnectOptions{})
}

// ConnectWith establishes a connection to remote (a *net.TCPAddr whose
// port is the connection qualifier) as the MPA initiator, sending
// privateData in the MPA Request. The package documentation lists how
// each outcome is reported. On success the QP owns the TCP connection;
// the startup rule then requires this side to send the first FPDU.
//
// The options reach the TCP socket as they would through net.Dialer:
// LocalAddr is the address the socket is bound to (its IP, when
// specified, must be the IA's if the IA is bound to one), Control runs
// before the socket is bound and connected, and KeepAlive and
// KeepAliveConfig become the socket's TCP keepalive (see
// driver.ResolveKeepAlive), with TCP_USER_TIMEOUT set to the same
// Idle + Interval × Count on Linux so that a peer gone while data was in
// flight, when TCP sends no keepalive, is given up as soon.
func (q *QP) ConnectWith(ctx context.Context, remote net.Addr, privateData []byte, opts driver.ConnectOptions) (driver.ConnectResult, error) {
	raddr, err := provkit.RemoteTCPAddr(remote)
	if err != nil {
		return driver.ConnectResult{}, fmt.Errorf("iwarp: connect %v: %w", remote, err)
	}
	prefix := "iwarp: connect " + raddr.String()
	if len(privateData) > MaxPrivateData {
		return driver.ConnectResult{}, fmt.Errorf("%s: %d bytes of private data exceed the limit of %d", prefix, len(privateData), MaxPrivateData)
	}
	d, err := q.ia.dialer(opts)
	if err != nil {
		return driver.ConnectResult{}, fmt.Errorf("%s: %w", prefix, err)
	}
	actx, a, cfg, err := q.beginAttempt(ctx, "connect")
	if err != nil {
		return driver.ConnectResult{}, err
	}
	c, res, err := q.ia.initiate(ctx, actx, d, !opts.Background, raddr, cfg, privateData)
	if err = q.finishAttempt(a, c, err); err != nil {
		return driver.ConnectResult{}, fmt.Errorf("%s: %w", prefix, err)
	}
	res.Local, res.Remote = c.info.Local, c.info.Remote
	return res, nil
}

// dialer returns the net.Dialer of a connection with opts.
func (ia *IA) dialer(opts driver.ConnectOptions) (*net.Dialer, error) {
	d := &net.Dialer{ControlContext: opts.Control}
	ka := driver.ResolveKeepAlive(opts.KeepAlive, opts.KeepAliveConfig)
	if ka.Enable {
		d.KeepAliveConfig = ka
	} else {
		d.KeepAlive = -1
	}
	local := &net.TCPAddr{IP: ia.opts.ip}
	if opts.LocalAddr != nil {
		la, err := provkit.LocalTCPAddr(opts.LocalAddr)
		if err != nil {
			return nil, err
		}
		if la.IP != nil && !la.IP.IsUnspecified() {
			if ia.opts.ip != nil && !la.IP.Equal(ia.opts.ip) {
				return nil, fmt.Errorf("local address %v is not the IA's %v: %w", la.IP, ia.opts.ip, driver.ErrInvalidAddress)
			}
			local.IP = la.IP
			local.Zone = la.Zone
		}
		local.Port = la.Port
	}
	if local.IP != nil || local.Port != 0 {
		d.LocalAddr = local
	}
	return d, nil
}

// initiate runs the initiator side: TCP connect with d, MPA Request, MPA
// Reply. ctx is the caller's context (its deadline and cancellation are
// reported as such), actx additionally carries local aborts. quick sends
// the Request with the connect (see newQuickDial); a connection made in
// the background (driver.ConnectOptions.Background) waits for the
// connect as package net does, which leaves the processor to the
// connections in use.
func (ia *IA) initiate(ctx, actx context.Context, d *net.Dialer, quick bool, raddr *net.TCPAddr, cfg driver.QPConfig, pdata []byte) (*connection, driver.ConnectResult, error) {
	req := ia.request(cfg, pdata)
	var q *quickDial
	if quick {
		q = newQuickDial(d, raddr, req)
	}
	var nc net.Conn
	var err error
	sent := 0
	if q != nil {
		nc, err = q.d.DialContext(actx, "tcp", raddr.String())
		sent = q.sent
		q.free()
	} else {
		nc, err = d.DialContext(actx, "tcp", raddr.String())
	}
	if err != nil {
		// A full listener's reset can come so quickly that the connect
		// itself reports it. A deadline that passed is the caller's
		// (the dialer has none of its own), even where the context's
		// timer has not fired yet: the poller's fired first.
		_, ctxBound := ctx.Deadline()
		return nil, driver.ConnectResult{}, classify(ctx, actx, refused(err), ctxBound, 0)
	}
	// TCP_NODELAY (siw_tcp_nagle = false) is on already: package net
	// sets it on every connection it makes.
	tc := nc.(*net.TCPConn)
	setUserTimeout(tc, d.KeepAliveConfig)
	// A connection from a port of the caller's choosing is reset rather
	// than closed when it fails, so that the port is free at once for
	// another attempt (rdmanet's TCP fallback dials from the same one).
	fixedPort := d.LocalAddr != nil && d.LocalAddr.(*net.TCPAddr).Port != 0

	// The Reply must arrive within rep_timeout (siw MPAREQ_TIMEOUT) or
	// the caller's deadline, whichever is first; cancellation or a local
	// abort expires the socket deadline at once.
	deadline := time.Now().Add(ia.opts.replyTimeout)
	ctxBound := false
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline, ctxBound = cd, true
	}
	_ = tc.SetDeadline(deadline)
	stop := context.AfterFunc(actx, func() { _ = tc.SetDeadline(aLongTimeAgo) })
	if sent < len(req) {
		if _, err = tc.Write(req[sent:]); err != nil {
			err = fmt.Errorf("MPA request: %w", refused(err))
		}
	}
	var info ConnInfo
	var res driver.ConnectResult
	if err == nil {
		info, res, err = ia.exchangeInitiator(tc, cfg)
	}
	if !stop() && err == nil {
		// Cancelled just as the exchange finished: the socket deadline may
		// already be (or be about to be) expired, so the connection is
		// unusable. Report the cancellation.
		err = context.Cause(actx)
	}
	if err != nil {
		if fixedPort || errors.Is(err, driver.ErrNotRDMAPeer) {
			// Whatever a server of another protocol sent is unread,
			// and a port of the caller's choosing must be free at
			// once: reset rather than leave a half-closed connection.
			resetClose(tc)
		} else {
			_ = tc.Close()
		}
		var rej *driver.RejectError
		if errors.As(err, &rej) {
			return nil, driver.ConnectResult{}, err
		}
		return nil, driver.ConnectResult{}, classify(ctx, actx, err, ctxBound, ia.opts.replyTimeout)
	}
	_ = tc.SetDeadline(time.Time{})
	return newConnection(tc, info), res, nil
}

// aLongTimeAgo is a deadline that has certainly passed: setting it makes
// pending socket I/O fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// request is the MPA Request of an initiator with cfg, carrying pdata.
func (ia *IA) request(cfg driver.QPConfig, pdata []byte) []byte {
	req := wire.MPAFrame{
		Header:      wire.MPAHeader{Kind: wire.MPARequest, Revision: uint8(ia.opts.mpaRev)},
		PrivateData: pdata,
	}
	if ia.opts.mpaRev == wire.MPARevision2 {
		req.Header.Flags |= wire.MPAFlagEnhanced
		req.V2 = wire.MPAv2{IRD: v2Limit(cfg.IRD), ORD: v2Limit(cfg.ORD)}
	}
	if ia.opts.requireCRC {
		req.Header.Flags |= wire.MPAFlagCRC
	}
	// ConnectWith checked the private data's length, the only thing
	// encoding can refuse.
	b, _ := req.Append(make([]byte, 0, req.Len()))
	return b
}

// exchangeInitiator reads and checks the MPA Reply to the Request the
// initiator sent, in siw's order (siw_proc_mpareply): frame validity,
// reject, markers, CRC, revision/E, IRD/ORD.
func (ia *IA) exchangeInitiator(tc *net.TCPConn, cfg driver.QPConfig) (ConnInfo, driver.ConnectResult, error) {
	enhanced := ia.opts.mpaRev == wire.MPARevision2
	var buf [wire.MPAHeaderLen + maxWirePrivateData]byte
	n, err := matchKey(tc, wire.MPAReply, buf[:], 0)
	if err != nil {
		if n == 0 {
			err = refused(err)
		}
		return ConnInfo{}, driver.ConnectResult{}, fmt.Errorf("MPA reply: %w", err)
	}
	rep, err := readReply(tc, &buf, n)
	if err != nil {
		return ConnInfo{}, driver.ConnectResult{}, fmt.Errorf("MPA reply: %w", err)
	}
	h := rep.Header
	switch {
	case h.Flags&wire.MPAFlagReject != 0:
		return ConnInfo{}, driver.ConnectResult{}, fmt.Errorf("MPA reply: %w", &driver.RejectError{PrivateData: clone(rep.PrivateData)})
	case h.Flags&wire.MPAFlagMarkers != 0:
		return ConnInfo{}, driver.ConnectResult{}, errors.New("MPA reply: markers requested, not supported")
	case ia.opts.requireCRC && h.Flags&wire.MPAFlagCRC == 0:
		return ConnInfo{}, driver.ConnectResult{}, errors.New("MPA reply: C not set although CRC is required")
	case int(h.Revision) != ia.opts.mpaRev || h.Enhanced() != enhanced:
		return ConnInfo{}, driver.ConnectResult{}, fmt.Errorf("MPA reply: revision %d enhanced=%v answers revision %d enhanced=%v",
			h.Revision, h.Enhanced(), ia.opts.mpaRev, enhanced)
	}
	info := ConnInfo{
		Initiator: true,
		Revision:  int(h.Revision),
		Enhanced:  enhanced,
		CRC:       h.Flags&wire.MPAFlagCRC != 0,
		IRD:       cfg.IRD,
		ORD:       cfg.ORD,
	}
	if enhanced {
		// We never ask for peer-to-peer mode (siw's default), so an A
		// bit in the Reply is meaningless and ignored, as siw does.
		info.IRD, info.ORD, err = initiatorLimits(cfg.IRD, int(rep.V2.IRD), int(rep.V2.ORD))
		if err != nil {
			return ConnInfo{}, driver.ConnectResult{}, fmt.Errorf("MPA reply: %w", err)
		}
	}
	return info, driver.ConnectResult{PrivateData: clone(rep.PrivateData)}, nil
}

// refused adds syscall.ECONNREFUSED to a reset that came before any byte
// of the MPA Reply: a listener that is full resets new connections before
// the MPA exchange, which is its way of refusing them (the TCP connection
// itself was completed by the kernel, so the dial could not fail).
func refused(err error) error {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w (reset before the MPA Reply: %w)", err, syscall.ECONNREFUSED)
	}
	return err
}

// classify wraps an establishment error so that package dat can tell the
// DAT outcome from it: the caller's context error, ErrAborted, or
// driver.ErrUnreachable where DAT says UNREACHABLE; anything else stays a
// plain error (a non-peer reject).
func classify(ctx, actx context.Context, err error, ctxBound bool, replyTimeout time.Duration) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	if errors.Is(context.Cause(actx), ErrAborted) {
		return fmt.Errorf("%w: %w", err, ErrAborted)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctxBound {
			// The socket deadline was the caller's; the context's timer
			// may fire a moment after the socket's.
			return fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
		}
		return fmt.Errorf("%w: no answer within %v: %w", err, replyTimeout, driver.ErrUnreachable)
	}
	if isUnreachable(err) {
		return fmt.Errorf("%w: %w", err, driver.ErrUnreachable)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w (connection closed by the responder)", err)
	}
	return err
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
