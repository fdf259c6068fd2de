//go:build linux

package iwarp_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// fullListener is a TCP listener on 127.0.0.1 whose accept queue (listen
// backlog 0) holds one connection nobody has accepted, so that the kernel
// drops the next SYN: a connect to it stays in progress until the queue
// has room and the SYN is sent again (after about a second). It exercises
// an initiator whose MPA Request could not go out with the connect.
func fullListener(t *testing.T) (ln net.Listener, filler net.Conn) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "full listener")
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	if ln, err = net.FileListener(f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	filler = dialRaw(t, ln.Addr())
	return ln, filler
}

// TestConnectDeadlineWhileConnecting: a deadline that passes while the
// TCP connect is still in progress is the caller's deadline, not an
// unreachable peer.
func TestConnectDeadlineWhileConnecting(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	ln, _ := fullListener(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := q.Connect(ctx, ln.Addr(), nil)
	t.Logf("connect: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrUnreachable) {
		t.Fatalf("connect: %v, want DeadlineExceeded and not ErrUnreachable", err)
	}
}

// TestConnectRequestAfterConnect: an initiator whose connect is still in
// progress when it would send its MPA Request sends it, whole, once the
// connection is up, and completes the exchange.
func TestConnectRequestAfterConnect(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	ln, filler := fullListener(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(testCtx(t), q, ln.Addr(), []byte("pd"))
	// Give the connect time to send its SYN into the full queue, then
	// make room: the SYN sent again gets through.
	time.Sleep(100 * time.Millisecond)
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	filler.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := readFrame(c)
	if err != nil || f.key != keyReq || string(f.pd) != string(v2Block(1, 1))+"pd" {
		t.Fatalf("request %+v, %v", f, err)
	}
	if _, err := c.Write(mpaFrame(keyRep, flagE, 2, v2Block(1, 1))); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatalf("connect: %v", res.err)
	}
	q.Disconnect(false)
}
