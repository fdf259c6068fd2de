package drivertest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// env is the world of one subtest: its two IAs and the bookkeeping of
// every work request posted in it.
type env struct {
	t       *testing.T
	cfg     Config
	timeout time.Duration
	quiet   time.Duration

	passive, active driver.IA
	pattr, aattr    driver.IAAttr

	// mu guards the ledger: tests poll from helper goroutines in the
	// race subtests.
	mu        sync.Mutex
	posted    map[uint64]*postRec
	recvCQOf  map[uint32]*cqReader // a QP's RecvCQ, by Tag, for SRQ receives
	nextID    atomic.Uint64
	nextTagV  atomic.Uint32
	nextQPIdx atomic.Uint32

	closers [numLevels][]closer
}

// Cleanup levels: objects are closed in this order at the end of a
// subtest, as package dat does (nothing is closed while a QP may use it).
const (
	lvlListener = iota
	lvlQP
	lvlSRQ
	lvlWindow
	lvlMR
	lvlCQ
	lvlPD
	lvlIA
	numLevels
)

// closer is an object to close at cleanup unless a test closed it.
type closer struct {
	what string
	f    func() error
	once *sync.Once
	post func() // runs after f (guard checks)
}

// postRec is what the ledger knows about one posted work request.
type postRec struct {
	op   driver.Opcode
	cq   *cqReader // where it must complete; nil for an SRQ receive
	tag  uint32    // the Tag it must carry; unused for an SRQ receive
	srq  driver.SRQ
	done bool // completed once already
	// optional is set for unsignalled Sends and Writes: a successful one
	// may never complete.
	optional bool
}

func newEnv(t *testing.T, cfg Config) *env {
	e := &env{
		t:        t,
		cfg:      cfg,
		timeout:  time.Duration(float64(baseTimeout) * cfg.Slowdown),
		quiet:    time.Duration(float64(baseQuiet) * cfg.Slowdown),
		posted:   make(map[uint64]*postRec),
		recvCQOf: make(map[uint32]*cqReader),
	}
	e.nextID.Store(1000)
	e.nextTagV.Store(7000)
	// Registered first, so it runs after every other cleanup: by then the
	// subtest closed all it created, the IAs included.
	e.leakCheck(goleak.IgnoreCurrent())
	t.Cleanup(e.closeAll)
	var err error
	e.passive, err = e.openIA("passive", cfg.OpenPassive)
	require.NoError(t, err, "open passive IA")
	e.active, err = e.openIA("active", cfg.OpenActive)
	require.NoError(t, err, "open active IA")
	e.pattr, e.aattr = e.passive.Attr(), e.active.Attr()
	return e
}

func (e *env) openIA(name string, open func(context.Context) (driver.IA, error)) (driver.IA, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	ia, err := open(ctx)
	if err != nil {
		return nil, err
	}
	e.onClose(lvlIA, name+" IA Close", ia.Close)
	return ia, nil
}

// onClose schedules f for the subtest's cleanup at the given level and
// returns a function that closes the object now instead (once).
func (e *env) onClose(level int, what string, f func() error) func() error {
	c := closer{what: what, f: f, once: new(sync.Once)}
	e.closers[level] = append(e.closers[level], c)
	return func() error {
		var err error
		c.once.Do(func() { err = f() })
		return err
	}
}

// closeAll closes what the subtest left open, level by level, each
// level newest first.
func (e *env) closeAll() {
	for lvl := range e.closers {
		cs := e.closers[lvl]
		for i := len(cs) - 1; i >= 0; i-- {
			c := cs[i]
			c.once.Do(func() { e.closeQuietly(c.what, c.f) })
			if c.post != nil {
				c.post()
			}
		}
	}
}

