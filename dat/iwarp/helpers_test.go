package iwarp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// testTimeout bounds every blocking step of a test.
const testTimeout = 10 * time.Second

// leakCheck verifies, after every other cleanup of t ran (IA, listeners,
// QPs), that no goroutine is left. Call it first in a test.
func leakCheck(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// openIA opens an IA on 127.0.0.1 with the given options.
func openIA(t testing.TB, opts ...string) *iwarp.IA {
	t.Helper()
	dia, err := iwarp.Driver{}.Open(context.Background(), append([]string{"127.0.0.1"}, opts...))
	if err != nil {
		t.Fatalf("open IA: %v", err)
	}
	ia := dia.(*iwarp.IA)
	t.Cleanup(func() { ia.Close() })
	return ia
}

func listen(t testing.TB, ia *iwarp.IA, cfg driver.ListenConfig) *iwarp.Listener {
	t.Helper()
	l, err := ia.Listen(cfg)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*iwarp.Listener)
}

func listenAddr(l driver.Listener) *net.TCPAddr { return l.Addr().(*net.TCPAddr) }

// sink collects what one QP reports: the completions on its CQ (both the
// send and the receive CQ of the QP) and its OnDisconnect calls. Only the
// test goroutine takes completions from it, as package dat lets one
// goroutine at a time wait on a CQ.
type sink struct {
	cq    *iwarp.CQ
	tag   uint32
	disc  chan error // every OnDisconnect call, buffered
	ndisc atomic.Int32
	buf   []driver.Completion // polled, not returned yet
	dst   [16]driver.Completion
}

// nextTag gives every sink's QP a Tag of its own, so that a completion
// carrying another QP's Tag is noticed.
var nextTag atomic.Uint32

func newSink() *sink {
	return &sink{tag: nextTag.Add(1) + 1000, disc: make(chan error, 16)}
}

// bind returns cfg with the sink's CQ (created on ia the first time),
// Tag and OnDisconnect.
func (s *sink) bind(t testing.TB, ia *iwarp.IA, cfg driver.QPConfig) driver.QPConfig {
	t.Helper()
	if s.cq == nil {
		cq, err := ia.CreateCQ(driver.CQConfig{Size: 64})
		if err != nil {
			t.Fatalf("create CQ: %v", err)
		}
		s.cq = cq.(*iwarp.CQ)
		t.Cleanup(func() { cq.Close() })
	}
	cfg.SendCQ, cfg.RecvCQ, cfg.Tag = s.cq, s.cq, s.tag
	cfg.OnDisconnect = func(err error) {
		s.ndisc.Add(1)
		s.disc <- err
	}
	return cfg
}

// poll returns the next completion if one is there, without waiting.
func (s *sink) poll(t testing.TB) (driver.Completion, bool) {
	t.Helper()
	if len(s.buf) == 0 {
		n := s.cq.Poll(s.dst[:])
		s.buf = append(s.buf[:0], s.dst[:n]...)
	}
	if len(s.buf) == 0 {
		return driver.Completion{}, false
	}
	c := s.buf[0]
	s.buf = s.buf[1:]
	if c.QPTag != s.tag {
		t.Fatalf("completion %+v carries Tag %d, want %d", c, c.QPTag, s.tag)
	}
	return c, true
}

// nextWithin waits up to d for the next completion.
func (s *sink) nextWithin(t testing.TB, d time.Duration) (driver.Completion, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if c, ok := s.poll(t); ok {
			return c, true
		}
		if !time.Now().Before(deadline) {
			return driver.Completion{}, false
		}
		if err := s.cq.Wait(deadline); err != nil {
			t.Fatalf("CQ wait: %v", err)
		}
	}
}

// next waits for the next completion.
func (s *sink) next(t testing.TB) driver.Completion {
	t.Helper()
	c, ok := s.nextWithin(t, testTimeout)
	if !ok {
		t.Fatal("no completion")
	}
	return c
}

// wait waits for n completions and returns them.
func (s *sink) wait(t testing.TB, n int) []driver.Completion {
	t.Helper()
	cs := make([]driver.Completion, n)
	for i := range cs {
		cs[i] = s.next(t)
	}
	return cs
}

// expectSuccess waits for a successful completion of the given ID.
func (s *sink) expectSuccess(t testing.TB, id uint64, op driver.Opcode, length uint32) driver.Completion {
	t.Helper()
	c := s.next(t)
	if c.WRID != id || c.Op != op || c.Status != driver.StatusSuccess || c.Length != length {
		t.Fatalf("completion %+v, want ID %d op %d success length %d", c, id, op, length)
	}
	return c
}

// none checks that no completion arrives within d.
func (s *sink) none(t testing.TB, d time.Duration) {
	t.Helper()
	if c, ok := s.nextWithin(t, d); ok {
		t.Fatalf("unexpected completion %+v", c)
	}
}

// waitDisconnected returns the argument of the next OnDisconnect call.
func (s *sink) waitDisconnected(t testing.TB) error {
	t.Helper()
	select {
	case err := <-s.disc:
		return err
	case <-time.After(testTimeout):
		t.Fatal("no OnDisconnect call")
		return nil
	}
}

var defaultQPConfig = driver.QPConfig{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, IRD: 1, ORD: 1}

