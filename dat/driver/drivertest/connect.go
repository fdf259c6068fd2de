package drivertest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// testAttr: Attr describes a usable adapter and does not change.
func testAttr(e *env) {
	for _, ia := range []driver.IA{e.passive, e.active} {
		a := ia.Attr()
		require.Equal(e.t, a, ia.Attr(), "Attr changed between two calls")
		require.NotNil(e.t, a.LocalAddr, "Attr.LocalAddr")
		require.Contains(e.t, []driver.Transport{driver.TransportIWARP, driver.TransportIB, driver.TransportRoCE}, a.Transport)
		require.Positive(e.t, a.MaxQPs, "MaxQPs")
		require.Positive(e.t, a.MaxWRPerQP, "MaxWRPerQP")
		require.Positive(e.t, a.MaxSGE, "MaxSGE")
		require.Positive(e.t, a.MaxReadSGE, "MaxReadSGE")
		require.LessOrEqual(e.t, a.MaxReadSGE, a.MaxSGE, "MaxReadSGE")
		require.Positive(e.t, a.MaxMessageSize, "MaxMessageSize")
		require.Positive(e.t, a.MaxRDMASize, "MaxRDMASize")
		require.Positive(e.t, a.MaxPrivateData, "MaxPrivateData")
		require.Positive(e.t, a.MaxMR, "MaxMR")
		require.Positive(e.t, a.MaxMRSize, "MaxMRSize")
		if _, ok := ia.(driver.SRQCreator); ok {
			require.Positive(e.t, a.MaxSRQWR, "MaxSRQWR of an IA with SRQs")
		}
	}
}

// maxPD is the largest private data both IAs allow.
func (e *env) maxPD() int { return min(e.pattr.MaxPrivateData, e.aattr.MaxPrivateData) }

// checkPD compares received private data with what was sent.
func (e *env) checkPD(what string, got, sent []byte) {
	e.t.Helper()
	if e.cfg.PaddedPrivateData && len(got) >= len(sent) && bytes.Equal(got[:len(sent)], sent) &&
		bytes.Count(got[len(sent):], []byte{0}) == len(got)-len(sent) {
		return
	}
	if !bytes.Equal(got, sent) {
		e.t.Fatalf("%s private data: got %d bytes %x, sent %d bytes %x", what, len(got), got, len(sent), sent)
	}
}

// testPrivateData: private data of every size up to MaxPrivateData goes
// both ways, and the accepting side gets none back.
func testPrivateData(e *env) {
	for _, n := range []int{e.maxPD(), 1, 0} {
		a, p := e.newEndpoint(false, epOpts{}), e.newEndpoint(true, epOpts{})
		apd, ppd := pattern(n, 3), pattern(n, 99)
		c := e.connectWith(a, p, apd, ppd)
		e.checkPD("request", c.info.PrivateData, apd)
		e.checkPD("accept", c.ares.PrivateData, ppd)
		require.Empty(e.t, c.pres.PrivateData, "the accepting side's ConnectResult carries private data")
		a.disconnect(false)
		p.awaitDisconnect()
	}
}

// testAddresses: both ConnectResults and the RequestInfo name the same
// connection, and the active side reached the address it connected to.
func testAddresses(e *env) {
	c := e.pair()
	for what, a := range map[string]net.Addr{"active Local": c.ares.Local, "active Remote": c.ares.Remote,
		"passive Local": c.pres.Local, "passive Remote": c.pres.Remote, "request Local": c.info.Local, "request Remote": c.info.Remote} {
		require.NotNil(e.t, a, "%s address", what)
	}
	require.Equal(e.t, c.addr.String(), c.ares.Remote.String(), "active Remote vs the address connected to")
	require.Equal(e.t, c.ares.Local.String(), c.pres.Remote.String(), "active Local vs passive Remote")
	require.Equal(e.t, c.ares.Remote.String(), c.pres.Local.String(), "active Remote vs passive Local")
	require.Equal(e.t, c.ares.Local.String(), c.info.Remote.String(), "request Remote vs active Local")
	require.Equal(e.t, c.pres.Local.String(), c.info.Local.String(), "request Local vs passive Local")
}

