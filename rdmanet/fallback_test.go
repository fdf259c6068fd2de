package rdmanet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fallback tests run on the pure-Go iWARP provider: what they test is
// how its MPA exchange meets plain TCP servers and clients on one port.

// tcpServer runs handle on each connection accepted on a loopback TCP
// listener, numbering them from 0, until the test ends.
func tcpServer(t *testing.T, handle func(n int, c net.Conn)) string {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(n, c)
			}()
		}
	}()
	t.Cleanup(func() { tl.Close(); wg.Wait() })
	return tl.Addr().String()
}

// fallbackDial dials addr with FallbackTCP and wants a *FallbackConn for
// one of the reasons in want; it returns it and the time the dial took.
func fallbackDial(t *testing.T, d Dialer, addr string, want ...FallbackReason) (*FallbackConn, time.Duration) {
	t.Helper()
	d.IA, d.FallbackTCP = "iwarp", true
	before := make(map[FallbackReason]uint64)
	for _, r := range want {
		before[r] = fallbacks[r].Load()
	}
	start := time.Now()
	c, err := d.Dial("rdma", addr)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("dial took %v: %v", took, err)
	}
	t.Cleanup(func() { c.Close() })
	fc, ok := c.(*FallbackConn)
	if !ok {
		t.Fatalf("dial returned %T, want *FallbackConn", c)
	}
	if _, ok := before[fc.Reason]; !ok {
		t.Fatalf("reason %v (%v), want one of %v", fc.Reason, fc.Err, want)
	}
	if got := fallbacks[fc.Reason].Load(); got <= before[fc.Reason] {
		t.Errorf("%v fallbacks: %d before the dial, %d after", fc.Reason, before[fc.Reason], got)
	}
	if n := Snapshot().Fallbacks[fc.Reason.String()]; n == 0 {
		t.Errorf("Snapshot().Fallbacks[%q] = 0", fc.Reason)
	}
	return fc, took
}

// TestFallbackHTTP: a FallbackTCP dial to a net/http server falls back
// quickly, with or without a Timeout, and HTTP works over the connection.
// The RDMA attempt's connection is closed at once. What the server does
// with the MPA Request depends on its bytes, which carry the dialer's ring
// keys: usually it waits for the end of a request line (the dialer times
// out its wait), but when a key holds a newline byte it answers 400 at
// once (the dialer sees a peer that is not RDMA). Both fall back.
func TestFallbackHTTP(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{}, 16)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over tcp") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				closed <- struct{}{}
			}
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(tl) }()
	defer func() { srv.Close(); <-done }()

	for _, timeout := range []time.Duration{0, 10 * time.Second} {
		t.Run("timeout="+timeout.String(), func(t *testing.T) {
			fc, took := fallbackDial(t, Dialer{Timeout: timeout}, tl.Addr().String(), ReasonTimedOut, ReasonNotRDMAPeer)
			t.Logf("fell back to TCP in %v (%v)", took, fc.Err)
			if took > 5*time.Second {
				t.Errorf("fallback took %v", took)
			}
			// The RDMA attempt's connection ends without waiting for
			// the server's read timeout (it has none).
			select {
			case <-closed:
			case <-time.After(2 * time.Second):
				t.Error("the RDMA attempt's connection is still open at the server")
			}
			io.WriteString(fc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(fc), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "hello over tcp" {
				t.Errorf("GET: %s %q", resp.Status, b)
			}
			<-closed // the fallback connection, closed by the server
		})
	}
}