// leakCheck fails the subtest at cleanup if goroutines other than those
// opts ignore are still running, retrying for the suite's timeout since a
// goroutine may need a moment to run its last instructions after the
// Close that ended it returned.
func (e *env) leakCheck(opts ...goleak.Option) {
	e.t.Cleanup(func() {
		deadline := time.Now().Add(e.timeout)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				e.t.Errorf("goroutines left after every object of the subtest was closed: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// ctx returns a context bounded by the suite's timeout.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	e.t.Cleanup(cancel)
	return ctx
}

// bounded runs a provider call that must return, failing the subtest if
// it does not within the timeout (the call's goroutine is then left
// behind: the subtest has failed anyway).
func (e *env) bounded(what string, f func() error) error {
	e.t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(e.timeout):
		e.t.Fatalf("%s did not return within %v", what, e.timeout)
		return nil
	}
}

// closeQuietly is for cleanups: the call must return, its error is
// reported but does not stop other cleanups.
func (e *env) closeQuietly(what string, f func() error) {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		if err != nil {
			e.t.Errorf("%s: %v", what, err)
		}
	case <-time.After(e.timeout):
		e.t.Errorf("%s did not return within %v", what, e.timeout)
	}
}

func (e *env) id() uint64  { return e.nextID.Add(1) }
func (e *env) tag() uint32 { return e.nextTagV.Add(1) }
func (e *env) sleepQuiet() { time.Sleep(e.quiet) }
func (e *env) ia(p bool) driver.IA {
	if p {
		return e.passive
	}
	return e.active
}

// connectAddr is where an active QP connects to reach l.
func (e *env) connectAddr(l driver.Listener) net.Addr {
	if e.cfg.ConnectAddr != nil {
		return e.cfg.ConnectAddr(l)
	}
	return l.Addr()
}

// listener is a listener of the passive IA and the function that closes
// it before the subtest's cleanup would.
type listener struct {
	driver.Listener
	closeNow func() error
}

// listen starts a listener on the passive IA, closed at cleanup.
func (e *env) listen(cfg driver.ListenConfig) listener {
	e.t.Helper()
	l, err := e.passive.Listen(cfg)
	require.NoError(e.t, err, "listen")
	return listener{l, e.onClose(lvlListener, "listener Close", l.Close)}
}

// unusedAddr returns an address of the passive IA nobody listens on: that
// of a listener just closed.
func (e *env) unusedAddr() net.Addr {
	e.t.Helper()
	l, err := e.passive.Listen(driver.ListenConfig{})
	require.NoError(e.t, err, "listen")
	addr := e.connectAddr(l)
	require.NoError(e.t, l.Close())
	return addr
}

// --- completion queues ----------------------------------------------------

// cqReader takes completions from one CQ, as package dat's waiter does
// (Poll, then Wait), and checks every one against the ledger: a posted
// WRID, on the CQ it belongs to, with its QP's Tag, at most once. It keeps
// completions a test has not asked for yet.
type cqReader struct {
	e    *env
	name string
	cq   driver.CQ
	held []driver.Completion
	// closeNow closes the CQ before the subtest's cleanup (once).
	closeNow func() error
	dst      [5]driver.Completion // small: Poll is often asked for fewer than it holds
}

func (e *env) newCQ(ia driver.IA, name string) *cqReader {
	e.t.Helper()
	cq, err := ia.CreateCQ(driver.CQConfig{Size: 256})
	require.NoError(e.t, err, "create CQ")
	r := &cqReader{e: e, name: name, cq: cq}
	r.closeNow = e.onClose(lvlCQ, name+" Close", cq.Close)
	return r
}

// check validates c against the ledger. It returns an error rather than
// failing, so it can run on helper goroutines.
func (r *cqReader) check(c driver.Completion) error {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.posted[c.WRID]
	switch {
	case p == nil:
		return fmt.Errorf("%s: completion %+v has a WRID nothing was posted with", r.name, c)
	case p.done:
		return fmt.Errorf("%s: WRID %d completed twice (again %+v)", r.name, c.WRID, c)
	}
	p.done = true
	if p.srq != nil {
		want := e.recvCQOf[c.QPTag]
		if want == nil {
			return fmt.Errorf("%s: SRQ receive %+v carries Tag %d, no QP of the SRQ has it", r.name, c, c.QPTag)
		}
		if want != r {
			return fmt.Errorf("%s: SRQ receive %+v completed here, not on the RecvCQ %s of the QP with its Tag", r.name, c, want.name)
		}
	} else {
		if p.cq != r {
			return fmt.Errorf("%s: completion %+v belongs on %s", r.name, c, p.cq.name)
		}
		if c.QPTag != p.tag {
			return fmt.Errorf("%s: completion %+v carries Tag %d, want %d", r.name, c, c.QPTag, p.tag)
		}
	}
	// Verbs leaves the opcode of a failed completion undefined.
	// A work completion does not tell a Write with Immediate from a Write.
	imm := p.op == driver.OpRDMAWriteImm && c.Op == driver.OpRDMAWrite
	if c.Status == driver.StatusSuccess && c.Op != p.op && !imm {
		return fmt.Errorf("%s: completion %+v has opcode %d, want %d", r.name, c, c.Op, p.op)
	}
	return nil
}

// poll takes what the CQ holds now, without waiting.
func (r *cqReader) poll() {
	r.e.t.Helper()
	require.NoError(r.e.t, r.pollErr())
}

func (r *cqReader) pollErr() error {
	for {
		n := r.cq.Poll(r.dst[:])
		if n < 0 || n > len(r.dst) {
			return fmt.Errorf("%s: Poll returned %d for %d slots", r.name, n, len(r.dst))
		}
		for _, c := range r.dst[:n] {
			if err := r.check(c); err != nil {
				return err
			}
			r.held = append(r.held, c)
		}
		if n < len(r.dst) {
			return nil
		}
	}
}

// waitMore polls, and if nothing came, waits in Wait until deadline.
func (r *cqReader) waitMore(deadline time.Time) bool {
	r.e.t.Helper()
	n := len(r.held)
	r.poll()
	for len(r.held) == n {
		if !time.Now().Before(deadline) {
			return false
		}
		require.NoError(r.e.t, r.cq.Wait(deadline), "%s: Wait", r.name)
		r.poll()
	}
	return true
}

// take removes the held completion of id, if any.
func (r *cqReader) take(id uint64) (driver.Completion, bool) {
	for i, c := range r.held {
		if c.WRID == id {
			r.held = append(r.held[:i], r.held[i+1:]...)
			return c, true
		}
	}
	return driver.Completion{}, false
}

// await returns the completions of ids, in the order of ids, whatever
// order they come in; others are held for later.
func (r *cqReader) await(ids ...uint64) []driver.Completion {
	r.e.t.Helper()
	out := make([]driver.Completion, len(ids))
	deadline := time.Now().Add(r.e.timeout)
	for i, id := range ids {
		for {
			if c, ok := r.take(id); ok {
				out[i] = c
				break
			}
			if !r.waitMore(deadline) {
				r.e.t.Fatalf("%s: no completion for WRID %d within %v (holding %+v)", r.name, id, r.e.timeout, r.held)
			}
		}
	}
	return out
}

// awaitOK waits for the successful completion of id; a receive's must
// report the message length given. (The contract leaves Length of a
// send-side completion undefined: devices need not fill it in, and
// package dat keeps its own.)
func (r *cqReader) awaitOK(id uint64, length uint32) driver.Completion {
	r.e.t.Helper()
	c := r.await(id)[0]
	require.Equal(r.e.t, driver.StatusSuccess, c.Status, "%s: status of %+v", r.name, c)
	if c.Op == driver.OpRecv {
		require.Equal(r.e.t, length, c.Length, "%s: length of %+v", r.name, c)
	}
	return c
}

// awaitAny waits for the next completion of any WR.
func (r *cqReader) awaitAny() driver.Completion {
	r.e.t.Helper()
	if len(r.held) == 0 && !r.waitMore(time.Now().Add(r.e.timeout)) {
		r.e.t.Fatalf("%s: no completion within %v", r.name, r.e.timeout)
	}
	c := r.held[0]
	r.held = r.held[1:]
	return c
}

// drain takes everything the CQ holds now (Poll only, no Wait) and
// returns it with what was held.
func (r *cqReader) drain() []driver.Completion {
	r.e.t.Helper()
	r.poll()
	out := r.held
	r.held = nil
	return out
}

// none checks that no completion arrives during the quiet period.
func (r *cqReader) none(what string) {
	r.e.t.Helper()
	deadline := time.Now().Add(r.e.quiet)
	for r.waitMore(deadline) {
	}
	if len(r.held) > 0 {
		r.e.t.Fatalf("%s: %s: unexpected completions %+v", r.name, what, r.held)
	}
}

// --- endpoints --------------------------------------------------------------

// endpoint is one QP with its PD, CQs, Tag and OnDisconnect record.
type endpoint struct {
	e       *env
	name    string
	passive bool
	ia      driver.IA
	pd      driver.PD
	qp      driver.QP
	cfg     driver.QPConfig
	tag     uint32
	scq     *cqReader
	rcq     *cqReader
	disc    *discRecorder
	ctl     *region // small region for hellos and control messages
}

// discRecorder records OnDisconnect calls.
type discRecorder struct {
	n  atomic.Int32
	ch chan error
}

func (d *discRecorder) on(err error) {
	d.n.Add(1)
	select {
	case d.ch <- err:
	default:
	}
}

// epOpts adjust an endpoint before its QP is created.
type epOpts struct {
	pd     driver.PD // nil: a new PD
	scq    *cqReader // nil: a new CQ
	rcq    *cqReader // nil: a new CQ
	srq    driver.SRQ
	modify func(*driver.QPConfig)
}

// defaultQPConfig fits the suite's needs inside both IAs' limits.
func (e *env) defaultQPConfig() driver.QPConfig {
	lim := func(want, a, b int) int { return min(want, a, b) }
	return driver.QPConfig{
		MaxSendWR:      lim(64, e.pattr.MaxWRPerQP, e.aattr.MaxWRPerQP),
		MaxRecvWR:      lim(64, e.pattr.MaxWRPerQP, e.aattr.MaxWRPerQP),
		MaxSendSGE:     lim(4, e.pattr.MaxSGE, e.aattr.MaxSGE),
		MaxRecvSGE:     lim(4, e.pattr.MaxSGE, e.aattr.MaxSGE),
		IRD:            lim(4, e.pattr.MaxIRD, e.aattr.MaxIRD),
		ORD:            lim(4, e.pattr.MaxORD, e.aattr.MaxORD),
		MaxMessageSize: min(1<<20, e.pattr.MaxMessageSize, e.aattr.MaxMessageSize),
		MaxRDMASize:    min(1<<20, e.pattr.MaxRDMASize, e.aattr.MaxRDMASize),
	}
}

// newEndpoint creates a QP on the passive or active IA.
func (e *env) newEndpoint(passive bool, o epOpts) *endpoint {
	e.t.Helper()
	name := "active"
	if passive {
		name = "passive"
	}
	name = fmt.Sprintf("%s#%d", name, e.nextQPIdx.Add(1))
	ep := &endpoint{e: e, name: name, passive: passive, ia: e.ia(passive), tag: e.tag(),
		disc: &discRecorder{ch: make(chan error, 4)}}
	ep.pd = o.pd
	if ep.pd == nil {
		ep.pd = e.newPD(ep.ia)
	}
	ep.scq, ep.rcq = o.scq, o.rcq
	if ep.scq == nil {
		ep.scq = e.newCQ(ep.ia, name+" SendCQ")
	}
	if ep.rcq == nil {
		ep.rcq = e.newCQ(ep.ia, name+" RecvCQ")
	}
	cfg := e.defaultQPConfig()
	cfg.PD, cfg.SRQ, cfg.SendCQ, cfg.RecvCQ, cfg.Tag = ep.pd, o.srq, ep.scq.cq, ep.rcq.cq, ep.tag
	cfg.OnDisconnect = ep.disc.on
	if o.srq != nil {
		cfg.MaxRecvWR, cfg.MaxRecvSGE = 0, 0
	}
	if o.modify != nil {
		o.modify(&cfg)
	}
	ep.cfg = cfg
	qp, err := ep.ia.CreateQP(cfg)
	require.NoError(e.t, err, "create QP")
	ep.qp = qp
	// Not through onClose's once: QP.Close must be idempotent, so the
	// cleanup closes a QP again even if the test closed it.
	e.closers[lvlQP] = append(e.closers[lvlQP], closer{what: name + " QP Close", f: qp.Close, once: new(sync.Once)})
	e.mu.Lock()
	e.recvCQOf[ep.tag] = ep.rcq
	e.mu.Unlock()
	ep.ctl = e.register(ep.pd, 4096, driver.AccessLocalWrite)
	return ep
}

func (e *env) newPD(ia driver.IA) driver.PD {
	e.t.Helper()
	pd, err := ia.AllocPD()
	require.NoError(e.t, err, "alloc PD")
	e.onClose(lvlPD, "PD Close", pd.Close)
	return pd
}

// record enters a WR into the ledger before it is posted.
func (ep *endpoint) record(id uint64, op driver.Opcode, optional bool) {
	cq := ep.scq
	if op == driver.OpRecv {
		cq = ep.rcq
	}
	ep.e.mu.Lock()
	ep.e.posted[id] = &postRec{op: op, cq: cq, tag: ep.tag, optional: optional}
	ep.e.mu.Unlock()
}

// postRecvErr posts a receive over segs and returns its ID.
func (ep *endpoint) postRecvErr(segs ...driver.SGE) (uint64, error) {
	id := ep.e.id()
	ep.record(id, driver.OpRecv, false)
	return id, ep.qp.PostRecv(driver.RecvWR{ID: id, Local: segs})
}

func (ep *endpoint) postRecv(segs ...driver.SGE) uint64 {
	ep.e.t.Helper()
	id, err := ep.postRecvErr(segs...)
	require.NoError(ep.e.t, err, "%s: PostRecv", ep.name)
	return id
}

// postSendErr posts a send-side WR and returns its ID.
func (ep *endpoint) postSendErr(op driver.Opcode, flags driver.SendFlags, remote driver.RemoteSegment, segs ...driver.SGE) (uint64, error) {
	id := ep.e.id()
	optional := op != driver.OpRDMARead && flags&driver.SendSignaled == 0
	ep.record(id, op, optional)
	return id, ep.qp.PostSend(driver.SendWR{ID: id, Op: op, Flags: flags, Local: segs, Remote: remote})
}

func (ep *endpoint) postSend(op driver.Opcode, flags driver.SendFlags, remote driver.RemoteSegment, segs ...driver.SGE) uint64 {
	ep.e.t.Helper()
	id, err := ep.postSendErr(op, flags, remote, segs...)
	require.NoError(ep.e.t, err, "%s: PostSend op %d", ep.name, op)
	return id
}

// postSendImm posts a signalled RDMA Write with Immediate.
func (ep *endpoint) postSendImm(imm uint32, remote driver.RemoteSegment, segs ...driver.SGE) (uint64, error) {
	id := ep.e.id()
	ep.record(id, driver.OpRDMAWriteImm, false)
	return id, ep.qp.PostSend(driver.SendWR{ID: id, Op: driver.OpRDMAWriteImm, Flags: driver.SendSignaled, Local: segs, Remote: remote, Imm: imm})
}

// send posts a signalled Send of segs.
func (ep *endpoint) send(segs ...driver.SGE) uint64 {
	ep.e.t.Helper()
	return ep.postSend(driver.OpSend, driver.SendSignaled, driver.RemoteSegment{}, segs...)
}

// awaitDisconnect waits for an OnDisconnect call and returns its error.
func (ep *endpoint) awaitDisconnect() error {
	ep.e.t.Helper()
	select {
	case err := <-ep.disc.ch:
		return err
	case <-time.After(ep.e.timeout):
		ep.e.t.Fatalf("%s: OnDisconnect not called within %v", ep.name, ep.e.timeout)
		return nil
	}
}

// disconnect calls Disconnect, which must return nil within the timeout.
func (ep *endpoint) disconnect(graceful bool) {
	ep.e.t.Helper()
	err := ep.e.bounded(fmt.Sprintf("%s: Disconnect(%v)", ep.name, graceful), func() error { return ep.qp.Disconnect(graceful) })
	require.NoError(ep.e.t, err, "%s: Disconnect(%v)", ep.name, graceful)
}

// close calls QP.Close, which must return nil within the timeout.
func (ep *endpoint) close() {
	ep.e.t.Helper()
	err := ep.e.bounded(ep.name+": QP Close", ep.qp.Close)
	require.NoError(ep.e.t, err, "%s: QP Close", ep.name)
}

// --- memory -------------------------------------------------------------------

// guardLen bytes of unregistered memory surround every region, so a
// write outside the region is seen.
const guardLen = 256

// guardByte fills memory the provider must not write.
const guardByte = 0xA5

// region is registered memory inside a larger allocation whose ends are
// guards.
type region struct {
	e    *env
	full []byte // guard + buf + guard
	buf  []byte
	mr   driver.MR
}

func (e *env) register(pd driver.PD, n int, access driver.Access) *region {
	e.t.Helper()
	full := make([]byte, n+2*guardLen)
	for i := range full {
		full[i] = guardByte
	}
	r := &region{e: e, full: full, buf: full[guardLen : guardLen+n : guardLen+n]}
	mr, err := pd.Register(r.buf, access)
	require.NoError(e.t, err, "register %d bytes", n)
	r.mr = mr
	e.closers[lvlMR] = append(e.closers[lvlMR], closer{what: "MR Close", f: mr.Close, once: new(sync.Once), post: r.checkGuards})
	return r
}

// sge names [off, off+n) of the region.
func (r *region) sge(off, n int) driver.SGE {
	return driver.SGE{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}
}

// remote is what a peer names [off, off+n) of the region with.
func (r *region) remote(off, n int) driver.RemoteSegment {
	return driver.RemoteSegment{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), RKey: r.mr.RKey()}
}

