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
		if _, err := req.Accept(testCtx(t), s.dqp, big); err == nil {
			t.Fatal("oversized accept private data accepted")
		}
		if err := req.Reject(big); err == nil {
			t.Fatal("oversized reject private data accepted")
		}
		if _, err := req.Accept(testCtx(t), s.dqp, []byte("ok")); err != nil {
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
			c.renew(t, defaultQPConfig(c.dpd))
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
		if err := first.qp.Close(); err != nil {
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
	})
}

// TestReconnect connects twice with fresh QPs on the same CQs: the second
// connection's completions carry the new QP's tag, and nothing of the
// first one's shows up.
func TestReconnect(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		for round := 0; round < 2; round++ {
			if round > 0 {
				c.renew(t, defaultQPConfig(c.dpd))
				s.renew(t, defaultQPConfig(s.dpd))
			}
			s.postRecv(t, uint64(round), 0, 16)
			connectPair(t, c, s)
			copy(c.buf, "ping")
			c.postSend(t, driver.SendWR{ID: 7, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 4)}})
			if cp := c.h.next(t); cp.Status != driver.StatusSuccess || cp.WRID != 7 || cp.QPTag != c.tag {
				t.Fatalf("round %d: send: %+v (tag %d)", round, cp, c.tag)
			}
			if cp := s.h.next(t); cp.Status != driver.StatusSuccess || cp.Length != 4 || cp.WRID != uint64(round) || cp.QPTag != s.tag {
				t.Fatalf("round %d: recv: %+v (tag %d)", round, cp, s.tag)
			}
			if err := c.qp.Disconnect(true); err != nil {
				t.Fatal(err)
			}
			if err := s.h.disconnected(t); err != nil {
				t.Fatalf("round %d: server OnDisconnect(%v), want nil", round, err)
			}
			c.h.none(t)
			s.h.none(t)
		}
	})
}
