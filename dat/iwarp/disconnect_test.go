package iwarp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestPeerGracefulCloseDisconnectedOnce(t *testing.T) {
	leakCheck(t)
	ia := openIA(t, "close_timeout=5s")
	p := connectPair(t, ia, ia, defaultQPConfig, defaultQPConfig)

	start := time.Now()
	if err := p.resp.Disconnect(true); err != nil {
		t.Fatal(err)
	}
	// The initiator closes its side as soon as it sees the FIN, so the
	// graceful disconnect does not sit out close_timeout.
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("graceful disconnect took %v", d)
	}
	if err := p.iniRec.waitDisconnected(t); err != nil {
		t.Fatalf("OnDisconnect(%v), want nil for an orderly close", err)
	}
	if err := p.resp.Disconnect(true); err != nil {
		t.Fatalf("second disconnect: %v", err)
	}
	if err := p.ini.Disconnect(false); err != nil {
		t.Fatalf("disconnect after peer close: %v", err)
	}
	p.ini.Close()
	p.resp.Close()
	ia.Close()
	goleak.VerifyNone(t) // every OnDisconnect call has been made now
	if n := p.iniRec.ndisc.Load(); n != 1 {
		t.Fatalf("initiator got %d OnDisconnect calls, want 1", n)
	}
	if n := p.respRec.ndisc.Load(); n != 0 {
		t.Fatalf("responder got %d OnDisconnect calls after its own Disconnect, want 0", n)
	}
}

func TestPeerAbruptCloseDisconnectedWithError(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	p := connectPair(t, ia, ia, defaultQPConfig, defaultQPConfig)
	if err := p.ini.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	err := p.respRec.waitDisconnected(t)
	t.Logf("OnDisconnect(%v)", err)
	if err == nil {
		t.Fatal("OnDisconnect(nil) after a reset, want an error")
	}
	p.ini.Close()
	p.resp.Close()
	ia.Close()
	goleak.VerifyNone(t)
	if n := p.iniRec.ndisc.Load(); n != 0 {
		t.Fatalf("initiator got %d OnDisconnect calls after its own Disconnect", n)
	}
	if n := p.respRec.ndisc.Load(); n != 1 {
		t.Fatalf("responder got %d OnDisconnect calls, want 1", n)
	}
}

func TestCloseConnectedQP(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	p := connectPair(t, ia, ia, defaultQPConfig, defaultQPConfig)
	if err := p.resp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.resp.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := p.iniRec.waitDisconnected(t); err == nil {
		t.Fatal("OnDisconnect(nil) after the peer QP was destroyed, want an error")
	}
	if err := p.resp.Disconnect(true); err == nil {
		t.Fatal("disconnect of a closed QP succeeded")
	}
}

// TestGracefulDisconnectTimeout: the peer never closes its side, so a
// graceful Disconnect gives up after close_timeout.
func TestGracefulDisconnectTimeout(t *testing.T) {
	leakCheck(t)
	ia := openIA(t, "close_timeout=200ms")
	sawEOF := make(chan struct{}, 1)
	rl := newRawListener(t, func(c net.Conn) {
		if _, err := readFrame(c); err != nil {
			return
		}
		c.Write(mpaFrame(keyRep, flagE, 2, v2Block(1, 1)))
		if _, err := io.Copy(io.Discard, c); err == nil {
			sawEOF <- struct{}{} // our FIN; keep our side open
		}
		var b [1]byte
		c.Read(b[:]) // returns when the test closes the raw listener
	})
	rec := newSink()
	q := newQP(t, ia, defaultQPConfig, rec)
	if _, err := q.Connect(testCtx(t), rl.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := q.Disconnect(true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("graceful disconnect returned after %v, before close_timeout", d)
	}
	select {
	case <-sawEOF:
	case <-time.After(testTimeout):
		t.Fatal("peer never saw the FIN")
	}
	q.Close()
	rl.Close()
	goleak.VerifyNone(t)
	if n := rec.ndisc.Load(); n != 0 {
		t.Fatalf("%d OnDisconnect calls after a local Disconnect", n)
	}
}

// TestAbruptHurriesGraceful: an abrupt Disconnect cuts short a graceful
// one that is waiting for the peer.
func TestAbruptHurriesGraceful(t *testing.T) {
	leakCheck(t)
	ia := openIA(t, "close_timeout=1m")
	rl := newRawListener(t, func(c net.Conn) {
		if _, err := readFrame(c); err != nil {
			return
		}
		c.Write(mpaFrame(keyRep, flagE, 2, v2Block(1, 1)))
		io.Copy(io.Discard, c)
		var b [1]byte
		c.Read(b[:])
	})
	q := newQP(t, ia, defaultQPConfig, nil)
	if _, err := q.Connect(testCtx(t), rl.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Disconnect(true) }()
	// Whether or not the graceful call has started waiting, the abrupt
	// one returns only when the socket is closed, and so does the
	// graceful one right after.
	if err := q.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("graceful Disconnect still waiting after an abrupt one")
	}
}

