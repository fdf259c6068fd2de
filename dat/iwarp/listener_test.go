package iwarp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestListenerAddrEphemeralPort(t *testing.T) {
	leakCheck(t)
	l := listen(t, openIA(t), driver.ListenConfig{})
	a := listenAddr(l)
	if a.Port == 0 || !a.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("listener address %v", a)
	}
}

func TestPortInUse(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	port := uint16(listenAddr(l).Port)
	if _, err := ia.Listen(driver.ListenConfig{Port: port}); !errors.Is(err, driver.ErrPortInUse) {
		t.Fatalf("second listen: %v, want ErrPortInUse", err)
	}
	// A shared listener cannot join a port held without SO_REUSEPORT.
	if _, err := ia.Listen(driver.ListenConfig{Port: port, SharePort: true}); !errors.Is(err, driver.ErrPortInUse) {
		t.Fatalf("shared listen on an exclusive port: %v, want ErrPortInUse", err)
	}
	// After Close the port is free again.
	l.Close()
	listen(t, ia, driver.ListenConfig{Port: port})
}

func TestSharePort(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l1 := listen(t, ia, driver.ListenConfig{SharePort: true})
	port := uint16(listenAddr(l1).Port)
	l2 := listen(t, ia, driver.ListenConfig{Port: port, SharePort: true})
	if listenAddr(l2).Port != int(port) {
		t.Fatalf("second listener on %v, want port %d", l2.Addr(), port)
	}
	if _, err := ia.Listen(driver.ListenConfig{Port: port}); !errors.Is(err, driver.ErrPortInUse) {
		t.Fatalf("exclusive listen on a shared port: %v, want ErrPortInUse", err)
	}

	// A connection lands on one of them; accept it wherever it arrives.
	q := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l1.Addr(), nil)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqs := make(chan driver.Request, 2)
	for _, l := range []driver.Listener{l1, l2} {
		go func() {
			if r, err := l.Accept(actx); err == nil {
				reqs <- r
			}
		}()
	}
	var r driver.Request
	select {
	case r = <-reqs:
	case <-time.After(testTimeout):
		t.Fatal("no request on either listener")
	}
	if _, err := r.Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
	cancel()
}

func TestBacklogFull(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{Backlog: 1})
	first := newQP(t, ia, defaultQPConfig, nil)
	second := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)

	ch1 := connectAsync(ctx, first, l.Addr(), nil)
	r := accept(t, ctx, l) // returned but not settled: still counts
	_, err := second.Connect(ctx, l.Addr(), nil)
	assertNonPeer(t, err)

	if _, err := r.Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch1); res.err != nil {
		t.Fatal(res.err)
	}
	// The slot is free again.
	third := newQP(t, ia, defaultQPConfig, nil)
	ch3 := connectAsync(ctx, third, l.Addr(), nil)
	if err := accept(t, ctx, l).Reject(nil); err != nil {
		t.Fatal(err)
	}
	var rej *driver.RejectError
	if res := waitConnect(t, ch3); !errors.As(res.err, &rej) {
		t.Fatalf("third connect: %v, want a reject", res.err)
	}
}

func TestAbortIsNonPeer(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	q := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l.Addr(), nil)
	r := accept(t, ctx, l)
	if err := r.Abort(); err != nil {
		t.Fatal(err)
	}
	assertNonPeer(t, waitConnect(t, ch).err)
	if err := r.Abort(); err != nil {
		t.Fatalf("second abort: %v", err)
	}
	if err := r.Reject(nil); err == nil {
		t.Fatal("reject after abort succeeded")
	}
}

func TestListenerCloseUnblocksAccept(t *testing.T) {
	leakCheck(t)
	l := listen(t, openIA(t), driver.ListenConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept(context.Background())
		errc <- err
	}()
	l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("accept after close: %v, want net.ErrClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Accept still blocked after Close")
	}
	if _, err := l.Accept(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed listener: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestAcceptContext(t *testing.T) {
	leakCheck(t)
	l := listen(t, openIA(t), driver.ListenConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept: %v, want DeadlineExceeded", err)
	}
}

func TestListenerCloseAbortsPending(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	// A raw initiator lets us see the Request being queued: Accept is not
	// called, so the listener holds the request when it closes.
	c := dialRaw(t, l.Addr())
	c.Write(mpaFrame(keyReq, flagE, 2, v2Block(1, 1)))
	waitQueued(t, l, 1)
	l.Close()
	expectDropped(t, c, testTimeout)

	// Through the provider: the initiator sees a non-peer failure.
	l2 := listen(t, ia, driver.ListenConfig{})
	q := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l2.Addr(), nil)
	waitQueued(t, l2, 1)
	l2.Close()
	assertNonPeer(t, waitConnect(t, ch).err)
}

// TestListenerCloseKeepsReturnedRequests: a request already returned by
// Accept stays usable after the listener closed.
func TestListenerCloseKeepsReturnedRequests(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	q := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l.Addr(), nil)
	r := accept(t, ctx, l)
	l.Close()
	if _, err := r.Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
}

// TestNotifyRequests: once NotifyRequests is called, each request goes
// to the function as it arrives, not to Accept, and counts against the
// backlog until it is settled, as a queued one does.
func TestNotifyRequests(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{Backlog: 1})
	got := make(chan driver.Request, 2)
	l.NotifyRequests(func(r driver.Request) { got <- r })
	first := newQP(t, ia, defaultQPConfig, nil)
	second := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)

	ch1 := connectAsync(ctx, first, l.Addr(), nil)
	var r driver.Request
	select {
	case r = <-got:
	case <-time.After(testTimeout):
		t.Fatal("the request did not reach the function")
	}
	_, err := second.Connect(ctx, l.Addr(), nil) // the backlog is full
	assertNonPeer(t, err)
	if _, err := r.Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch1); res.err != nil {
		t.Fatal(res.err)
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if r, err := l.Accept(actx); err == nil {
		r.Abort()
		t.Fatal("Accept returned a request the function took")
	}
	select {
	case r := <-got:
		r.Abort()
		t.Fatal("the refused request reached the function")
	default:
	}
}
