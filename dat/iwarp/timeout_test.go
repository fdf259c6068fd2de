package iwarp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// silentResponder accepts TCP connections, reads the MPA Request, reports
// it on the returned channel and then never answers.
func silentResponder(t *testing.T) (*rawListener, <-chan []byte) {
	t.Helper()
	got := make(chan []byte, 4)
	rl := newRawListener(t, func(c net.Conn) {
		f, err := readFrame(c)
		if err != nil {
			return
		}
		got <- append([]byte(f.key), f.pd...)
		var b [1]byte
		c.Read(b[:]) // until the initiator or the test closes
	})
	return rl, got
}

func TestConnectDeadline(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	rl, got := silentResponder(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := q.Connect(ctx, rl.Addr(), []byte("pd"))
	t.Logf("connect: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect: %v, want DeadlineExceeded", err)
	}
	if errors.Is(err, driver.ErrUnreachable) {
		t.Fatalf("connect: %v: a consumer deadline is not unreachable", err)
	}
	select {
	case b := <-got:
		if want := keyReq + string(v2Block(1, 1)) + "pd"; string(b) != want {
			t.Fatalf("request %q, want %q", b, want)
		}
	default:
		t.Fatal("the responder never saw the MPA Request")
	}
}

func TestConnectCancel(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	rl, got := silentResponder(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch := connectAsync(ctx, q, rl.Addr(), nil)
	select {
	case <-got:
	case <-time.After(testTimeout):
		t.Fatal("no MPA Request")
	}
	cancel()
	if err := waitConnect(t, ch).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("connect: %v, want Canceled", err)
	}
}

func TestReplyTimeoutIsUnreachable(t *testing.T) {
	leakCheck(t)
	ia := openIA(t, "rep_timeout=200ms")
	rl, _ := silentResponder(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	start := time.Now()
	_, err := q.Connect(context.Background(), rl.Addr(), nil)
	t.Logf("connect after %v: %v", time.Since(start), err)
	if !errors.Is(err, driver.ErrUnreachable) {
		t.Fatalf("connect: %v, want ErrUnreachable", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect: %v: the provider timeout is not the consumer's", err)
	}
	// A consumer deadline later than the provider timeout does not change
	// that.
	q = newQP(t, ia, defaultQPConfig, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := q.Connect(ctx, rl.Addr(), nil); !errors.Is(err, driver.ErrUnreachable) {
		t.Fatalf("connect with a long deadline: %v, want ErrUnreachable", err)
	}
}

// TestDisconnectAbortsConnect: a local Disconnect while Connect waits for
// the Reply makes Connect return ErrAborted at once.
func TestDisconnectAbortsConnect(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	rl, got := silentResponder(t)
	for _, close := range []bool{false, true} {
		q := newQP(t, ia, defaultQPConfig, nil)
		ch := connectAsync(context.Background(), q, rl.Addr(), nil)
		select {
		case <-got:
		case <-time.After(testTimeout):
			t.Fatal("no MPA Request")
		}
		if close {
			q.Close()
		} else if err := q.Disconnect(false); err != nil {
			t.Fatal(err)
		}
		err := waitConnect(t, ch).err
		if !errors.Is(err, iwarp.ErrAborted) {
			t.Fatalf("connect: %v, want ErrAborted", err)
		}
		if !close {
			// The aborted QP is over: a QP connects at most once.
			if _, err := q.Connect(context.Background(), rl.Addr(), nil); !errors.Is(err, driver.ErrNotConnected) {
				t.Fatalf("connect after an abort: %v, want ErrNotConnected", err)
			}
		}
	}
}

// TestAcceptAfterInitiatorGaveUp: the initiator closes before the consumer
// accepts. Accept still succeeds (the Reply goes into the socket) and the
// QP then reports the close.
func TestAcceptAfterInitiatorGaveUp(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	rec := newSink()
	q := newQP(t, ia, defaultQPConfig, rec)
	c := dialRaw(t, l.Addr())
	c.Write(mpaFrame(keyReq, flagE, 2, v2Block(1, 1)))
	r := accept(t, ctx, l)
	c.Close()
	if _, err := r.Accept(ctx, q, nil); err != nil {
		// The kernel may already know the peer is gone.
		t.Logf("accept: %v", err)
		return
	}
	if err := rec.waitDisconnected(t); err != nil {
		t.Logf("OnDisconnect(%v)", err)
	}
}
