//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testDev is one RDMA device of the test VM.
type testDev struct {
	name, addr, ifname string
	transport          driver.Transport
}

// testDevices returns the VM's devices, or skips: the tests need real
// kernel RDMA devices, which only the test VM (test/vm) has.
func testDevices(t *testing.T) []testDev {
	t.Helper()
	if os.Getenv("IN_RDMA_VM") != "1" {
		t.Skip("needs the RDMA test VM with rxe0 and siw0: build with `go test -c -tags verbs` and run the binary via test/vm/run.sh (IN_RDMA_VM=1)")
	}
	return []testDev{
		{"rxe", os.Getenv("RDMA_RXE_ADDR"), os.Getenv("RDMA_RXE_IF"), driver.TransportRoCE},
		{"siw", os.Getenv("RDMA_SIW_ADDR"), os.Getenv("RDMA_SIW_IF"), driver.TransportIWARP},
	}
}

// forEachDevice runs fn as a subtest per device.
func forEachDevice(t *testing.T, fn func(t *testing.T, d testDev)) {
	for _, d := range testDevices(t) {
		t.Run(d.name, func(t *testing.T) { fn(t, d) })
	}
}

const waitTimeout = 20 * time.Second // TCG guests are slow

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// recorder takes a QP's completions by polling its CQ, as package dat's
// waiter does, and its OnDisconnect calls.
type recorder struct {
	cq   *CQ
	got  []driver.Completion // polled, not yet taken
	disc chan error
}

func newRecorder(cq *CQ) *recorder { return &recorder{cq: cq, disc: make(chan error, 16)} }

func (r *recorder) onDisconnect(err error) { r.disc <- err }

// poll moves what the CQ holds now into got.
func (r *recorder) poll() {
	var buf [8]driver.Completion // small, so that Poll is asked for less than it holds
	for {
		n := r.cq.Poll(buf[:])
		r.got = append(r.got, buf[:n]...)
		if n < len(buf) {
			return
		}
	}
}

// next returns the next completion, waiting in CQ.Wait for it.
func (r *recorder) next(t *testing.T) driver.Completion {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for len(r.got) == 0 {
		r.poll()
		if len(r.got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
		if err := r.cq.Wait(deadline); err != nil {
			t.Fatalf("CQ wait: %v", err)
		}
	}
	c := r.got[0]
	r.got = r.got[1:]
	return c
}

func (r *recorder) disconnected(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.disc:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("no OnDisconnect call")
	}
	return nil
}

// none checks that no completion can be polled.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	r.poll()
	if len(r.got) > 0 {
		t.Fatalf("unexpected completions %+v", r.got)
	}
}

// iaOf unwraps an IA of this package.
func iaOf(t *testing.T, x driver.IA) *IA {
	t.Helper()
	switch ia := x.(type) {
	case *IA:
		return ia
	case srqIA:
		return ia.IA
	}
	t.Fatalf("IA of type %T", x)
	return nil
}

func openTestIA(t *testing.T, d testDev) *IA {
	t.Helper()
	ia, err := Driver{}.Open(context.Background(), []string{d.addr})
	if err != nil {
		t.Fatalf("open %s: %v", d.addr, err)
	}
	t.Cleanup(func() { ia.Close() })
	return iaOf(t, ia)
}

// end is one side of a test connection: an IA, a PD, a registered buffer,
// a CQ for both queues and a QP.
type end struct {
	ia  *IA
	pd  *PD
	dpd driver.PD // as AllocPD returned it
	buf []byte
	mr  driver.MR
	cq  *CQ
	qp  *QP
	dqp driver.QP // as CreateQP returned it
	h   *recorder
	tag uint32
}

const bufSize = 64 << 10

func defaultQPConfig(pd driver.PD) driver.QPConfig {
	return driver.QPConfig{
		PD: pd, MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2,
		IRD: 4, ORD: 2, MaxMessageSize: bufSize, MaxRDMASize: bufSize,
	}
}

var nextTag atomic.Uint32

func newEnd(t *testing.T, d testDev) *end {
	t.Helper()
	return newEndOn(t, openTestIA(t, d))
}

