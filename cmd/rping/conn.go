package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// testState is rping's enum test_state; the numbers appear in its "wait
// for ... state %d" messages.
type testState int32

const (
	stIdle testState = iota + 1
	stConnectRequest
	stAddrResolved
	stRouteResolved
	stConnected
	stReadAdv
	stReadComplete
	stWriteAdv
	stWriteComplete
	stDisconnected
	stError
)

// Cookies of the work requests, for -d output.
const (
	cookieRecv = iota + 1
	cookieSend
	cookieRDMA
)

// region is one registered buffer.
type region struct {
	buf  []byte
	lmr  *dat.LMR
	addr uint64 // registered address: what DTOs and adverts use
	lkey uint32 // lmr_context
	rkey uint32 // rmr_context (STag)
}

func (r region) triplet(n int) []dat.LMRTriplet {
	return []dat.LMRTriplet{{Addr: r.addr, Length: uint32(n), Context: r.lkey}}
}

// cb is rping's control block: one connection and its resources. The CQ
// goroutine (rping's cq_thread) and the CM goroutine (its cm_thread) move
// the state and wake the main goroutine through sem, a counting semaphore.
type cb struct {
	a      *app
	server bool
	ia     *dat.IA
	state  atomic.Int32
	sem    chan struct{}

	pz        *dat.PZ
	dto, conn *dat.EVD
	ep        *dat.EP
	recv      region // 16-byte receive buffer
	send      region // 16-byte send buffer
	rdma      region // server: Read sink and Write source; client: Write sink
	start     region // client: Read source

	// remote is the last advert received (set by the CQ goroutine before
	// it posts sem).
	remote rdmaInfo

	cr *dat.CR // server: the request this connection answers

	// causeMu guards cause: the first reason the CQ or CM goroutine found
	// for the connection to stop (for the --latency/--bandwidth report).
	causeMu sync.Mutex
	cause   string

	cqDone, cmDone chan struct{}
}

func newCB(a *app, ia *dat.IA, server bool) *cb {
	c := &cb{a: a, ia: ia, server: server, sem: make(chan struct{}, 64)}
	c.state.Store(int32(stIdle))
	return c
}

func (c *cb) getState() testState  { return testState(c.state.Load()) }
func (c *cb) setState(s testState) { c.state.Store(int32(s)) }

// setCause records why the connection stops, unless a reason is known
// already: the first one is the root, what follows is its consequence.
func (c *cb) setCause(why string) {
	c.causeMu.Lock()
	defer c.causeMu.Unlock()
	if c.cause == "" {
		c.cause = why
	}
}

// stopCause is why the ping loop stopped: the CQ or CM goroutine's reason
// if the connection failed or ended (the main goroutine then only saw the
// consequence), else local.
func (c *cb) stopCause(local string) string {
	if s := c.getState(); s != stDisconnected && s != stError {
		return local
	}
	c.causeMu.Lock()
	defer c.causeMu.Unlock()
	if c.cause != "" {
		return c.cause
	}
	return local
}

// post is sem_post.
func (c *cb) post() {
	select {
	case c.sem <- struct{}{}:
	default: // 64 pending wake-ups: the waiter is far behind anyway
	}
}

// wait is sem_wait. It reports false if the program is exiting (only in
// in-process runs; the binary is gone by then).
func (c *cb) wait() bool {
	select {
	case <-c.sem:
		return true
	case <-c.a.dead:
		return false
	}
}

// setupQP creates the connection's PZ, EVDs (one for the DTO completions
// of both queues, rping's single CQ, and one for connection events) and
// EP. It returns 0 or an errno, having printed rping's message.
func (c *cb) setupQP() int {
	var err error
	if c.pz, err = c.ia.CreatePZ(); err != nil {
		c.a.eprintf("ibv_alloc_pd failed\n")
		return int(errnoOf(err))
	}
	if c.dto, err = c.ia.CreateEVD(cqDepth, dat.EVDDTO|dat.EVDSoftware); err != nil {
		c.a.eprintf("ibv_create_cq failed\n")
		return int(errnoOf(err))
	}
	if c.conn, err = c.ia.CreateEVD(8, dat.EVDConnection|dat.EVDSoftware); err != nil {
		c.a.eprintf("ibv_create_cq failed\n")
		return int(errnoOf(err))
	}
	attr, err := epAttr(c.ia)
	if err == nil {
		c.ep, err = c.ia.CreateEP(c.pz, c.dto, c.dto, c.conn, &attr)
	}
	if err != nil {
		c.a.eprintf("rdma_create_qp: %s\n", strerror(errnoOf(err)))
		c.a.debugf("create EP: %v\n", err)
		return -1
	}
	c.a.debugf("created pz, EVDs and EP %p\n", c.ep)
	return 0
}

