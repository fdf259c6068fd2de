package main

import "github.com/rdmanet/rdmanet/dat"

// listenBacklog is rping's rdma_listen backlog.
const listenBacklog = 3

// listener is the server's listening side: rping's listening control block
// and the part of its CM thread that takes connection requests.
type listener struct {
	*cb
	crEVD *dat.EVD
	psp   *dat.PSP
	// acceptReady is rping's accept_ready semaphore: the CM side takes the
	// next request only after the previous one was handed over (-P). The
	// plain server never hands over, so a second request waits.
	acceptReady chan struct{}
	stop        chan struct{}
	crDone      chan struct{}
}

// runServer is rping_run_server, or rping_run_persistent_server with -P.
func (a *app) runServer() int {
	ia, ret := a.open()
	if ia == nil {
		return ret
	}
	defer ia.Close(dat.CloseAbrupt)
	l := &listener{cb: newCB(a, ia, true), acceptReady: make(chan struct{}, 1), stop: make(chan struct{})}
	l.acceptReady <- struct{}{}
	if ret := l.bind(); ret != 0 {
		return ret
	}
	defer l.close()
	if a.cfg.persistent {
		return l.runPersistent()
	}

	if !l.wait() {
		return -1
	}
	if s := l.getState(); s != stConnectRequest {
		a.eprintf("wait for CONNECT_REQUEST state %d\n", s)
		return -1
	}
	c := newCB(a, ia, true)
	c.cr = l.cr
	c.setState(stConnectRequest)
	return c.serve(false)
}

// bind is rping_bind_server: listen on -a's address (the IA's) and -p.
func (l *listener) bind() int {
	a := l.a
	var err error
	if l.crEVD, err = l.ia.CreateEVD(8, dat.EVDCR|dat.EVDSoftware); err != nil {
		a.eprintf("rdma_create_event_channel: %s\n", strerror(errnoOf(err)))
		return -1
	}
	opts := &dat.PSPOptions{Backlog: listenBacklog}
	if a.cfg.port == 0 {
		// rdma_bind_addr with port 0 picks a free port.
		l.psp, err = l.ia.CreatePSPAny(l.crEVD, dat.PSPConsumer, opts)
	} else {
		l.psp, err = l.ia.CreatePSP(dat.ConnQual(a.cfg.port), l.crEVD, dat.PSPConsumer, opts)
	}
	if err != nil {
		a.eprintf("rdma_bind_addr: %s\n", strerror(errnoOf(err)))
		a.debugf("listen: %v\n", err)
		return -1
	}
	a.debugf("listening on %v\n", l.psp.Addr())
	l.crDone = make(chan struct{})
	go l.crLoop()
	return 0
}

// crLoop takes connection requests (the CONNECT_REQUEST case of rping's
// CM handler).
func (l *listener) crLoop() {
	defer close(l.crDone)
	for {
		ev, _, err := l.crEVD.Wait(dat.TimeoutInfinite, 1)
		if err != nil || ev.Number == dat.SoftwareEvent {
			return
		}
		if ev.Number != dat.ConnectionRequestEvent {
			continue
		}
		select {
		case <-l.acceptReady:
		case <-l.stop:
			return
		case <-l.a.dead:
			return
		}
		l.cr = ev.CR.CR
		l.setState(stConnectRequest)
		l.a.debugf("connection request\n")
		l.post()
	}
}

func (l *listener) close() {
	close(l.stop)
	l.psp.Free()
	l.crEVD.PostSE(nil)
	<-l.crDone
}

// runPersistent serves every request in its own goroutine until the
// process is killed (rping -s -P).
func (l *listener) runPersistent() int {
	for {
		if !l.wait() {
			return -1
		}
		if s := l.getState(); s != stConnectRequest {
			l.a.eprintf("wait for CONNECT_REQUEST state %d\n", s)
			return -1
		}
		c := newCB(l.a, l.ia, true)
		c.cr = l.cr
		c.setState(stConnectRequest)
		l.acceptReady <- struct{}{}
		go c.serve(true)
	}
}

