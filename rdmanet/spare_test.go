package rdmanet

import (
	"context"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readySpares waits until the IA of tmpl has spareDepth spares dialed
// from tmpl up, and returns their connections.
func readySpares(t *testing.T, tmpl *Conn) []*Conn {
	t.Helper()
	s := tmpl.ia
	var conns []*Conn
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		conns = conns[:0]
		for _, sp := range s.spares[tmpl.dialKey] {
			if sp.tmpl == tmpl && sp.c != nil {
				conns = append(conns, sp.c)
			}
		}
		return len(conns) == spareDepth
	}, 5*time.Second, time.Millisecond)
	return conns
}

// spareCount is how many spares the IA of c has for c's peer, dialed or
// being dialed.
func spareCount(c *Conn) int {
	c.ia.mu.Lock()
	defer c.ia.mu.Unlock()
	return len(c.ia.spares[c.dialKey])
}

// roundTrip writes msg on c and reads the echo of it back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	b := make([]byte, len(msg))
	_, err = io.ReadFull(c, b)
	require.NoError(t, err)
	require.Equal(t, msg, string(b))
}

// TestDupTakesSpare: once a connection was dupped, the next Dup and the
// next dup-connect dial get connections dialed ahead, which work, and
// spares are dialed again; closing the template closes the spares left,
// which the server sees end.
func TestDupTakesSpare(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		var served, ended atomic.Int32
		serve(t, l, func(c net.Conn) {
			served.Add(1)
			io.Copy(c, c)
			c.Close()
			ended.Add(1)
		})
		d := &Dialer{IA: ia, Timeout: 5 * time.Second}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		tmpl := nc.(*Conn)
		require.Zero(t, spareCount(tmpl), "a first dial makes no spare")

		dup, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup.Close()
		spares := readySpares(t, tmpl)
		require.False(t, slices.Contains(spares, dup), "the dup that made the spares is one")

		dup2, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup2.Close()
		require.Same(t, spares[0], dup2, "Dup takes the oldest spare")
		nc3, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer nc3.Close()
		require.Same(t, spares[1], nc3.(*Conn), "a dup-connect dial takes the next one")
		for _, c := range []net.Conn{tmpl, dup, dup2, nc3} {
			roundTrip(t, c, "spare")
		}
		left := readySpares(t, tmpl)
		require.False(t, slices.Contains(left, dup2) || slices.Contains(left, nc3.(*Conn)), "a spare taken is still a spare")

		total := served.Load()
		require.NoError(t, tmpl.Close())
		require.Zero(t, spareCount(tmpl))
		for _, c := range left {
			require.True(t, c.isDone(), "a spare outlived its template")
		}
		// The server accepted every spare; those never taken end with
		// the template, the others are still open.
		require.Eventually(t, func() bool { return ended.Load() == int32(1+len(left)) }, 5*time.Second, time.Millisecond,
			"served %d, ended %d", total, ended.Load())
		roundTrip(t, dup2, "still open")
		nc4, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer nc4.Close()
		require.False(t, slices.Contains(left, nc4.(*Conn)), "a spare of a closed template was taken")
		roundTrip(t, nc4, "after")
	})
}

// TestNoSpareWithoutDup: dials that never dup make no spares, and the
// server accepts only the connections dialed.
func TestNoSpareWithoutDup(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		var served atomic.Int32
		serve(t, l, func(c net.Conn) { served.Add(1); io.Copy(c, c); c.Close() })
		d := &Dialer{IA: ia, Timeout: 5 * time.Second, NoDup: true}
		var conns []net.Conn
		for range 3 {
			c, err := d.Dial("rdma", l.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			roundTrip(t, c, "x")
			conns = append(conns, c)
		}
		time.Sleep(20 * time.Millisecond) // time for a spare's dial, were one started
		require.Zero(t, spareCount(conns[0].(*Conn)))
		require.EqualValues(t, 3, served.Load())
	})
}

