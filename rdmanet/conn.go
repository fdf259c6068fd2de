package rdmanet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/internal/ring"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// Conn is an rdmanet connection: a net.Conn over one DAT endpoint. It is
// safe for concurrent use; concurrent Reads (and concurrent Writes) are
// serialised, as with TCP.
//
// Each side owns a receive ring that the peer fills with RDMA Writes, and a
// staging buffer Writes copy into; small control Sends carry positions,
// credit and FIN. See the package documentation for the protocol.
type Conn struct {
	id   uint64    // process-wide number, for listings and logs
	born time.Time // when the Conn was made
	// setupTook is how long a dial took to set the Conn up, for how long
	// closing it lets its spares' dials finish (spareGraceFor).
	setupTook time.Duration
	log       *slog.Logger
	ia        *sharedIA
	cfg       connConfig
	ep        *dat.EP
	evd       *dat.EVD
	ctrl      *region // control send slots, and receive slots without arena (in mem)
	// arena is the IA's shared receive queue our control receives come
	// from (ctrlpool.go); nil: they are our own, posted on our EP.
	// arenaHeld: our reservation in it is not given back yet.
	arena     *ctrlArena
	arenaHeld bool
	mem       *connMemory
	// recv is our receive ring, which the peer RDMA-writes; stage is our
	// staging buffer, the source of our RDMA Writes; dst is where in the
	// peer's ring we write. Their memory can change while the stream
	// goes on (see resize.go): recv and dst under mu, stage only by the
	// writer (writeMu).
	recv, stage  spans
	dst          peerRing
	peer         handshake.Hello
	helloFlags   uint8 // the capabilities our Hello announced
	laddr, raddr *Addr

	// recvIOV is the triplet of the control receive being posted: only
	// newConn and the poller (pollMu) post receives.
	recvIOV [1]dat.LMRTriplet
	ctrlIOV [1]dat.LMRTriplet
	// wrIOV holds the segments of a chunk's two RDMA Writes, and sends
	// the requests of one PostSendList (sendlist.go); guarded by postMu.
	wrIOV [4]dat.LMRTriplet
	sends sendList

	// dialer is set on dialed connections: the dial's own copy of its
	// Dialer, which Dup dials with; dialKey is the remote address this
	// Conn may be the IA's dup template for. listener is set on accepted
	// ones until Accept returns.
	dialer   *Dialer
	dialKey  string
	listener *Listener
	// sparesOff is set when the Conn closes or a spare dialed from it
	// failed: no spare is dialed from it any more (spare.go). Guarded by
	// ia.mu.
	sparesOff bool
	// spareGate holds back the dials of the spares this Conn's dial
	// asked for, until its first exchange (spare.go); nil once opened.
	spareGate atomic.Pointer[spareGate]

	readMu  sync.Mutex // serialises Reads
	writeMu sync.Mutex // serialises Writes
	// postMu orders send-side posts, so that sequence numbers (cookies)
	// are in post order and a control message only reports Writes
	// posted before it. Taken after readMu/writeMu, before mu.
	postMu sync.Mutex
	mu     sync.Mutex

	rwake, wwake, cwake chan struct{} // cap 1: wake a Read, a Write, Close
	done                chan struct{} // closed by Close
	rdl, wdl            deadline

	// pollMu is held by the goroutine driving the Conn (see progress).
	pollMu sync.Mutex
	pr     progress
	// quiet counts the waiters whose wait is a stream's (see progress.go,
	// "Streams do not spin"), plus one once the Conn is closing
	// (teardown); quietSet, under pollMu, records that the EVD's policy
	// is set to sleep at once for them.
	quiet    atomic.Int32
	quietSet bool
	setup    chan error // handshake outcome, cap 1

	// Guarded by mu.
	lc lifecycle
	// Receive direction: the peer's producer position in our ring, our
	// consumer position, and the consumer position we last reported.
	rProd, rCons, rReported uint64
	rFIN                    bool // the peer will write no more
	// Send direction: our producer position in the peer's ring, the
	// peer's reported consumer position, what we last announced.
	sProd, sPeerCons, sProdSent uint64
	// Staging positions; stCons advances as Writes complete.
	stProd, stCons uint64
	// Send-side work requests: posted and completed counts. Cookie =
	// sequence number; stageEnd[seq mod S] is stProd when it was posted.
	posted, completed uint64
	// signaled is posted as of the last request that asks for a
	// completion (see signalDueLocked).
	signaled        uint64
	stageEnd        []uint64
	cc              credits
	ctrlOut, ctrlIn uint32
	firstDue        bool // dialer: send a first message (the iWARP initiator speaks first)
	finWanted       bool
	finSent         bool
	readShut        bool
	writeShut       bool
	err             error // the transport is gone (or Close came first): why
	driving         bool  // a drive goroutine is out (see driveLocked)
	// Ring resizing (resize.go). As the reader: offering while a new
	// ring is being registered, offer once registered (offerUnsent
	// until a control message carried it). As the writer: the peer's
	// offer not yet adopted, and the switch position not yet announced.
	offering, offerUnsent bool
	offer                 *region
	peerOffer             wire.Offer
	hasOffer              bool
	switchUnsent          bool
	switchPos             uint64
	windowFull            bool // the writer's latest message filled our ring (resize.go)
	// The janitor's view: positions at its last tick, and for how many
	// ticks nothing moved (janitor.go).
	idleMark  [2]uint64
	idleTicks int
	// syncDue asks for a control message that requests a completion, so
	// that the staging space of suppressed requests comes back (janitor).
	syncDue bool
	retired []*region // regions to free once c.mu is released
	refs    int       // the Conn itself plus Reads/Writes inside it
	// firstHeld: the dialer's first message (firstDue) waits for the
	// application's first call, or firstTimer (firstmsg.go). Set while
	// the Conn is being dialed; cleared under mu.
	firstHeld  atomic.Bool
	firstTimer *time.Timer
	st         counters
}