// setupBuffers registers rping's buffers. It returns 0 or an errno.
func (c *cb) setupBuffers() int {
	size := c.a.cfg.size
	reg := func(r *region, n int, priv dat.MemPriv, what string) int {
		if n <= 0 {
			c.a.eprintf("%s malloc failed\n", what)
			return -int(12) // -ENOMEM
		}
		r.buf = make([]byte, n)
		l, err := c.ia.CreateLMR(c.pz, r.buf, priv)
		if err == nil {
			var p dat.LMRParam
			if p, err = l.Query(); err == nil {
				r.lmr, r.addr, r.lkey, r.rkey = l, p.Addr, p.Context, p.RMRContext
			}
		}
		if err != nil {
			c.a.eprintf("%s reg_mr failed\n", what)
			c.a.debugf("register %s: %v\n", what, err)
			return int(errnoOf(err))
		}
		return 0
	}
	remote := dat.MemPrivLocalRead | dat.MemPrivLocalWrite | dat.MemPrivRemoteRead | dat.MemPrivRemoteWrite
	if ret := reg(&c.recv, infoLen, dat.MemPrivLocalWrite, "recv_buf"); ret != 0 {
		return ret
	}
	if ret := reg(&c.send, infoLen, dat.MemPrivLocalRead, "send_buf"); ret != 0 {
		return ret
	}
	if ret := reg(&c.rdma, size, remote, "rdma_buf"); ret != 0 {
		return ret
	}
	if !c.server {
		if ret := reg(&c.start, size, remote, "start_buf"); ret != 0 {
			return ret
		}
	}
	c.a.debugf("registered buffers: recv %#x, send %#x, rdma %#x/%#x, start %#x/%#x\n",
		c.recv.addr, c.send.addr, c.rdma.addr, c.rdma.rkey, c.start.addr, c.start.rkey)
	return 0
}

// postRecv posts the one receive.
func (c *cb) postRecv() error {
	return c.ep.PostRecv(c.recv.triplet(infoLen), cookieRecv, dat.CompletionDefault)
}

// postSend sends the 16-byte send buffer.
func (c *cb) postSend() error {
	return c.ep.PostSend(c.send.triplet(infoLen), cookieSend, dat.CompletionDefault)
}

// formatSend fills the send buffer with an advert of r (rping_format_send).
func (c *cb) formatSend(r region) {
	m := rdmaInfo{Buf: r.addr, RKey: r.rkey, Size: uint32(c.a.cfg.size)}
	appendInfo(c.send.buf[:0], m)
	c.a.debugf("advertising buffer at %#x, stag %#x, %d bytes\n", m.Buf, m.RKey, m.Size)
}

// startCQ starts the CQ goroutine.
func (c *cb) startCQ() {
	c.cqDone = make(chan struct{})
	go c.cqLoop()
}

// cqLoop is rping's cq_thread: it handles completions until one is
// flushed (the connection is gone) or fails, or the EVD goes away.
func (c *cb) cqLoop() {
	defer close(c.cqDone)
	for {
		ev, _, err := c.dto.Wait(dat.TimeoutInfinite, 1)
		if err != nil || ev.Number == dat.SoftwareEvent {
			return
		}
		if ev.Number == dat.DTOCompletionEvent && c.completion(ev.DTO) {
			return
		}
	}
}