// TestSpareSetup: a dup-connect dial whose setup differs from the spares'
// (another buffer size) dials its own connection and leaves them.
func TestSpareSetup(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		serve(t, l, func(c net.Conn) { io.Copy(c, c); c.Close() })
		d := &Dialer{IA: ia, Timeout: 5 * time.Second, BufferSize: 64 << 10}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer nc.Close()
		tmpl := nc.(*Conn)
		dup, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer dup.Close()
		spares := readySpares(t, tmpl)

		other := *d
		other.BufferSize = 128 << 10
		oc, err := other.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer oc.Close()
		require.False(t, slices.Contains(spares, oc.(*Conn)), "a spare of another setup was taken")
		require.True(t, slices.Equal(spares, readySpares(t, tmpl)), "the spares changed")
		roundTrip(t, oc, "other")
	})
}

// TestSpareRefused: a spare the server refuses (its backlog is full) ends
// the spares of its template, so that a full server does not get two
// attempts per dial; a spare that came up is still taken.
func TestSpareRefused(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia, Backlog: 2}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		defer l.Close()
		accept := func() net.Conn {
			t.Helper()
			c, err := l.Accept()
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c
		}
		d := &Dialer{IA: ia, Timeout: 5 * time.Second}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer nc.Close()
		tmpl := nc.(*Conn)
		accept()
		dup, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup.Close()
		// Two spares were dialed. The dup's connection is not accepted
		// yet, so it holds one place of the backlog whenever the spares
		// arrive (accepting it first would race with them): the backlog
		// holds one of them, and the other was refused.
		var spares []*Conn
		require.Eventually(t, func() bool {
			s := tmpl.ia
			s.mu.Lock()
			defer s.mu.Unlock()
			spares = spares[:0]
			done := 0
			for _, sp := range s.spares[tmpl.dialKey] {
				select {
				case <-sp.done:
					done++
					if sp.c != nil {
						spares = append(spares, sp.c)
					}
				default:
				}
			}
			return done == len(s.spares[tmpl.dialKey]) && tmpl.sparesOff
		}, 5*time.Second, time.Millisecond)
		require.Len(t, spares, 1)
		accept() // the dup's
		accept() // the spare's
		dup2, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup2.Close()
		require.Same(t, spares[0], dup2)
		require.Zero(t, spareCount(tmpl), "a spare was dialed after one was refused")
	})
}