// Timeouts of teardown: how long Close lets queued data and the FIN
// drain, and how long it waits for the disconnect to finish.
const (
	lingerTimeout     = 5 * time.Second
	disconnectTimeout = 3 * time.Second
)

// newConn creates the DAT objects of one connection and posts its control
// receives, which must be in place before the connection exists: the
// peer may send the moment it is established. It takes a reference on s
// and lists the Conn in the process's registry (see Snapshot) until its
// memory is released. d is the dial's configuration for a dialed Conn,
// nil for an accepted one; log may be nil (slog.Default()).
func newConn(s *sharedIA, cfg connConfig, log *slog.Logger, d *Dialer) (c *Conn, err error) {
	s.hold()
	c = &Conn{
		id: nextID.Add(1), born: time.Now(), log: log, dialer: d,
		ia: s, cfg: cfg,
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1), cwake: make(chan struct{}, 1),
		done: make(chan struct{}), setup: make(chan error, 1),
		stageEnd: make([]uint64, cfg.sendDepth), refs: 1,
	}
	c.rdl.init(c.kick)
	c.wdl.init(c.kick)
	c.cc.k = cfg.recvs
	defer func() {
		if err != nil {
			c.destroy()
			c.releaseMemory()
			c = nil
		}
	}()
	// Room for every completion (at most one per posted request), the
	// connection events and one kick (see progress).
	if c.evd, err = s.ia.CreateEVD(cfg.recvs+cfg.sendDepth+16, dat.EVDDefault|dat.EVDSoftware); err != nil {
		return nil, err
	}
	c.evd.SetPollPolicy(cfg.poll)
	if c.arena, err = s.ctrl.reserve(cfg.recvs); err != nil {
		return nil, err
	}
	c.arenaHeld = c.arena != nil
	attr := dat.EPAttr{
		ServiceType: dat.ServiceTypeRC, MaxMessageSize: ctrlSlot, MaxRDMASize: uint32(cfg.maxBuf),
		QoS: dat.QoSBestEffort, RecvCompletionFlags: dat.CompletionEVDThreshold, RequestCompletionFlags: dat.CompletionEVDThreshold,
		MaxRecvDTOs: cfg.recvs, MaxRequestDTOs: cfg.sendDepth, MaxRecvIOV: 1, MaxRequestIOV: 2, MaxRDMAWriteIOV: 2,
	}
	if c.arena != nil {
		c.ep, err = s.ia.CreateEPWithSRQ(s.pz, c.evd, c.evd, c.evd, c.arena.srq, &attr)
	} else {
		c.ep, err = s.ia.CreateEP(s.pz, c.evd, c.evd, c.evd, &attr)
	}
	if err != nil {
		return nil, err
	}
	if c.mem, err = s.getMemory(cfg.bufSize, (c.ownRecvs()+cfg.sendDepth)*ctrlSlot); err != nil {
		return nil, err
	}
	c.ctrl = c.mem.ctrl
	rg, err := regionFrom(s, &c.mem.ringHome, cfg.bufSize, recvPriv)
	if err != nil {
		return nil, err
	}
	c.recv = newSpans(rg)
	sg, err := regionFrom(s, &c.mem.stgHome, cfg.bufSize, stagePriv)
	if err != nil {
		return nil, err
	}
	c.stage = newSpans(sg)
	for i := range c.ownRecvs() {
		if err = c.postRecv(i); err != nil {
			return nil, err
		}
	}
	registry.addConn(c)
	return c, nil
}