// TestFallbackSilentServer: a server that never answers gets the RDMA
// attempt's share of the dial's time only; the abandoned connection is
// closed by the dialer.
func TestFallbackSilentServer(t *testing.T) {
	attemptEnded := make(chan time.Time, 1)
	addr := tcpServer(t, func(n int, c net.Conn) {
		if n == 0 {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			io.Copy(io.Discard, c) // silent; returns when the dialer closes
			attemptEnded <- time.Now()
			return
		}
		io.WriteString(c, "tcp")
	})
	fc, took := fallbackDial(t, Dialer{Timeout: 400 * time.Millisecond}, addr, ReasonTimedOut)
	dialed := time.Now()
	t.Logf("fell back in %v", took)
	// Half the 400ms went to RDMA, and the rest was there for TCP.
	if took < 150*time.Millisecond {
		t.Errorf("fallback took %v, want about 200ms", took)
	}
	if !errors.Is(fc.Err, context.DeadlineExceeded) {
		t.Errorf("Err = %v", fc.Err)
	}
	select {
	case at := <-attemptEnded:
		if d := at.Sub(dialed); d > time.Second {
			t.Errorf("the attempt's connection ended %v after the dial returned", d)
		}
	case <-time.After(3 * time.Second):
		t.Error("the RDMA attempt's connection is still open")
	}
	if b, _ := io.ReadAll(fc); string(b) != "tcp" {
		t.Errorf("read %q", b)
	}
}

// TestFallbackGarbage: a server that answers the MPA Request with
// something else is not an RDMA peer; the dial falls back at once.
func TestFallbackGarbage(t *testing.T) {
	addr := tcpServer(t, func(n int, c net.Conn) {
		io.WriteString(c, "SSH-2.0-test\r\n")
		if n > 0 {
			io.Copy(c, c)
		}
	})
	fc, took := fallbackDial(t, Dialer{}, addr, ReasonNotRDMAPeer)
	t.Logf("fell back in %v: %v", took, fc.Err)
	if took >= FallbackWait {
		t.Errorf("fallback took %v: it should not wait for a timeout", took)
	}
	io.WriteString(fc, "ping")
	buf := make([]byte, len("SSH-2.0-test\r\nping"))
	if _, err := io.ReadFull(fc, buf); err != nil || string(buf) != "SSH-2.0-test\r\nping" {
		t.Errorf("read %q, %v", buf, err)
	}
}

// TestFallbackNoListener: a reset before any answer (a port nobody
// listens on, or a full listener) is ReasonNoListener, at once; a closed
// port leaves TCP nothing either, and the dial fails with the refusal.
func TestFallbackNoListener(t *testing.T) {
	addr := tcpServer(t, func(n int, c net.Conn) {
		if n == 0 {
			c.(*net.TCPConn).SetLinger(0) // reset, as a full listener does
			return
		}
		io.WriteString(c, "tcp")
	})
	fc, took := fallbackDial(t, Dialer{}, addr, ReasonNoListener)
	if took >= FallbackWait {
		t.Errorf("fallback took %v: it should not wait for a timeout", took)
	}
	if b, _ := io.ReadAll(fc); string(b) != "tcp" {
		t.Errorf("read %q", b)
	}

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := tl.Addr().String()
	tl.Close()
	d := Dialer{IA: "iwarp", FallbackTCP: true}
	start := time.Now()
	_, err = d.Dial("rdma", closedAddr)
	if !errors.Is(err, syscall.ECONNREFUSED) || dialFallbackReason(err) != ReasonNoListener {
		t.Errorf("dial to a closed port: %v", err)
	}
	if took := time.Since(start); took >= FallbackWait {
		t.Errorf("dial to a closed port took %v", took)
	}
}