// completion handles one DTO completion (rping_cq_event_handler). It
// reports whether the CQ goroutine stops.
func (c *cb) completion(d dat.DTOCompletion) (stop bool) {
	if d.Status != dat.DTOSuccess {
		if d.Status == dat.DTOErrFlushed {
			return true
		}
		c.a.eprintf("cq completion failed status %d\n", wcStatus(d.Status))
		c.setCause(fmt.Sprintf("%s failed (work completion status %d)", opName(d.Op), wcStatus(d.Status)))
		c.setState(stError)
		c.post()
		return true
	}
	switch d.Op {
	case dat.DTOSend:
		c.a.debugf("send completed\n")
	case dat.DTORDMAWrite:
		c.a.debugf("RDMA Write completed\n")
		c.setState(stWriteComplete)
		c.post()
	case dat.DTORDMARead:
		c.a.debugf("RDMA Read completed\n")
		c.setState(stReadComplete)
		c.post()
	case dat.DTOReceive:
		c.a.debugf("receive completed, %d bytes\n", d.Length)
		if d.Length != infoLen {
			c.a.eprintf("Received bogus data, size %d\n", d.Length)
			c.a.eprintf("recv wc error: %d\n", -1)
			c.setCause(fmt.Sprintf("received a %d-byte message, not a %d-byte buffer descriptor", d.Length, infoLen))
			c.setState(stError)
			c.post()
			return true
		}
		if c.server {
			c.serverRecv()
		} else {
			c.clientRecv()
		}
		if err := c.postRecv(); err != nil {
			c.a.eprintf("post recv error: %d\n", errnoOf(err))
			c.setCause("reposting the Receive failed: " + strerror(errnoOf(err)))
			c.setState(stError)
			c.post()
			return true
		}
		c.post()
	}
	return false
}

// serverRecv takes an advert: the first after a ping is the Read source,
// the next the Write sink.
func (c *cb) serverRecv() {
	m, _ := parseInfo(c.recv.buf)
	c.remote = m
	c.a.debugf("peer advertised %#x, stag %#x, %d bytes\n", m.Buf, m.RKey, m.Size)
	if s := c.getState(); s <= stConnected || s == stWriteComplete {
		c.setState(stReadAdv)
	} else {
		c.setState(stWriteAdv)
	}
}

// clientRecv takes a go-ahead: the first after the Read, the second after
// the Write.
func (c *cb) clientRecv() {
	if c.getState() == stReadAdv {
		c.setState(stWriteAdv)
	} else {
		c.setState(stWriteComplete)
	}
}

// startCM starts the CM goroutine for the connection.
func (c *cb) startCM() {
	c.cmDone = make(chan struct{})
	go c.cmLoop()
}

// cmLoop is rping's CM event handler for one connection.
func (c *cb) cmLoop() {
	defer close(c.cmDone)
	for {
		ev, _, err := c.conn.Wait(dat.TimeoutInfinite, 1)
		if err != nil || ev.Number == dat.SoftwareEvent {
			return
		}
		switch ev.Number {
		case dat.ConnectionEventEstablished:
			c.a.debugf("connection established\n")
			// The server wakes up when the first Recv completes.
			if !c.server {
				c.setState(stConnected)
			}
			c.post()
		case dat.ConnectionEventDisconnected, dat.ConnectionEventBroken:
			// rdma_cm reports a broken iWARP connection as DISCONNECTED too.
			who, peer := "client", "server"
			if c.server {
				who, peer = "server", "client"
			}
			c.a.eprintf("%s DISCONNECT EVENT...\n", who)
			if ev.Conn.Err != nil {
				c.a.debugf("connection ended: %v\n", ev.Conn.Err)
			}
			if ev.Number == dat.ConnectionEventBroken {
				c.setCause("the connection to the " + peer + " broke (" + short(ev.Conn.Err) + ")")
			} else {
				c.setCause("the " + peer + " closed the connection")
			}
			c.setState(stDisconnected)
			c.post()
			return
		default:
			f := connectFailure(ev, transportIWARP(c.ia), c.a.cfg.addr, c.a.cfg.port)
			c.fail(f, ev.Conn.Err)
			return
		}
	}
}