// newQP creates a QP on ia reporting to s (a fresh sink if nil); the
// test's cleanup closes it.
func newQP(t testing.TB, ia *iwarp.IA, cfg driver.QPConfig, s *sink) *iwarp.QP {
	t.Helper()
	if s == nil {
		s = newSink()
	}
	q, err := ia.CreateQP(s.bind(t, ia, cfg))
	if err != nil {
		t.Fatalf("create QP: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q.(*iwarp.QP)
}

type connectResult struct {
	res driver.ConnectResult
	err error
}

// connectAsync runs Connect in a goroutine; the channel gets its result.
func connectAsync(ctx context.Context, q *iwarp.QP, remote net.Addr, pdata []byte) <-chan connectResult {
	ch := make(chan connectResult, 1)
	go func() {
		res, err := q.Connect(ctx, remote, pdata)
		ch <- connectResult{res, err}
	}()
	return ch
}

func waitConnect(t *testing.T, ch <-chan connectResult) connectResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(testTimeout):
		t.Fatal("Connect did not return")
		return connectResult{}
	}
}

func accept(t *testing.T, ctx context.Context, l driver.Listener) *iwarp.Request {
	t.Helper()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return r.(*iwarp.Request)
}

// pair is an established connection between two QPs of two IAs.
type pair struct {
	ini, resp       *iwarp.QP
	iniRec, respRec *sink
}

// connectPair connects a fresh initiator QP on ini to a fresh responder QP
// on resp through a new listener, with the given QP configurations.
func connectPair(t *testing.T, ini, resp *iwarp.IA, iniCfg, respCfg driver.QPConfig) pair {
	t.Helper()
	ctx := testCtx(t)
	l := listen(t, resp, driver.ListenConfig{})
	p := pair{iniRec: newSink(), respRec: newSink()}
	p.ini = newQP(t, ini, iniCfg, p.iniRec)
	p.resp = newQP(t, resp, respCfg, p.respRec)
	ch := connectAsync(ctx, p.ini, l.Addr(), nil)
	r := accept(t, ctx, l)
	if _, err := r.Accept(ctx, p.resp, nil); err != nil {
		t.Fatalf("accept request: %v", err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatalf("connect: %v", res.err)
	}
	return p
}

// assertNonPeer checks that err is a non-peer failure: not a reject, not
// unreachable, not a context error.
func assertNonPeer(t *testing.T, err error) {
	t.Helper()
	t.Logf("non-peer error: %v", err)
	var rej *driver.RejectError
	switch {
	case err == nil:
		t.Fatal("expected an error")
	case errors.As(err, &rej):
		t.Fatalf("got a peer reject, want non-peer: %v", err)
	case errors.Is(err, driver.ErrUnreachable):
		t.Fatalf("got unreachable, want non-peer: %v", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		t.Fatalf("got a context error, want non-peer: %v", err)
	}
}

// --- raw MPA peers -------------------------------------------------------

const (
	keyReq = "MPA ID Req Frame"
	keyRep = "MPA ID Rep Frame"

	flagM = 0x80
	flagC = 0x40
	flagR = 0x20
	flagE = 0x10
)

// mpaFrame builds an MPA frame by hand (independently of package wire).
func mpaFrame(key string, flags, rev byte, pd []byte) []byte {
	b := append([]byte(key), flags, rev, 0, 0)
	binary.BigEndian.PutUint16(b[18:], uint16(len(pd)))
	return append(b, pd...)
}

// v2Block builds the 4-byte MPA v2 block.
func v2Block(ird, ord uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, ird), ord)
}

type rawFrame struct {
	key   string
	flags byte
	rev   byte
	pd    []byte
}

// readFrame reads one MPA frame from c by hand.
func readFrame(c net.Conn) (rawFrame, error) {
	var h [20]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return rawFrame{}, err
	}
	f := rawFrame{key: string(h[:16]), flags: h[16], rev: h[17], pd: make([]byte, binary.BigEndian.Uint16(h[18:]))}
	_, err := io.ReadFull(c, f.pd)
	return f, err
}

// dialRaw opens a plain TCP connection to l.
func dialRaw(t *testing.T, addr net.Addr) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), testTimeout)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// expectDropped checks that the listener closed c without sending a byte,
// within d.
func expectDropped(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.Read(b[:])
	if n != 0 {
		t.Fatalf("listener sent data instead of dropping the connection")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not dropped within %v", d)
	}
	if err == nil {
		t.Fatalf("read returned no error")
	}
}

// rawListener is a TCP server that speaks MPA by hand. Every accepted
// connection is passed to serve in its own goroutine; Close waits for them.
type rawListener struct {
	ln         net.Listener
	acceptDone chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	cons       []net.Conn
}

func newRawListener(t *testing.T, serve func(c net.Conn)) *rawListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &rawListener{ln: ln, acceptDone: make(chan struct{})}
	go func() {
		defer close(rl.acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rl.mu.Lock()
			rl.cons = append(rl.cons, c)
			rl.mu.Unlock()
			rl.wg.Add(1)
			go func() {
				defer rl.wg.Done()
				serve(c)
			}()
		}
	}()
	t.Cleanup(rl.Close)
	return rl
}

func (rl *rawListener) Addr() net.Addr { return rl.ln.Addr() }

// Close stops the listener, closes every connection and waits for the
// serve goroutines.
func (rl *rawListener) Close() {
	rl.ln.Close()
	<-rl.acceptDone
	rl.mu.Lock()
	for _, c := range rl.cons {
		c.Close()
	}
	rl.mu.Unlock()
	rl.wg.Wait()
}

// waitFor polls cond until it holds. It is used only for state that has
// no event to wait on (a listener's internal queues).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitQueued(t *testing.T, l *iwarp.Listener, n int) {
	t.Helper()
	waitFor(t, "queued requests", func() bool { return iwarp.ListenerQueued(l) == n })
}

func waitHandshakes(t *testing.T, l *iwarp.Listener, n int) {
	t.Helper()
	waitFor(t, "handshakes", func() bool { return iwarp.ListenerHandshakes(l) == n })
}
