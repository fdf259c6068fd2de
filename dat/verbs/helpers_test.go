//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
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

// recorder is a QPHandler that queues what it is told.
type recorder struct {
	comps chan driver.Completion
	disc  chan error
}

func newRecorder() *recorder {
	return &recorder{comps: make(chan driver.Completion, 4096), disc: make(chan error, 16)}
}

func (r *recorder) Completion(c driver.Completion) { r.comps <- c }
func (r *recorder) Disconnected(err error)         { r.disc <- err }

func (r *recorder) next(t *testing.T) driver.Completion {
	t.Helper()
	select {
	case c := <-r.comps:
		return c
	case <-time.After(waitTimeout):
		t.Fatal("no completion")
	}
	return driver.Completion{}
}

func (r *recorder) disconnected(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.disc:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("no Disconnected call")
	}
	return nil
}

// none checks that no completion is queued.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-r.comps:
		t.Fatalf("unexpected completion %+v", c)
	default:
	}
}

func openTestIA(t *testing.T, d testDev) *IA {
	t.Helper()
	ia, err := Driver{}.Open(context.Background(), []string{d.addr})
	if err != nil {
		t.Fatalf("open %s: %v", d.addr, err)
	}
	t.Cleanup(func() { ia.Close() })
	return ia.(*IA)
}

// end is one side of a test connection: an IA, a PD, a registered buffer
// and a QP.
type end struct {
	ia  *IA
	pd  *PD
	buf []byte
	mr  driver.MR
	qp  *QP
	h   *recorder
}

const bufSize = 64 << 10

func defaultQPConfig(pd driver.PD) driver.QPConfig {
	return driver.QPConfig{
		PD: pd, MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2,
		IRD: 4, ORD: 2, MaxMessageSize: bufSize, MaxRDMASize: bufSize,
	}
}

func newEnd(t *testing.T, d testDev) *end {
	t.Helper()
	e := &end{ia: openTestIA(t, d), h: newRecorder()}
	pd, err := e.ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	e.pd = pd.(*PD)
	e.buf = make([]byte, bufSize)
	e.mr, err = e.pd.Register(e.buf, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := e.ia.CreateQP(defaultQPConfig(e.pd), e.h)
	if err != nil {
		t.Fatal(err)
	}
	e.qp = qp.(*QP)
	t.Cleanup(func() {
		e.qp.Close()
		e.mr.Close()
		e.pd.Close()
	})
	return e
}

// sge names n bytes at offset off of the end's buffer.
func (e *end) sge(off, n int) driver.SGE {
	return driver.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *end) postRecv(t *testing.T, cookie uint64, off, n int) {
	t.Helper()
	if err := e.qp.PostRecv(driver.RecvWR{Cookie: cookie, Local: []driver.SGE{e.sge(off, n)}}); err != nil {
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
		ch <- accepted{req: req, err: req.Accept(ctx, s.qp, pdata)}
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