// fill writes a pattern particular to seed into [off, off+n) and returns it.
func (r *region) fill(off, n int, seed byte) []byte {
	p := pattern(n, seed)
	copy(r.buf[off:], p)
	return p
}

// checkGuards fails the subtest if a byte outside the region changed.
func (r *region) checkGuards() {
	for i := range guardLen {
		if r.full[i] != guardByte || r.full[len(r.full)-1-i] != guardByte {
			r.e.t.Errorf("a byte outside a registered region of %d bytes was written", len(r.buf))
			return
		}
	}
}

// snapshot copies the region's bytes.
func (r *region) snapshot() []byte { return append([]byte(nil), r.buf...) }

// pattern returns n bytes that differ with position and seed and avoid
// the guard byte, so a pattern is never mistaken for untouched memory.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		v := seed + byte(i*7) + byte(i>>8)
		if v == guardByte {
			v++
		}
		b[i] = v
	}
	return b
}

// --- connections ----------------------------------------------------------

// conn is an established connection between an active and a passive
// endpoint.
type conn struct {
	a, p       *endpoint
	ares, pres driver.ConnectResult
	info       driver.RequestInfo
	addr       net.Addr // what the active side connected to
}

type acceptResult struct {
	info driver.RequestInfo
	res  driver.ConnectResult
	err  error
}