// newEndOn is newEnd on an IA the test opened.
func newEndOn(t *testing.T, ia *IA) *end {
	t.Helper()
	e := &end{ia: ia}
	e.dpd, e.pd = allocPD(t, e.ia)
	e.buf = make([]byte, bufSize)
	var err error
	e.mr, err = e.pd.Register(e.buf, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := e.ia.CreateCQ(driver.CQConfig{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq.(*CQ)
	e.h = newRecorder(e.cq)
	e.renew(t, defaultQPConfig(e.dpd))
	t.Cleanup(func() {
		e.qp.Close()
		e.cq.Close()
		e.mr.Close()
	})
	return e
}

// allocPD allocates a PD on ia, closed when the test ends; it returns
// the PD as package dat holds it and as this package's type.
func allocPD(t *testing.T, ia *IA) (driver.PD, *PD) {
	t.Helper()
	dpd, err := ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := pdOf(dpd)
	t.Cleanup(func() { pd.Close() })
	return dpd, pd
}

// renew replaces the end's QP by a fresh one on the same CQ (a QP
// connects once).
func (e *end) renew(t *testing.T, cfg driver.QPConfig) {
	t.Helper()
	if e.qp != nil {
		if err := e.qp.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e.tag = nextTag.Add(1)
	cfg.SendCQ, cfg.RecvCQ, cfg.Tag, cfg.OnDisconnect = e.cq, e.cq, e.tag, e.h.onDisconnect
	qp, err := e.ia.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.dqp = qp
	e.qp, _ = qpOf(qp)
}

// sge names n bytes at offset off of the end's buffer.
func (e *end) sge(off, n int) driver.SGE {
	return driver.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *end) postRecv(t *testing.T, id uint64, off, n int) {
	t.Helper()
	if err := e.qp.PostRecv(driver.RecvWR{ID: id, Local: []driver.SGE{e.sge(off, n)}}); err != nil {
		t.Fatalf("post recv: %v", err)
	}
}

func (e *end) postSend(t *testing.T, wr driver.SendWR) {
	t.Helper()
	if err := e.qp.PostSend(wr); err != nil {
		t.Fatalf("post send: %v", err)
	}
}

func listenOn(t *testing.T, ia *IA, cfg driver.ListenConfig) *Listener {
	t.Helper()
	l, err := ia.Listen(cfg)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*Listener)
}

// accepted is what the passive side saw.
type accepted struct {
	req driver.Request
	res driver.ConnectResult
	err error
}

// serve accepts one request on l with s's QP, answering with pdata, and
// reports it on the returned channel.
func serve(t *testing.T, l *Listener, s *end, pdata []byte) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		req, err := l.Accept(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		res, err := req.Accept(ctx, s.dqp, pdata)
		ch <- accepted{req: req, res: res, err: err}
	}()
	return ch
}

// connectPair connects c to s through a fresh listener on s's IA.
func connectPair(t *testing.T, c, s *end) {
	t.Helper()
	l := listenOn(t, s.ia, driver.ListenConfig{})
	done := serve(t, l, s, nil)
	if _, err := c.qp.Connect(testCtx(t), l.Addr(), nil); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if a := <-done; a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}
}

// pattern returns n bytes that differ per position and seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// wantPD compares received private data with what was sent, allowing the
// IB CM's zero padding to 56 bytes.
func wantPD(t *testing.T, d testDev, what string, got, sent []byte) {
	t.Helper()
	if d.transport == driver.TransportIWARP {
		if !bytes.Equal(got, sent) {
			t.Fatalf("%s private data: got %x, want %x", what, got, sent)
		}
		return
	}
	if len(got) != maxPrivateDataIB || !bytes.Equal(got[:len(sent)], sent) || !allZero(got[len(sent):]) {
		t.Fatalf("%s private data: got %d bytes %x, want %x zero-padded to %d", what, len(got), got, sent, maxPrivateDataIB)
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// unusedPort returns a port nobody listens on (bound and released by a
// listener of ia).
func unusedPort(t *testing.T, ia *IA) int {
	t.Helper()
	l, err := ia.Listen(driver.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func isReject(err error) (*driver.RejectError, bool) {
	var rej *driver.RejectError
	ok := errors.As(err, &rej)
	return rej, ok
}