// TestUnfinishedWorkDropped: receives posted before the connection
// existed survive establishment; when the peer ends the connection they
// are dropped without a completion (package dat flushes them), and work
// posted afterwards is accepted and dropped as well.
func TestUnfinishedWorkDropped(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	ctx := testCtx(t)
	l := listen(t, ia, driver.ListenConfig{})
	rec := newSink()
	ini := newQP(t, ia, defaultQPConfig, rec)
	resp := newQP(t, ia, defaultQPConfig, nil)
	mustPost(t, resp.PostRecv(driver.RecvWR{ID: 1}))
	for i := uint64(1); i <= 3; i++ {
		if err := ini.PostRecv(driver.RecvWR{ID: i}); err != nil {
			t.Fatal(err)
		}
	}
	ch := connectAsync(ctx, ini, l.Addr(), nil)
	if _, err := accept(t, ctx, l).Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
	// The first receive is there: a Send from the responder lands in it
	// (after the initiator's first FPDU: the startup rule).
	mustPost(t, ini.PostSend(driver.SendWR{ID: 10, Op: driver.OpSend}))
	mustPost(t, resp.PostSend(driver.SendWR{ID: 11, Op: driver.OpSend}))
	rec.expectSuccess(t, 1, driver.OpRecv, 0)
	resp.Disconnect(true)
	if err := rec.waitDisconnected(t); err != nil {
		t.Fatal(err)
	}
	if err := ini.PostRecv(driver.RecvWR{ID: 4}); err != nil {
		t.Fatal(err)
	}
	if err := ini.PostSend(driver.SendWR{ID: 5, Op: driver.OpRDMARead}); err != nil {
		t.Fatal(err)
	}
	if err := ini.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	rec.none(t, 20*time.Millisecond)
	ini.Close()
	resp.Close()
	ia.Close()
	goleak.VerifyNone(t)
	if n := rec.ndisc.Load(); n != 1 {
		t.Fatalf("%d OnDisconnect calls, want 1", n)
	}
}

func TestPostRecvLimits(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	q := newQP(t, ia, driver.QPConfig{MaxRecvWR: 2, MaxRecvSGE: 1}, nil)
	for i := 0; i < 2; i++ {
		if err := q.PostRecv(driver.RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PostRecv(driver.RecvWR{}); !errors.Is(err, driver.ErrQueueFull) {
		t.Fatalf("third receive: %v, want ErrQueueFull", err)
	}
	if err := q.PostSend(driver.SendWR{}); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("send on an unconnected QP: %v, want ErrNotConnected", err)
	}
}

// TestConnectOnce: a QP connects at most once (package dat creates a new
// QP to connect again), can be modified only before, and a cancelled
// Connect leaves it unconnected.
func TestConnectOnce(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	rec := newSink()
	q := newQP(t, ia, defaultQPConfig, rec)

	if err := q.Disconnect(true); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("disconnect of an unconnected QP: %v, want ErrNotConnected", err)
	}
	if err := q.Modify(driver.QPConfig{MaxRecvWR: 4, IRD: 2, ORD: 2}); err != nil {
		t.Fatalf("modify before connecting: %v", err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.Connect(ctx2, l.Addr(), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("connect with a cancelled context: %v", err)
	}
	q = newQP(t, ia, defaultQPConfig, rec)
	resp := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l.Addr(), nil)
	if _, err := accept(t, ctx, l).Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	res := waitConnect(t, ch)
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.res.Local == nil || res.res.Remote.String() != l.Addr().String() {
		t.Fatalf("connection addresses %v -> %v", res.res.Local, res.res.Remote)
	}
	if err := q.Modify(defaultQPConfig); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("modify of a connected QP: %v, want ErrNotConnected", err)
	}
	if _, err := q.Connect(ctx, l.Addr(), nil); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("connect of a connected QP: %v, want ErrNotConnected", err)
	}
	resp.Close()
	rec.waitDisconnected(t)
	if _, ok := q.ConnInfo(); !ok {
		t.Fatal("conn info gone after the connection ended")
	}
	if _, err := q.Connect(ctx, l.Addr(), nil); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("reconnect of a QP: %v, want ErrNotConnected", err)
	}
	if err := q.Modify(defaultQPConfig); !errors.Is(err, driver.ErrNotConnected) {
		t.Fatalf("modify of a disconnected QP: %v, want ErrNotConnected", err)
	}
}