// hello is this side's half of the handshake.
func (c *Conn) hello() []byte {
	flags := handshake.FlagRingResize
	if c.ia.writeImm && !c.cfg.noImm {
		flags |= handshake.FlagWriteImm
	}
	if h := testLegacy.Load(); h != nil && (*h)(c) {
		c.mu.Lock()
		c.cfg.adaptive = false
		c.mu.Unlock()
		flags = 0
	}
	c.mu.Lock()
	c.helloFlags = flags
	c.mu.Unlock()
	return handshake.AppendHello(make([]byte, 0, handshake.HelloLen), handshake.Hello{
		Version: handshake.Version, Flags: flags, Credits: uint16(c.cfg.recvs),
		RingAddr: c.recv.cur.reg.addr, RingKey: c.recv.cur.reg.rkey, RingSize: uint32(c.recv.size()),
	})
}

// Test hooks, nil outside tests; atomic, since a test sets them while
// connections of earlier tests may still run. testLegacy makes a Conn
// behave as a peer of the revision before ring resizing: no
// handshake.FlagRingResize, no offers. testControl edits each control
// message a Conn sends, so tests can play a peer that breaks the rules.
var (
	testLegacy  atomic.Pointer[func(*Conn) bool]
	testControl atomic.Pointer[func(*Conn, *wire.Control)]
)

// setPeer records the peer's Hello. It takes c.mu: Stats may read the
// Conn while it is in its handshake.
func (c *Conn) setPeer(h handshake.Hello) {
	c.mu.Lock()
	c.peer = h
	c.dst = peerRing{r: ring.Ring{Size: uint64(h.RingSize)}, addr: h.RingAddr, key: h.RingKey}
	c.cc.avail = int(h.Credits)
	c.mu.Unlock()
}

// established records the addresses of a connection that just came up.
// They are written under c.mu, which Snapshot reads them under; the
// Conn's user reads them without it, after the dial or Accept returned.
func (c *Conn) established() {
	var la, ra *Addr
	if p, err := c.ep.Query(); err == nil {
		la = &Addr{IP: p.LocalAddr, Port: uint16(p.LocalPortQual)}
		ra = &Addr{IP: p.RemoteAddr, Port: uint16(p.RemotePortQual)}
	}
	c.mu.Lock()
	c.laddr, c.raddr = la, ra
	c.moveLocked(lcOpen)
	c.mu.Unlock()
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr {
	if c.laddr == nil {
		return nil
	}
	return c.laddr
}

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr {
	if c.raddr == nil {
		return nil
	}
	return c.raddr
}

// SetDeadline sets the read and write deadlines (see net.Conn).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.live("set deadline"); err != nil {
		return err
	}
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the deadline for Read (and WriteTo).
func (c *Conn) SetReadDeadline(t time.Time) error {
	if err := c.live("set read deadline"); err != nil {
		return err
	}
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline for Write (and ReadFrom).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if err := c.live("set write deadline"); err != nil {
		return err
	}
	c.wdl.set(t)
	return nil
}

func (c *Conn) live(op string) error {
	c.mu.Lock()
	closed := c.closedLocked()
	c.mu.Unlock()
	if closed {
		return opError(op, c.laddr, c.raddr, net.ErrClosed)
	}
	return nil
}

// CloseRead shuts the read side down: Reads return io.EOF, and data the
// peer still sends is discarded (its credit returned) so that the peer's
// Writes do not block.
//
// Discarding needs someone to apply the peer's control messages while no
// Read will come any more, so a half-closed Conn gets a goroutine of its
// own that drives it until it closes or the peer finishes (see progress).
func (c *Conn) CloseRead() error {
	c.mu.Lock()
	if c.closedLocked() {
		c.mu.Unlock()
		return opError("close", c.laddr, c.raddr, net.ErrClosed)
	}
	first := !c.readShut
	c.readShut = true
	c.rCons = c.rProd
	if first {
		c.refs++ // the discarder is inside the Conn until it leaves
	}
	c.mu.Unlock()
	wake(c.rwake)
	c.kick()
	c.unholdFirst() // the peer's data is discarded as it comes, so let it come
	c.flushControl()
	if first {
		go c.discard()
	}
	return nil
}

