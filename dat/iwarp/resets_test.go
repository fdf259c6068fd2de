package iwarp

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestResetQueue: every connection handed to the reset queue is reset
// (the peer reads ECONNRESET, not EOF: no FIN, no TIME_WAIT), those
// queued beyond its bound as well as those added after stop, and stop
// returns only when all of them are.
func TestResetQueue(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const bound, n = 8, 24 // n-bound are reset by add itself, unless the queue's goroutine kept up
	clients := make([]net.Conn, 0, n+1)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	q := newResetQueue(bound)
	accept := func() *net.TCPConn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return s.(*net.TCPConn)
	}
	for range n {
		q.add(accept())
	}
	q.stop()
	q.add(accept()) // after stop: reset at once
	for i, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		_, err := c.Read(b[:])
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client %d: read %v, want ECONNRESET", i, err)
		}
	}
}