// TestStaleSpare: spares the server closed while they waited (an idle
// timeout) are not taken: the dial gets a connection that works.
func TestStaleSpare(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		var accepted, closed atomic.Int32
		serve(t, l, func(c net.Conn) {
			// The template and its first dup are the first two; the
			// spares dialed after the dup are closed at once.
			if n := accepted.Add(1); n == 3 || n == 4 {
				c.Close()
				closed.Add(1)
				return
			}
			io.Copy(c, c)
			c.Close()
		})
		d := &Dialer{IA: ia, Timeout: 5 * time.Second}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer nc.Close()
		tmpl := nc.(*Conn)
		dup, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup.Close()
		stale := readySpares(t, tmpl)
		require.Eventually(t, func() bool { return closed.Load() == 2 }, 5*time.Second, time.Millisecond)
		// The server's close has to reach each spare before a dial can
		// know it is over; how long that takes depends on the machine's
		// load, so wait for what stale itself sees, not for a time.
		require.Eventually(t, func() bool {
			for _, c := range stale {
				if !c.stale() {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond, "the server's close never reached its spares")

		dup2, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup2.Close()
		require.False(t, slices.Contains(stale, dup2), "a spare the server closed was taken")
		roundTrip(t, dup2, "fresh")
	})
}

// TestSpareClosedCleanly: closing a template while its spares are being
// dialed lets their dials finish and closes them as any connection, so
// the server sees them end, not reset.
func TestSpareClosedCleanly(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		resets := make(chan error, 16)
		serve(t, l, func(c net.Conn) {
			if _, err := io.Copy(c, c); err != nil {
				resets <- err
			}
			c.Close()
		})
		for range 5 {
			d := &Dialer{IA: ia, Timeout: 5 * time.Second}
			nc, err := d.Dial("rdma", l.Addr().String())
			require.NoError(t, err)
			tmpl := nc.(*Conn)
			dup, err := tmpl.Dup(context.Background())
			require.NoError(t, err)
			require.NoError(t, tmpl.Close()) // the spares are on their way
			require.NoError(t, dup.Close())
		}
		select {
		case err := <-resets:
			t.Fatalf("a server connection ended with %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	})
}

// TestSpareGraceFollowsSetup: closing a template waits for its spares'
// dials about as long as its own dial took, within bounds.
func TestSpareGraceFollowsSetup(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{300 * time.Microsecond, spareGrace},             // loopback: the floor
		{200 * time.Millisecond, 600 * time.Millisecond}, // a slow device
		{2 * time.Second, maxSpareGrace},                 // never past the cap
	} {
		require.Equal(t, tc.want, spareGraceFor(&Conn{setupTook: tc.took}), "dial took %v", tc.took)
	}
}

// startedSpares counts the spares of c's peer whose dial was started.
func startedSpares(c *Conn) int {
	c.ia.mu.Lock()
	defer c.ia.mu.Unlock()
	n := 0
	for _, sp := range c.ia.spares[c.dialKey] {
		if sp.started.Load() {
			n++
		}
	}
	return n
}

// TestSpareHeldBack: the spares a dup-connect dial asks for are dialed
// only once the connection it returned has had its first exchange (its
// first Read returned), or when a dial wants one; a template closed
// before drops spares never dialed, and nothing is left running.
func TestSpareHeldBack(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		setHook(&testSpareWait, time.Hour) // no timer may open a gate
		defer testSpareWait.Store(nil)
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		var served atomic.Int32
		serve(t, l, func(c net.Conn) { served.Add(1); io.Copy(c, c); c.Close() })
		d := &Dialer{IA: ia, Timeout: 5 * time.Second}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		tmpl := nc.(*Conn)

		dup, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup.Close()
		require.Equal(t, spareDepth, spareCount(tmpl))
		time.Sleep(20 * time.Millisecond) // time for a spare's dial, were one started
		require.Zero(t, startedSpares(tmpl), "a spare was dialed before the dup's first exchange")
		roundTrip(t, dup, "first")
		spares := readySpares(t, tmpl)

		// A dial that wants a held spare starts it.
		dup2, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup2.Close()
		require.Same(t, spares[0], dup2)
		dup3, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup3.Close()
		require.Same(t, spares[1], dup3)
		dup4, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup4.Close()
		require.False(t, slices.Contains(spares, dup4))
		for _, c := range []*Conn{dup2, dup3, dup4} {
			roundTrip(t, c, "taken")
		}

		// Closing the template drops a spare whose dial is held, and
		// that spare is never dialed.
		readySpares(t, tmpl)
		dup5, err := tmpl.Dup(context.Background())
		require.NoError(t, err)
		defer dup5.Close()
		require.Equal(t, spareDepth, spareCount(tmpl))
		require.Equal(t, spareDepth-1, startedSpares(tmpl))
		var total int32
		require.Eventually(t, func() bool {
			total = served.Load()
			time.Sleep(20 * time.Millisecond)
			return served.Load() == total
		}, 5*time.Second, time.Millisecond, "the server is still accepting")
		require.NoError(t, tmpl.Close())
		require.Zero(t, spareCount(tmpl))
		time.Sleep(20 * time.Millisecond) // time for a spare's dial, were one started
		require.Equal(t, total, served.Load(), "a spare dropped before its dial was dialed")
		roundTrip(t, dup5, "still open")
	})
}