// testRequestDepths: RequestInfo carries the requester's IRD and ORD.
func testRequestDepths(e *env) {
	ird, ord := min(3, e.aattr.MaxIRD), min(2, e.aattr.MaxORD)
	a := e.newEndpoint(false, epOpts{modify: func(c *driver.QPConfig) { c.IRD, c.ORD = ird, ord }})
	p := e.newEndpoint(true, epOpts{})
	c := e.connectWith(a, p, nil, nil)
	require.Equal(e.t, ird, c.info.IRD, "RequestInfo.IRD")
	require.Equal(e.t, ord, c.info.ORD, "RequestInfo.ORD")
}

// testReject: a reject's private data reaches the requester in a
// *driver.RejectError.
func testReject(e *env) {
	for _, n := range []int{e.maxPD(), 0} {
		a := e.newEndpoint(false, epOpts{})
		l := e.listen(driver.ListenConfig{})
		pdata := pattern(n, 42)
		done := e.serveOne(l, nil, pdata, true)
		_, err := a.qp.Connect(e.ctx(), e.connectAddr(l), nil)
		var rej *driver.RejectError
		require.ErrorAs(e.t, err, &rej, "Connect to a rejecting peer")
		e.checkPD("reject", rej.PrivateData, pdata)
		select {
		case r := <-done:
			require.NoError(e.t, r.err, "Reject")
		case <-time.After(e.timeout):
			e.t.Fatal("Reject did not return")
		}
		require.Zero(e.t, a.disc.n.Load(), "OnDisconnect called for a rejected attempt")
	}
}

// testNoListener: connecting to a port nobody listens on fails, and not
// as a peer reject nor by running into the deadline.
func testNoListener(e *env) {
	addr := e.unusedAddr()
	a := e.newEndpoint(false, epOpts{})
	_, err := a.qp.Connect(e.ctx(), addr, nil)
	require.Error(e.t, err, "Connect to %v with nobody listening", addr)
	var rej *driver.RejectError
	require.False(e.t, errors.As(err, &rej), "no listener reported as a peer reject: %v", err)
	require.NotErrorIs(e.t, err, context.DeadlineExceeded, "Connect to a closed port hung until the deadline")
}

// testConnectDeadline: an expired ctx deadline on Connect is reported as
// context.DeadlineExceeded (the listener never accepts).
func testConnectDeadline(e *env) {
	l := e.listen(driver.ListenConfig{})
	a := e.newEndpoint(false, epOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.quiet)
	defer cancel()
	err := e.bounded("Connect with a deadline", func() error {
		_, err := a.qp.Connect(ctx, e.connectAddr(l), nil)
		return err
	})
	require.ErrorIs(e.t, err, context.DeadlineExceeded)
}

// testConnectOnce: a QP that has connected does not connect again.
func testConnectOnce(e *env) {
	c := e.pair()
	l := e.listen(driver.ListenConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.quiet)
	defer cancel()
	_, err := c.a.qp.Connect(ctx, e.connectAddr(l), nil)
	require.Error(e.t, err, "second Connect of a connected QP")
	c.a.disconnect(false)
	_, err = c.a.qp.Connect(ctx, e.connectAddr(l), nil)
	require.Error(e.t, err, "Connect of a QP whose connection ended")
}

// testModify: Modify before the connection keeps the posted receives,
// the CQs and the Tag of CreateQP, and is refused once connected.
func testModify(e *env) {
	a, p := e.newEndpoint(false, epOpts{}), e.newEndpoint(true, epOpts{})
	rid := p.postRecv(p.ctl.sge(0, 64))
	cfg := p.cfg
	cfg.MaxSendWR, cfg.MaxRecvWR = cfg.MaxSendWR/2, cfg.MaxRecvWR/2
	// CreateQP's CQs, Tag and callbacks stay: what Modify passes for them
	// must not matter.
	cfg.Tag, cfg.SendCQ, cfg.RecvCQ, cfg.OnDisconnect = p.tag+1000, nil, nil, nil
	require.NoError(e.t, p.qp.Modify(cfg), "Modify of an unconnected QP")
	e.connectWith(a, p, nil, nil)
	a.ctl.fill(0, 10, 5)
	sid := a.send(a.ctl.sge(0, 10))
	a.scq.awaitOK(sid, 10)
	p.rcq.awaitOK(rid, 10)
	require.Error(e.t, p.qp.Modify(cfg), "Modify of a connected QP")
	a.disconnect(true)
	p.awaitDisconnect()
}