// serveOne accepts one request on l and answers it with accept (which
// returns the QP to accept on, or nil to reject with pdata). The
// returned channel gets the outcome.
func (e *env) serveOne(l driver.Listener, qp driver.QP, pdata []byte, reject bool) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	ctx := e.ctx()
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			ch <- acceptResult{err: fmt.Errorf("listener Accept: %w", err)}
			return
		}
		info := req.Info()
		// Info's private data belongs to the request: copy it before the
		// request is settled.
		info.PrivateData = append([]byte(nil), info.PrivateData...)
		if reject {
			ch <- acceptResult{info: info, err: req.Reject(pdata)}
			return
		}
		res, err := req.Accept(ctx, qp, pdata)
		ch <- acceptResult{info: info, res: res, err: err}
	}()
	return ch
}

// connectWith connects a to p through a new listener with the given
// private data, without the hello.
func (e *env) connectWith(a, p *endpoint, apd, ppd []byte) *conn {
	e.t.Helper()
	l := e.listen(driver.ListenConfig{})
	c := &conn{a: a, p: p, addr: e.connectAddr(l)}
	done := e.serveOne(l, p.qp, ppd, false)
	res, err := a.qp.Connect(e.ctx(), c.addr, apd)
	require.NoError(e.t, err, "Connect")
	var ar acceptResult
	select {
	case ar = <-done:
	case <-time.After(e.timeout):
		e.t.Fatal("passive side did not finish accepting")
	}
	require.NoError(e.t, ar.err, "accept")
	c.ares, c.pres, c.info = res, ar.res, ar.info
	// The listener is not needed any more; closing it must not touch the
	// established connection.
	require.NoError(e.t, e.bounded("listener Close", l.closeNow))
	return c
}