// fail reports a failed connection like rping (its CM thread's exit(-1)).
func (c *cb) fail(f failure, err error) {
	for _, l := range f.lines {
		c.a.eprintf("%s\n", l)
	}
	if c.a.cfg.diagnose {
		c.a.eprintf("%s\n", f.diagnosisLine())
	}
	if err != nil {
		c.a.debugf("connection event error: %v\n", err)
	}
	if !c.server && c.a.extras() {
		// exit ends the process before runClient could say it.
		c.a.reportShort("the connection failed (" + f.category + ")")
	}
	c.setState(stError)
	// Exit first: rping's CM thread ends the process before its main
	// thread, waiting for the CONNECTED state, can print anything more.
	// (Posting first let the main goroutine print "wait for CONNECTED
	// state" before os.Exit, now and then.) In an in-process run exit
	// closes a.dead, which wakes the main goroutine as well.
	c.a.exit(-1)
	c.post()
}

// disconnect is rping_disconnect: a graceful dat_ep_disconnect.
func (c *cb) disconnect() {
	if c.ep != nil {
		c.ep.Disconnect(dat.CloseGraceful)
	}
}

// joinGoroutines waits for the CQ and CM goroutines: for the flush of the
// outstanding receive and for the DISCONNECTED event, as rping waits for
// its CQ thread and lets its CM thread print. A goroutine still waiting
// after the grace period is woken with a software event.
func (c *cb) joinGoroutines(grace time.Duration) {
	for _, g := range []struct {
		done chan struct{}
		evd  *dat.EVD
	}{{c.cmDone, c.conn}, {c.cqDone, c.dto}} {
		if g.done == nil {
			continue
		}
		select {
		case <-g.done:
		case <-time.After(grace):
			g.evd.PostSE(nil)
			<-g.done
		case <-c.a.dead:
			return
		}
	}
}

// free releases the connection's objects (the IA stays).
func (c *cb) free() {
	if c.ep != nil {
		c.ep.Disconnect(dat.CloseAbrupt)
		c.ep.Free()
	}
	for _, r := range []*region{&c.recv, &c.send, &c.rdma, &c.start} {
		if r.lmr != nil {
			r.lmr.Free()
		}
	}
	for _, e := range []*dat.EVD{c.dto, c.conn} {
		if e != nil {
			e.Free()
		}
	}
	if c.pz != nil {
		c.pz.Free()
	}
}

// wcStatus maps a DAT completion status to the ibv_wc_status number rping
// prints in "cq completion failed status %d" (DAPL's mapping, reversed).
func wcStatus(s dat.DTOStatus) int {
	switch s {
	case dat.DTOErrLocalLength:
		return 1 // IBV_WC_LOC_LEN_ERR
	case dat.DTOErrLocalEP:
		return 2 // IBV_WC_LOC_QP_OP_ERR
	case dat.DTOErrLocalProtection:
		return 4 // IBV_WC_LOC_PROT_ERR
	case dat.DTOErrFlushed:
		return 5 // IBV_WC_WR_FLUSH_ERR
	case dat.RMROperationFailed:
		return 6 // IBV_WC_MW_BIND_ERR
	case dat.DTOErrBadResponse:
		return 7 // IBV_WC_BAD_RESP_ERR
	case dat.DTOErrRemoteAccess:
		return 10 // IBV_WC_REM_ACCESS_ERR
	case dat.DTOErrRemoteResponder:
		return 11 // IBV_WC_REM_OP_ERR
	case dat.DTOErrTransport:
		return 12 // IBV_WC_RETRY_EXC_ERR
	case dat.DTOErrReceiverNotReady:
		return 13 // IBV_WC_RNR_RETRY_EXC_ERR
	}
	return 21 // IBV_WC_GENERAL_ERR
}

// opName names a DTO for the --latency/--bandwidth failure line.
func opName(op dat.DTOOp) string {
	switch op {
	case dat.DTOSend:
		return "a Send"
	case dat.DTORDMAWrite:
		return "an RDMA Write"
	case dat.DTORDMARead:
		return "an RDMA Read"
	case dat.DTOReceive:
		return "a Receive"
	}
	return fmt.Sprintf("a DTO (operation %d)", op)
}

// String names a state for -d output.
func (s testState) String() string { return fmt.Sprintf("state %d", int32(s)) }