// testPortInUse: a second listener on a taken port fails with
// ErrPortInUse.
func testPortInUse(e *env) {
	l := e.listen(driver.ListenConfig{})
	port := portOf(e.t, l.Addr())
	l2, err := e.passive.Listen(driver.ListenConfig{Port: port})
	if err == nil {
		l2.Close()
	}
	require.ErrorIs(e.t, err, driver.ErrPortInUse, "Listen on taken port %d", port)
}

// testListenerCloseUnblocks: Close ends an Accept in progress, and later
// Accepts, with net.ErrClosed.
func testListenerCloseUnblocks(e *env) {
	l := e.listen(driver.ListenConfig{})
	ch := make(chan error, 1)
	go func() {
		_, err := l.Accept(context.Background())
		ch <- err
	}()
	e.sleepQuiet()
	require.NoError(e.t, e.bounded("listener Close", l.closeNow))
	select {
	case err := <-ch:
		require.ErrorIs(e.t, err, net.ErrClosed, "Accept ended by Close")
	case <-time.After(e.timeout):
		e.t.Fatal("Close did not unblock Accept")
	}
	err := e.bounded("Accept after Close", func() error {
		_, err := l.Accept(context.Background())
		return err
	})
	require.ErrorIs(e.t, err, net.ErrClosed, "Accept after Close")
}

// testListenerCloseAborts: requests not yet accepted are refused as
// non-peer rejects when the listener closes.
func testListenerCloseAborts(e *env) {
	l := e.listen(driver.ListenConfig{})
	a := e.newEndpoint(false, epOpts{})
	ch := make(chan error, 1)
	ctx := e.ctx()
	go func() {
		_, err := a.qp.Connect(ctx, e.connectAddr(l), nil)
		ch <- err
	}()
	e.sleepQuiet() // let the request arrive and wait in the listener
	require.NoError(e.t, e.bounded("listener Close", l.closeNow))
	select {
	case err := <-ch:
		require.Error(e.t, err, "Connect to a listener closed before accepting")
		var rej *driver.RejectError
		require.False(e.t, errors.As(err, &rej), "a listener's Close reported as a peer reject: %v", err)
		require.NotErrorIs(e.t, err, context.DeadlineExceeded, "the pending request was left to time out")
	case <-time.After(e.timeout):
		e.t.Fatal("Connect still pending after the listener closed")
	}
}

// testAcceptContext: Accept returns when its ctx ends, and the listener
// keeps working.
func testAcceptContext(e *env) {
	l := e.listen(driver.ListenConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), e.quiet)
	defer cancel()
	err := e.bounded("Accept with an expiring ctx", func() error {
		_, err := l.Accept(ctx)
		return err
	})
	require.Error(e.t, err, "Accept after its ctx expired")
	require.NotErrorIs(e.t, err, net.ErrClosed, "an expired Accept reported the listener closed")

	a, p := e.newEndpoint(false, epOpts{}), e.newEndpoint(true, epOpts{})
	done := e.serveOne(l, p.qp, nil, false)
	_, err = a.qp.Connect(e.ctx(), e.connectAddr(l), nil)
	require.NoError(e.t, err, "Connect after an Accept timed out")
	require.NoError(e.t, (<-done).err)
}

// testListenerCloseKeepsConn: closing the listener leaves connections it
// accepted alone (connect closes it before the hello); data flows both
// ways.
func testListenerCloseKeepsConn(e *env) {
	c := e.pair()
	rid := c.a.postRecv(c.a.ctl.sge(0, 64))
	c.p.ctl.fill(2048, 20, 8)
	sid := c.p.send(c.p.ctl.sge(2048, 20))
	c.p.scq.awaitOK(sid, 20)
	c.a.rcq.awaitOK(rid, 20)
}