// connect connects a to p and makes the active side send first (a
// one-byte hello the passive side receives): iWARP's startup rule lets
// the responder transmit only after the initiator's first message.
func (e *env) connect(a, p *endpoint) *conn {
	e.t.Helper()
	rid := p.postRecv(p.ctl.sge(0, 64))
	c := e.connectWith(a, p, nil, nil)
	a.ctl.fill(1024, 1, 1)
	sid := a.send(a.ctl.sge(1024, 1))
	a.scq.awaitOK(sid, 1)
	p.rcq.awaitOK(rid, 1)
	return c
}

// pair creates two endpoints with default options and connects them.
func (e *env) pair() *conn {
	e.t.Helper()
	return e.connect(e.newEndpoint(false, epOpts{}), e.newEndpoint(true, epOpts{}))
}

// checkQuiescent checks, for an endpoint whose connection has ended (its
// Disconnect or Close returned, or OnDisconnect was called), that its CQs
// already hold every completion they will ever get and that the regions
// receive no more writes: everything polled now, then a quiet period
// with nothing new and no byte changed.
func (ep *endpoint) checkQuiescent(regions ...*region) []driver.Completion {
	ep.e.t.Helper()
	got := append(ep.scq.drain(), ep.rcq.drain()...)
	snaps := make([][]byte, len(regions))
	for i, r := range regions {
		snaps[i] = r.snapshot()
	}
	ep.e.sleepQuiet()
	ep.scq.poll()
	ep.rcq.poll()
	require.Empty(ep.e.t, ep.scq.held, "%s: send completions produced after the QP was quiescent", ep.name)
	require.Empty(ep.e.t, ep.rcq.held, "%s: receive completions produced after the QP was quiescent", ep.name)
	for i, r := range regions {
		if string(snaps[i]) != string(r.buf) {
			ep.e.t.Fatalf("%s: memory written after the QP was quiescent (region %d)", ep.name, i)
		}
	}
	return got
}