// TestListenerFallbackTCP: one port serves rdmanet clients and plain TCP
// clients, whether they speak first or wait for the server, every byte
// intact both ways.
func TestListenerFallbackTCP(t *testing.T) {
	sink, log := newLogSink()
	nl, err := (&ListenConfig{IA: "iwarp", FallbackTCP: true, Logger: log}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 8)
	serve(t, nl, func(c net.Conn) {
		defer c.Close()
		accepted <- c
		if _, ok := c.(*FallbackConn); ok {
			io.WriteString(c, "greeting\n") // a server that speaks first
		}
		io.Copy(c, c)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	})
	addr := nl.Addr().String()
	before := fallbacks[ReasonPeerIsTCP].Load()

	// An rdmanet client.
	rc, err := (&Dialer{IA: "iwarp", Timeout: 5 * time.Second}).Dial("rdma", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rc.(*Conn); !ok {
		t.Fatalf("dialed %T", rc)
	}
	if c := <-accepted; func() bool { _, ok := c.(*Conn); return !ok }() {
		t.Errorf("accepted %T for an rdmanet client", c)
	}
	echo(t, rc, "", randomBytes(t, 1<<20))
	rc.Close()

	// A TCP client that speaks first, with bytes that begin like an MPA
	// Request and then differ, and one that waits for the greeting.
	for _, first := range [][]byte{append([]byte("MPA ID Req Fr0me"), randomBytes(t, 1<<20)...), nil} {
		tc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			line, err := bufio.NewReader(tc).ReadString('\n')
			if err != nil || line != "greeting\n" {
				t.Fatalf("greeting %q, %v", line, err)
			}
			first = []byte("after the greeting")
			echo(t, tc, "", first)
		} else {
			echo(t, tc, "greeting\n", first)
		}
		tc.Close()
		c := <-accepted
		fc, ok := c.(*FallbackConn)
		if !ok || fc.Reason != ReasonPeerIsTCP || fc.Err != nil {
			t.Errorf("accepted %T %+v for a TCP client", c, c)
		}
	}
	if got := fallbacks[ReasonPeerIsTCP].Load(); got < before+2 {
		t.Errorf("peer-is-tcp fallbacks: %d before, %d after", before, got)
	}
	if recs := sink.records("rdmanet: accepted a TCP client"); len(recs) != 2 || recs[0]["reason"] != "peer-is-tcp" || recs[0]["level"] != "INFO" {
		t.Errorf("log records: %v", recs)
	}
	var table strings.Builder
	Snapshot().WriteTable(&table)
	if !strings.Contains(table.String(), "fallbacks to TCP:") || !strings.Contains(table.String(), "peer-is-tcp ") {
		t.Errorf("table without the fallbacks:\n%s", table.String())
	}
}

// echo writes p to c on a goroutine of its own while it reads back
// prefix and p, and checks them.
func echo(t *testing.T, c net.Conn, prefix string, p []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(p)
		errc <- err
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(prefix)+len(p))
	_, err := io.ReadFull(c, got)
	if werr := <-errc; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append([]byte(prefix), p...)) {
		t.Fatalf("echo of %d bytes differs", len(p))
	}
	c.SetReadDeadline(time.Time{})
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestFallbackVersion: an rdmanet server that does not speak the
// dialer's version refuses it, and the dialer falls back at once; with
// FallbackTCP the same listener takes the TCP connection.
func TestFallbackVersion(t *testing.T) {
	nl, err := (&ListenConfig{IA: "iwarp", FallbackTCP: true}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nl, func(c net.Conn) {
		defer c.Close()
		if fc, ok := c.(*FallbackConn); ok {
			io.WriteString(fc, fc.Reason.String())
		}
	})
	setHook(&testHelloHook, func(b []byte) []byte { b[4] = 9; return b })
	defer func() { testHelloHook.Store(nil) }()
	fc, took := fallbackDial(t, Dialer{}, nl.Addr().String(), ReasonVersion)
	testHelloHook.Store(nil)
	if took >= FallbackWait {
		t.Errorf("fallback took %v: it should not wait for a timeout", took)
	}
	var he *HandshakeError
	if !errors.As(fc.Err, &he) || he.Reason != RejectVersion {
		t.Errorf("Err = %v", fc.Err)
	}
	if b, _ := io.ReadAll(fc); string(b) != "peer-is-tcp" {
		t.Errorf("read %q", b)
	}
}

// TestListenerCloseFallback: Close closes TCP clients not yet accepted.
func TestListenerCloseFallback(t *testing.T) {
	nl, err := (&ListenConfig{IA: "iwarp", FallbackTCP: true}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := nl.(*Listener)
	tc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, "not MPA")
	for deadline := time.Now().Add(5 * time.Second); l.info(time.Now()).Ready == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.Close()
			t.Fatal("the TCP client was never queued")
		}
	}
	l.Close()
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := tc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read %d, %v: the queued connection was not closed", n, err)
	}
}