// discard drives a read-closed Conn until it is closed or the peer will
// send nothing more.
func (c *Conn) discard() {
	defer c.leave()
	for {
		k := c.pr.kicks.Load()
		c.mu.Lock()
		over := c.closedLocked() || c.rFIN || c.err != nil
		c.mu.Unlock()
		if over {
			return
		}
		if c.poll(k) {
			continue
		}
		select {
		case <-c.rwake:
		case <-c.done:
		}
	}
}

// CloseWrite shuts the write side down: once the data written so far is
// delivered, the peer reads io.EOF. Reading goes on.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	if c.closedLocked() {
		c.mu.Unlock()
		return opError("close", c.laddr, c.raddr, net.ErrClosed)
	}
	c.writeShut = true // a Write waiting for space gives up
	c.mu.Unlock()
	wake(c.wwake)
	c.kick()
	// The FIN must follow the last data: wait for a Write in progress.
	c.writeMu.Lock()
	c.mu.Lock()
	c.finWanted = true
	c.mu.Unlock()
	c.writeMu.Unlock()
	c.unholdFirst() // the FIN's message carries it
	c.flushControl()
	return nil
}

// Close closes the connection. Pending Reads and Writes return
// net.ErrClosed. Data already written is delivered and the peer reads
// io.EOF after it (a FIN follows the data, then DAT's graceful
// disconnect), unless the transport is already gone.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closedLocked() {
		c.mu.Unlock()
		return opError("close", c.laddr, c.raddr, net.ErrClosed)
	}
	c.moveLocked(lcClosing)
	c.finWanted = true
	close(c.done)
	c.mu.Unlock()
	c.openSpares()
	c.kick()
	c.unholdFirst() // the FIN's message carries it
	c.flushControl()
	graceful := c.teardown()
	if c.logger().Enabled(context.Background(), slog.LevelDebug) {
		st := c.Stats()
		c.logDebug("rdmanet: closed", slog.Uint64("bytes_written", st.BytesWritten), slog.Uint64("bytes_read", st.BytesRead),
			slog.Duration("age", time.Since(c.born)), slog.Bool("graceful", graceful))
	}
	return nil
}

// teardown ends a connection: it lets queued sends and the FIN drain
// (bounded by lingerTimeout), disconnects gracefully if they did and
// abruptly if not, and frees the DAT objects. It drives the Conn itself
// meanwhile (see progress). The memory goes when the last Read or Write
// inside the Conn has left. It reports whether everything drained and the
// disconnect was graceful.
func (c *Conn) teardown() (graceful bool) {
	c.unholdFirst() // its timer must not outlive the Conn
	// Nobody's latency waits on a close: from here on the Conn's waits
	// count as quiet ones (progress.go), which sleep at once rather than
	// spin where its policy is adaptive; a spin would take a processor
	// from the peer (or this process's other connections) for a FIN or a
	// disconnect that come when they come. Traced in BenchmarkDial (2
	// shared cores), each close spun up to 100 µs, and since it was often
	// a new connection's first spin, which the IA learns from (see
	// dat.PollAdaptive), its quick disconnects taught the IA that new
	// connections' spins paid when their Reads' did not. (Setting the
	// EVD's policy here instead would be undone by the next poll's
	// setQuiet once a quiet writer left.)
	c.quiet.Add(1) // never taken back: the Conn is ending
	var expired atomic.Bool
	limit := time.AfterFunc(lingerTimeout, func() { expired.Store(true); c.kick() })
	drained, gone := false, false
	for {
		k := c.pr.kicks.Load()
		c.mu.Lock()
		// The transport's end, or a handshake that never finished
		// (abandon), always leaves err set.
		gone = c.err != nil
		drained = !gone && (!c.finWanted || c.finSent) && c.posted == c.completed
		c.mu.Unlock()
		if gone || drained || expired.Load() {
			break
		}
		if !c.poll(k) {
			select {
			case <-c.cwake:
			case <-time.After(time.Millisecond):
			}
		}
	}
	limit.Stop()
	if !gone && !drained {
		c.logInfo("rdmanet: close timed out", slog.String("reason", "timeout"),
			slog.String("error", "queued data and the FIN did not drain within "+lingerTimeout.String()+"; disconnecting abruptly"))
	}
	if st, err := c.ep.GetStatus(); err == nil && st.State != dat.EPDisconnected && st.State != dat.EPUnconnected {
		flags := dat.CloseAbrupt
		if drained {
			flags = dat.CloseGraceful
		}
		if c.ep.Disconnect(flags) == nil {
			c.awaitDisconnected()
		}
	}
	// No Read or Write may be inside the EVD while it is freed; they see
	// closed and leave.
	c.pollMu.Lock()
	c.destroy()
	c.pollMu.Unlock()
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.moveLocked(lcClosed)
	c.mu.Unlock()
	c.rdl.stop()
	c.wdl.stop()
	if c.dialer != nil {
		c.ia.forget(c.dialKey, c)
		c.ia.dropSpare(c.dialKey, c)
	}
	c.leave()
	return drained
}

