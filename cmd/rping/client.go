package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// grace bounds the wait for the flush and the DISCONNECTED event after a
// disconnect; rping itself waits for ever.
const grace = 5 * time.Second

// runClient is rping_run_client. With --latency or --bandwidth, a run
// that completes fewer iterations than -C asks fails (see checkRun).
func (a *app) runClient() int {
	ret, why := a.client()
	if !a.extras() {
		return ret
	}
	return a.checkRun(ret, why)
}

// client runs the client and returns rping's status and, if the ping loop
// did not run to its end, why not.
func (a *app) client() (int, string) {
	ia, ret := a.open()
	if ia == nil {
		return ret, "the RDMA device could not be opened"
	}
	defer ia.Close(dat.CloseAbrupt)
	c := newCB(a, ia, false)
	// rdma_resolve_addr and rdma_resolve_route: DAT resolves while it
	// connects, so the client is at once where rping is after them.
	c.setState(stRouteResolved)

	if ret := c.setupQP(); ret != 0 {
		a.eprintf("setup_qp failed: %d\n", ret)
		return ret, "setting up the endpoint failed"
	}
	defer c.free()
	c.startCM()
	if ret := c.setupBuffers(); ret != 0 {
		a.eprintf("rping_setup_buffers failed: %d\n", ret)
		return ret, "registering the buffers failed"
	}
	if err := c.postRecv(); err != nil {
		a.eprintf("ibv_post_recv failed: %d\n", errnoOf(err))
		return int(errnoOf(err)), "posting the first Receive failed: " + strerror(errnoOf(err))
	}
	c.startCQ()
	join := grace
	defer func() { c.joinGoroutines(join) }()

	if ret := c.connect(); ret != 0 {
		a.eprintf("connect error %d\n", ret)
		join = 0 // nothing will flush or disconnect
		return ret, "could not connect to the server"
	}
	ret, why := c.testClient()
	if ret != 0 {
		a.eprintf("rping client failed: %d\n", ret)
	}
	c.disconnect()
	a.printSummary()
	return ret, why
}

// open opens the IA, or prints why not and returns rping's status.
func (a *app) open() (*dat.IA, int) {
	ia, err := openIA(&a.cfg)
	if err == nil {
		return ia, 0
	}
	if errors.Is(err, dat.ErrInvalidAddress) {
		// The address is not local: rdma_bind_addr (server) or
		// rdma_resolve_addr with the -I source (client) fails.
		call := "rdma_resolve_addr"
		if a.cfg.server == 1 {
			call = "rdma_bind_addr"
		}
		a.eprintf("%s: %s\n", call, strerror(errnoOf(err)))
		if a.cfg.diagnose {
			a.eprintf("rping: diagnosis: unreachable: the local address is not usable: %s\n", short(err))
		}
		return nil, -1
	}
	f := noDevice(iaName(&a.cfg), err)
	for _, l := range f.lines {
		a.eprintf("%s\n", l)
	}
	if a.cfg.diagnose || a.cfg.provider != defaultProvider {
		a.eprintf("%s\n", f.diagnosisLine())
	}
	return nil, 19 // ENODEV
}

// connect is rping_connect_client: no private data, IRD/ORD 1/1 (the EP
// attributes), no timeout beyond the provider's own.
func (c *cb) connect() int {
	cfg := &c.a.cfg
	err := c.ep.Connect(cfg.addr, dat.ConnQual(cfg.port), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault)
	if err != nil {
		c.a.eprintf("rdma_connect: %s\n", strerror(errnoOf(err)))
		c.a.debugf("connect: %v\n", err)
		return -1
	}
	if !c.wait() {
		return -1
	}
	if s := c.getState(); s != stConnected {
		c.a.eprintf("wait for CONNECTED state %d\n", s)
		return -1
	}
	c.a.debugf("connected to %v port %d\n", cfg.addr, cfg.port)
	return 0
}

// testClient is rping_test_client: the ping loop. Besides rping's status
// it returns why the loop stopped before its -C iterations (for
// --latency/--bandwidth).
func (c *cb) testClient() (int, string) {
	a, cfg := c.a, &c.a.cfg
	ret, why := 0, ""
	for ping := 0; cfg.count == 0 || ping < cfg.count; ping++ {
		c.setState(stReadAdv)
		t0 := time.Now()
		fillPattern(c.start.buf, ping)
		c.formatSend(c.start)
		if err := c.postSend(); err != nil {
			a.eprintf("post send error %d\n", errnoOf(err))
			a.debugf("post send: %v\n", err)
			ret, why = int(errnoOf(err)), "posting a Send failed: "+strerror(errnoOf(err))
			break
		}
		// Wait for the server's go-ahead after its RDMA Read.
		if !c.wait() {
			return -1, c.stopCause("rping is exiting")
		}
		if s := c.getState(); s != stWriteAdv {
			a.eprintf("wait for RDMA_WRITE_ADV state %d\n", s)
			ret, why = -1, fmt.Sprintf("unexpected state %d while waiting for the go-ahead after the RDMA Read", s)
			break
		}
		c.formatSend(c.rdma)
		if err := c.postSend(); err != nil {
			a.eprintf("post send error %d\n", errnoOf(err))
			a.debugf("post send: %v\n", err)
			ret, why = int(errnoOf(err)), "posting a Send failed: "+strerror(errnoOf(err))
			break
		}
		// Wait for the go-ahead after the server's RDMA Write.
		if !c.wait() {
			return -1, c.stopCause("rping is exiting")
		}
		if s := c.getState(); s != stWriteComplete {
			a.eprintf("wait for RDMA_WRITE_COMPLETE state %d\n", s)
			ret, why = -1, fmt.Sprintf("unexpected state %d while waiting for the go-ahead after the RDMA Write", s)
			break
		}
		rtt := time.Since(t0)
		if cfg.validate > 0 && !bytes.Equal(c.start.buf, c.rdma.buf) {
			a.eprintf("data mismatch!\n")
			ret, why = -1, fmt.Sprintf("data mismatch in iteration %d (-V)", ping)
			break
		}
		// Only a validated iteration counts as completed.
		a.st.add(rtt, 2*cfg.size)
		if cfg.verbose > 0 {
			a.printf("ping data: %s\n", cString(c.rdma.buf))
		}
	}
	why = c.stopCause(why)
	if c.getState() == stDisconnected {
		return 0, why
	}
	return ret, why
}
