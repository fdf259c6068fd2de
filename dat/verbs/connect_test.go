//go:build verbs && linux && cgo

package verbs

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestConnectPrivateData connects two IAs on one address with private data
// of the transport's maximum size in both directions, and a short one.
func TestConnectPrivateData(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		max := openTestIA(t, d).Attr().MaxPrivateData
		for _, n := range []int{max, 5, 0} {
			c, s := newEnd(t, d), newEnd(t, d)
			reqPD, repPD := pattern(n, 1), pattern(n, 100)
			l := listenOn(t, s.ia, driver.ListenConfig{})
			done := serve(t, l, s, repPD)
			res, err := c.qp.Connect(testCtx(t), l.Addr(), reqPD)
			if err != nil {
				t.Fatalf("%d bytes: connect: %v", n, err)
			}
			a := <-done
			if a.err != nil {
				t.Fatalf("%d bytes: accept: %v", n, a.err)
			}
			wantPD(t, d, "request", a.req.PrivateData(), reqPD)
			wantPD(t, d, "accept", res.PrivateData, repPD)
			ird, ord := a.req.ReadLimits()
			if cfg := defaultQPConfig(nil); ird != cfg.IRD || ord != cfg.ORD {
				t.Errorf("ReadLimits %d/%d, want the initiator's IRD/ORD %d/%d", ird, ord, cfg.IRD, cfg.ORD)
			}
			cl, cr := c.qp.Addrs()
			sl, sr := s.qp.Addrs()
			if cl == nil || cr == nil || sl == nil || sr == nil {
				t.Fatalf("Addrs: client %v %v, server %v %v", cl, cr, sl, sr)
			}
			if cr.String() != l.Addr().String() || cl.String() != sr.String() || sl.String() != cr.String() {
				t.Errorf("Addrs: client %v->%v, server %v->%v, listener %v", cl, cr, sl, sr, l.Addr())
			}
			if a.req.RemoteAddr().String() != cl.String() {
				t.Errorf("request RemoteAddr %v, client local %v", a.req.RemoteAddr(), cl)
			}
			if err := c.qp.Disconnect(false); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestPrivateDataTooLong(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		l := listenOn(t, s.ia, driver.ListenConfig{})
		big := make([]byte, c.ia.Attr().MaxPrivateData+1)
		if _, err := c.qp.Connect(testCtx(t), l.Addr(), big); err == nil {
			t.Fatal("oversized connect private data accepted")
		}
		// Argument errors happen before anything: the QP is still
		// unconnected, and a request stays pending after a refused
		// Accept or Reject.
		errc := make(chan error, 1)
		go func() {
			_, err := c.qp.Connect(testCtx(t), l.Addr(), nil)
			errc <- err
		}()
		req, err := l.Accept(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := req.Accept(testCtx(t), s.qp, big); err == nil {
			t.Fatal("oversized accept private data accepted")
		}
		if err := req.Reject(big); err == nil {
			t.Fatal("oversized reject private data accepted")
		}
		if err := req.Accept(testCtx(t), s.qp, []byte("ok")); err != nil {
			t.Fatalf("accept after the refused calls: %v", err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("connect: %v", err)
		}
		if err := req.Reject(nil); err == nil {
			t.Error("reject of an accepted request succeeded")
		}
	})
}

func TestReject(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		l := listenOn(t, s.ia, driver.ListenConfig{})
		pd := pattern(c.ia.Attr().MaxPrivateData, 42)
		go func() {
			req, err := l.Accept(testCtx(t))
			if err == nil {
				req.Reject(pd)
			}
		}()
		_, err := c.qp.Connect(testCtx(t), l.Addr(), []byte("hello"))
		rej, ok := isReject(err)
		if !ok {
			t.Fatalf("connect: %v, want a *driver.RejectError", err)
		}
		wantPD(t, d, "reject", rej.PrivateData, pd)
		// A failed connect leaves the QP disconnected; Reset makes it
		// usable again.
		if err := c.qp.Reset(); err != nil {
			t.Fatal(err)
		}
		connectPair(t, c, s)
	})
}