// awaitDisconnected drives the Conn, bounded, until the EP reaches
// DISCONNECTED.
func (c *Conn) awaitDisconnected() {
	var expired atomic.Bool
	t := time.AfterFunc(disconnectTimeout, func() { expired.Store(true); c.kick() })
	defer t.Stop()
	for {
		k := c.pr.kicks.Load()
		st, err := c.ep.GetStatus()
		if err != nil || st.State == dat.EPDisconnected {
			return
		}
		if expired.Load() {
			c.logInfo("rdmanet: disconnect timed out", slog.String("reason", "timeout"),
				slog.String("error", "the peer did not finish the disconnect within "+disconnectTimeout.String()))
			c.ep.Disconnect(dat.CloseAbrupt)
			return
		}
		if !c.poll(k) {
			select {
			case <-c.cwake:
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// destroy frees the EP and the EVD (nobody polls them: the caller holds
// pollMu, or the Conn never ran). Freeing the EP closes the provider's QP,
// after which nothing writes into our memory any more.
//
// With an arena, the control receives the EVD still reports go back to
// it, and then the reservation: see ctrlpool.go for why that order keeps
// the shared queue's supply.
//
// An EP that is gone already (dat reports its handle invalid: something
// freed it, and its QP with it) gives its reservation back as a freed
// one does. One that dat refuses to free, alive, keeps it: its QP may
// still take up to K of the SRQ's receives, which are what its K+1
// covers, and handing them to other connections would let a peer that
// keeps to its credits find the SRQ empty. That reservation lasts as
// long as the IA, whose close destroys the QP and the SRQ. dat refuses
// only EPs reserved or pending on a provider's PSP or an RSP, and our
// EPs are our own (CreateEP), so it is a safeguard, not a path.
func (c *Conn) destroy() {
	freed := true
	if c.ep != nil {
		err := c.ep.Free()
		freed = err == nil || errors.Is(err, dat.ErrInvalidHandle)
	}
	if c.evd != nil {
		if c.arena != nil {
			c.returnSlots()
		}
		c.evd.Free()
	}
	if c.arenaHeld && freed {
		c.arenaHeld = false
		c.arena.release(c.cfg.recvs)
	}
}

// returnSlots posts back to the arena the slots of the control receives
// still queued on the EVD.
func (c *Conn) returnSlots() {
	for {
		ev, err := c.evd.Dequeue()
		if err != nil {
			return
		}
		if ev.Number == dat.DTOCompletionEvent && ev.DTO.Op == dat.DTOReceive {
			c.giveBackSlot(int(ev.DTO.Cookie))
		}
	}
}

// enter admits a Read or Write: the memory stays mapped until it leaves.
func (c *Conn) enter() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closedLocked() {
		return net.ErrClosed
	}
	c.refs++
	return nil
}

// leave drops a reference; the last frees the memory and the IA.
func (c *Conn) leave() {
	c.mu.Lock()
	c.refs--
	last := c.refs == 0
	c.mu.Unlock()
	if last {
		c.releaseMemory()
	}
}

func (c *Conn) releaseMemory() {
	registry.removeConn(c)
	janitorForget()
	for _, r := range c.recv.regions() {
		r.free()
	}
	for _, r := range c.stage.regions() {
		r.free()
	}
	c.offer.free()
	for _, r := range c.retired {
		r.free()
	}
	c.ia.putMemory(c.mem) // after every region in it is deregistered
	c.ia.release()
}

// fail records that the transport failed and aborts the connection; every
// blocked call wakes and reports err.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	// Once Close has begun, teardown decides how to disconnect.
	first := c.err == nil && !c.closedLocked()
	if c.err == nil {
		c.err = err
	}
	if first {
		c.transportFailedLocked(err)
	}
	c.mu.Unlock()
	if first {
		c.ep.Disconnect(dat.CloseAbrupt)
		c.logInfo("rdmanet: connection failed", slog.String("reason", failureReason(err)), slog.String("error", err.Error()))
	}
	c.wakeAll()
}

func (c *Conn) wakeAll() {
	wake(c.rwake)
	wake(c.wwake)
	wake(c.cwake)
}

// wake signals a cap-1 channel without blocking: a pending token already
// means "look again".
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