// portOf returns the port of a listener address.
func portOf(t *testing.T, a net.Addr) uint16 {
	t.Helper()
	_, ps, err := net.SplitHostPort(a.String())
	require.NoError(t, err, "listener address %v", a)
	var p uint16
	_, err = fmt.Sscan(ps, &p)
	require.NoError(t, err, "listener port %q", ps)
	return p
}

func deadlineAfter(d time.Duration) time.Time { return time.Now().Add(d) }

func pastDeadline(t time.Time) bool { return !time.Now().Before(t) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// scopeMark records how many objects of each level exist, so closeScope
// can close everything created after it.
type scopeMark [numLevels]int

func (e *env) mark() scopeMark {
	var m scopeMark
	for lvl := range e.closers {
		m[lvl] = len(e.closers[lvl])
	}
	return m
}

// closeScope closes, in cleanup order, every object created since m.
func (e *env) closeScope(m scopeMark) {
	e.t.Helper()
	for lvl := range e.closers {
		cs := e.closers[lvl]
		for i := len(cs) - 1; i >= m[lvl]; i-- {
			c := cs[i]
			var err error
			c.once.Do(func() { err = e.bounded(c.what, c.f) })
			require.NoError(e.t, err, c.what)
			if c.post != nil {
				c.post()
			}
		}
		e.closers[lvl] = cs[:m[lvl]]
	}
}