// serve sets up and runs one server connection: rping_run_server after
// the request, or rping_persistent_server_thread.
func (c *cb) serve(persistent bool) int {
	a := c.a
	if ret := c.setupQP(); ret != 0 {
		a.eprintf("setup_qp failed: %d\n", ret)
		c.cr.Reject(nil)
		c.free()
		return ret
	}
	defer c.free()
	c.startCM()
	if ret := c.setupBuffers(); ret != 0 {
		a.eprintf("rping_setup_buffers failed: %d\n", ret)
		c.cr.Reject(nil)
		c.joinGoroutines(0)
		return ret
	}
	if err := c.postRecv(); err != nil {
		a.eprintf("ibv_post_recv failed: %d\n", errnoOf(err))
		c.cr.Reject(nil)
		c.joinGoroutines(0)
		return int(errnoOf(err))
	}
	c.startCQ()
	if ret := c.accept(); ret != 0 {
		a.eprintf("connect error %d\n", ret)
		c.joinGoroutines(0)
		return ret
	}
	ret := c.testServer()
	if ret != 0 && !persistent {
		a.eprintf("rping server failed: %d\n", ret)
	}
	c.disconnect()
	c.joinGoroutines(grace)
	if persistent {
		return 0
	}
	return ret
}

// accept is rping_accept: accept without private data; the EP's
// attributes give IRD/ORD 1/1.
func (c *cb) accept() int {
	if err := c.cr.Accept(c.ep, nil); err != nil {
		c.a.eprintf("rdma_accept: %s\n", strerror(errnoOf(err)))
		c.a.debugf("accept: %v\n", err)
		return -1
	}
	if !c.wait() {
		return -1
	}
	if s := c.getState(); s == stError {
		c.a.eprintf("wait for CONNECTED state %d\n", s)
		return -1
	}
	return 0
}

// testServer is rping_test_server: Read the ping data, go ahead, Write it
// back, go ahead, until the client disconnects.
func (c *cb) testServer() int {
	a := c.a
	ret := 0
	for {
		// Wait for the client's start buffer advert.
		if !c.wait() {
			return -1
		}
		if s := c.getState(); s != stReadAdv {
			a.eprintf("wait for RDMA_READ_ADV state %d\n", s)
			ret = -1
			break
		}
		if ret = c.postRDMA(false, int(c.remote.Size)); ret != 0 {
			break
		}
		a.debugf("RDMA Read posted\n")
		if !c.wait() {
			return -1
		}
		if s := c.getState(); s != stReadComplete {
			a.eprintf("wait for RDMA_READ_COMPLETE state %d\n", s)
			ret = -1
			break
		}
		if a.cfg.verbose > 0 {
			a.printf("server ping data: %s\n", cString(c.rdma.buf))
		}
		// Go ahead: the send buffer is never filled, 16 zero bytes.
		if err := c.postSend(); err != nil {
			a.eprintf("post send error %d\n", errnoOf(err))
			ret = int(errnoOf(err))
			break
		}
		// Wait for the client's sink advert.
		if !c.wait() {
			return -1
		}
		if s := c.getState(); s != stWriteAdv {
			a.eprintf("wait for RDMA_WRITE_ADV state %d\n", s)
			ret = -1
			break
		}
		// Echo the data: strlen + 1 bytes, as rping writes.
		if ret = c.postRDMA(true, min(len(cString(c.rdma.buf))+1, len(c.rdma.buf))); ret != 0 {
			break
		}
		if !c.wait() {
			return -1
		}
		if s := c.getState(); s != stWriteComplete {
			a.eprintf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			ret = -1
			break
		}
		if err := c.postSend(); err != nil {
			a.eprintf("post send error %d\n", errnoOf(err))
			ret = int(errnoOf(err))
			break
		}
	}
	if c.getState() == stDisconnected {
		return 0
	}
	return ret
}

// postRDMA posts the RDMA Read (n bytes from the advertised buffer into
// rdma_buf) or Write (n bytes of rdma_buf to it). verbs would accept a
// Read longer than rdma_buf and fail it in the completion (siw: local
// protection error); DAT refuses it at post time, so it is reported the
// way rping reports the completion.
func (c *cb) postRDMA(write bool, n int) int {
	a := c.a
	if n > len(c.rdma.buf) || n < 0 {
		a.eprintf("cq completion failed status %d\n", wcStatus(dat.DTOErrLocalProtection))
		c.setState(stError)
		c.post()
		return 0
	}
	remote := dat.RMRTriplet{Addr: c.remote.Buf, Length: uint32(n), Context: c.remote.RKey}
	var err error
	if write {
		a.debugf("RDMA Write of %d bytes to %#x, stag %#x\n", n, remote.Addr, remote.Context)
		err = c.ep.PostRDMAWrite(c.rdma.triplet(n), cookieRDMA, remote, dat.CompletionDefault)
	} else {
		err = c.ep.PostRDMARead(c.rdma.triplet(n), cookieRDMA, remote, dat.CompletionDefault)
	}
	if err != nil {
		a.eprintf("post send error %d\n", errnoOf(err))
		a.debugf("post RDMA: %v\n", err)
		return int(errnoOf(err))
	}
	return 0
}