// TestNonPeerRejects covers refusals that are not the consumer's: nobody
// listening, Abort, backlog overflow.
func TestNonPeerRejects(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		check := func(what string, err error) {
			t.Helper()
			if err == nil {
				t.Fatalf("%s: connect succeeded", what)
			}
			if _, ok := isReject(err); ok || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v, want a non-peer reject", what, err)
			}
			t.Logf("%s: %v (unreachable=%v)", what, err, errors.Is(err, driver.ErrUnreachable))
			if err := c.qp.Reset(); err != nil {
				t.Fatal(err)
			}
		}

		port := unusedPort(t, s.ia)
		_, err := c.qp.Connect(testCtx(t), &net.TCPAddr{IP: s.ia.ip, Port: port}, nil)
		check("nobody listening", err)

		l := listenOn(t, s.ia, driver.ListenConfig{})
		go func() {
			if req, err := l.Accept(testCtx(t)); err == nil {
				req.Abort()
			}
		}()
		_, err = c.qp.Connect(testCtx(t), l.Addr(), []byte("x"))
		check("abort", err)

		// Backlog 1: a first request waits unaccepted, the second is refused.
		lb := listenOn(t, s.ia, driver.ListenConfig{Backlog: 1})
		first := newEnd(t, d)
		ctx, cancel := context.WithCancel(context.Background())
		firstDone := make(chan error, 1)
		go func() {
			_, err := first.qp.Connect(ctx, lb.Addr(), nil)
			firstDone <- err
		}()
		waitPending(t, lb, 1)
		_, err = c.qp.Connect(testCtx(t), lb.Addr(), nil)
		check("backlog full", err)
		cancel()
		if err := <-firstDone; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled connect: %v, want context.Canceled", err)
		}
		// Closing the listener refuses the waiting request, which lets
		// an iWARP initiator's teardown finish at once (see doc.go).
		lb.Close()
		if err := first.qp.Reset(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestUnreachable connects to an address the guest has no route to. siw's
// kernel TCP connect fails at once (ENETUNREACH, reported as
// ErrUnreachable). rxe resolves the address through the device the source
// is bound to and the IB CM then retries its REQ for over a minute, so
// there the caller's deadline ends the attempt.
func TestUnreachable(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c := newEnd(t, d)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.qp.Connect(ctx, &net.TCPAddr{IP: net.IPv4(10, 213, 7, 9), Port: 4000}, nil)
		t.Logf("no route: %v", err)
		want := driver.ErrUnreachable
		if d.transport != driver.TransportIWARP {
			want = context.DeadlineExceeded
		}
		if !errors.Is(err, want) {
			t.Fatalf("connect without a route: %v, want %v", err, want)
		}
		if err := c.qp.Reset(); err != nil {
			t.Fatal(err)
		}
	})
}

// waitPending waits until n requests are unsettled on l.
func waitPending(t *testing.T, l *Listener, n int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < waitTimeout; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		p := l.pending
		l.mu.Unlock()
		if p >= n {
			return
		}
	}
	t.Fatalf("listener never had %d pending requests", n)
}

func TestConnectDeadline(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		l := listenOn(t, s.ia, driver.ListenConfig{}) // never accepts
		c.postRecv(t, 1, 0, 64)
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.qp.Connect(ctx, l.Addr(), nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("connect: %v, want DeadlineExceeded", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("deadline reported after %v", el)
		}
		// The receive posted before the attempt is flushed with it.
		if cp := c.h.next(t); cp.Cookie != 1 || cp.Status != driver.StatusFlushed {
			t.Errorf("receive after failed connect: %+v, want cookie 1 flushed", cp)
		}
		l.Close()
		if err := c.qp.Reset(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDisconnectAbortsConnect aborts an establishment in progress.
func TestDisconnectAbortsConnect(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		l := listenOn(t, s.ia, driver.ListenConfig{}) // never accepts
		errc := make(chan error, 1)
		go func() {
			_, err := c.qp.Connect(testCtx(t), l.Addr(), nil)
			errc <- err
		}()
		waitPending(t, l, 1)
		if err := c.qp.Disconnect(false); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrAborted) {
			t.Fatalf("connect: %v, want ErrAborted", err)
		}
		l.Close()
		if err := c.qp.Reset(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResetReconnect(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		for round := 0; round < 2; round++ {
			s.postRecv(t, uint64(round), 0, 16)
			connectPair(t, c, s)
			copy(c.buf, "ping")
			c.postSend(t, driver.SendWR{Cookie: 7, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 4)}})
			if cp := c.h.next(t); cp.Status != driver.StatusSuccess {
				t.Fatalf("round %d: send: %+v", round, cp)
			}
			if cp := s.h.next(t); cp.Status != driver.StatusSuccess || cp.Length != 4 || cp.Cookie != uint64(round) {
				t.Fatalf("round %d: recv: %+v", round, cp)
			}
			if err := c.qp.Disconnect(true); err != nil {
				t.Fatal(err)
			}
			if err := s.h.disconnected(t); err != nil {
				t.Fatalf("round %d: server Disconnected(%v), want nil", round, err)
			}
			for _, e := range []*end{c, s} {
				if err := e.qp.Reset(); err != nil {
					t.Fatal(err)
				}
				if l, r := e.qp.Addrs(); l != nil || r != nil {
					t.Errorf("Addrs after Reset: %v %v", l, r)
				}
			}
			c.h.none(t)
			s.h.none(t)
		}
	})
}
