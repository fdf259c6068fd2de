package rdmanet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/internal/ring"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
)

// TestStatsCounts moves a small (inline) and a large (RDMA Write) message
// one way and checks both ends' counters and the negotiated parameters,
// with rings of different sizes on the two sides.
func TestStatsCounts(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia, BufferSize: 32 << 10}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			accepted <- c
		}()
		d := Dialer{IA: ia, BufferSize: 64 << 10, Timeout: 10 * time.Second, NoDup: true}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		c1 := nc.(*Conn)
		defer c1.Close()
		sc := <-accepted
		l.Close()
		require.NotNil(t, sc)
		c2 := sc.(*Conn)
		defer c2.Close()

		small := []byte("ping")
		big := bytes.Repeat([]byte{7}, 20<<10)
		_, err = c1.Write(small)
		require.NoError(t, err)
		_, err = c1.Write(big)
		require.NoError(t, err)
		got := make([]byte, len(small)+len(big))
		_, err = io.ReadFull(c2, got)
		require.NoError(t, err)

		s1, s2 := c1.Stats(), c2.Stats()
		total := uint64(len(small) + len(big))
		require.Equal(t, total, s1.BytesWritten)
		require.Equal(t, uint64(0), s1.BytesRead)
		require.Equal(t, total, s2.BytesRead)
		require.Equal(t, uint64(0), s2.BytesWritten)
		require.Equal(t, uint64(1), s1.InlineWrites, "the 4-byte Write travels inline")
		require.GreaterOrEqual(t, s1.RDMAWrites, uint64(1), "the 20 KiB Write is RDMA-written")
		require.Equal(t, uint64(0), s2.RDMAWrites+s2.InlineWrites)
		// At least the inline one, which carried the first message, and
		// the big one's announcement went out, and c2 applied the two.
		require.GreaterOrEqual(t, s1.ControlSent, uint64(2))
		require.GreaterOrEqual(t, s2.ControlReceived, uint64(2))
		require.LessOrEqual(t, s2.ControlReceived, s1.ControlSent)
		require.Zero(t, s1.Errors)
		require.Empty(t, s1.LastError)

		if ia == "iwarp" {
			// The listener's IA is bound to its address; the dialer's is not.
			require.Equal(t, "iwarp", s1.Provider)
			require.Equal(t, "iwarp", s1.IA)
			require.Equal(t, "iwarp:127.0.0.1", s2.IA)
		}
		require.NotEmpty(t, s1.Provider)
		require.Equal(t, s1.Provider, s2.Provider)
		require.Equal(t, Params{Version: int(handshake.Version), RecvRing: 64 << 10, SendRing: 32 << 10, Staging: 64 << 10, BufferSize: 64 << 10,
			Credits: defaultRecvs, PeerCredits: defaultRecvs, SendDepth: defaultSendDepth, Poll: "adaptive"}, s1.Params)
		require.Equal(t, 32<<10, s2.Params.RecvRing)
		require.Equal(t, 64<<10, s2.Params.SendRing)

		// Stats stay readable after Close, the counts unchanged.
		require.NoError(t, c1.Close())
		after := c1.Stats()
		require.Equal(t, total, after.BytesWritten)
	})
}

// TestStatsRingFullWait writes twice the peer's ring while nobody reads
// it: the Write must wait for ring space (the peer cannot report
// consumption before it reads), and that wait is counted with its time.
func TestStatsRingFullWait(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 4096)
		defer stop()
		done := make(chan error, 1)
		go func() {
			_, err := c1.Write(make([]byte, 8192))
			done <- err
		}()
		_, err := io.ReadFull(c2, make([]byte, 8192))
		require.NoError(t, err)
		require.NoError(t, <-done)
		s := c1.Stats()
		require.GreaterOrEqual(t, s.RingFullWaits, uint64(1))
		require.Positive(t, s.RingFullTime)
		require.Zero(t, s.CreditStalls, "control credits never ran out")
		require.Zero(t, c2.Stats().RingFullWaits, "the reader never wrote")
	})
}

// TestWaitCause checks how a wait is attributed, on hand-made states.
func TestWaitCause(t *testing.T) {
	mk := func() *Conn {
		c := &Conn{dst: peerRing{r: ring.Ring{Size: 4096}}}
		c.cc = credits{avail: 4, k: 4}
		return c
	}
	c := mk()
	c.sProd, c.sProdSent, c.sPeerCons = 4096, 4096, 0 // the peer's ring is full
	require.Equal(t, waitRing, c.waitCauseLocked())
	c.cc.avail = 0
	c.sProdSent = 1024 // data written but not announced, and no credit to announce it
	require.Equal(t, waitCredit, c.waitCauseLocked())
	c = mk()
	c.sProd, c.sProdSent, c.sPeerCons = 1024, 1024, 0 // room at the peer: our own queue is full
	require.Equal(t, waitSendQueue, c.waitCauseLocked())
}

// TestStatsErrors: errors a call returns are counted, io.EOF is not, and
// a peer's reset is counted once although two calls report it.
func TestStatsErrors(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		c1.SetReadDeadline(time.Now().Add(-time.Second))
		_, err := c1.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		s := c1.Stats()
		require.Equal(t, uint64(1), s.Errors)
		require.Contains(t, s.LastError, "i/o timeout")

		// A reset: counted when it happens, not again when reported.
		c2.ep.Disconnect(0) // abrupt, no FIN
		require.Eventually(t, func() bool {
			c1.applyQueued() // nobody reads c1: apply its events here
			return c1.Stats().Errors == 2
		}, 10*time.Second, time.Millisecond)
		c1.SetReadDeadline(time.Time{})
		_, err = c1.Read(make([]byte, 1))
		require.ErrorIs(t, err, syscall.ECONNRESET)
		_, err = c1.Write([]byte("x"))
		require.Error(t, err)
		s = c1.Stats()
		require.Equal(t, uint64(2), s.Errors)
		require.Contains(t, s.LastError, "reset")

		// The peer's FIN: io.EOF is no error.
		c3, c4, stop2 := pipe(t, ia, 0)
		defer stop2()
		require.NoError(t, c4.CloseWrite())
		_, err = c3.Read(make([]byte, 1))
		require.Equal(t, io.EOF, err)
		require.Zero(t, c3.Stats().Errors)
	})
}

// TestStatsNoAllocs: a monitoring loop may call Stats as often as it
// likes; with no error to describe it allocates nothing.
func TestStatsNoAllocs(t *testing.T) {
	c1, _, stop := pipe(t, "iwarp", 0)
	defer stop()
	if n := testing.AllocsPerRun(100, func() { _ = c1.Stats() }); n != 0 {
		t.Errorf("Stats allocates %v times per call", n)
	}
}

// TestDialTimeout: a dial that times out, by Timeout, by Deadline or by
// the context's deadline, fails like package net's: a *net.OpError whose
// net.Error says Timeout, matching context.DeadlineExceeded, and also
// os.ErrDeadlineExceeded like rdmanet's Read and Write timeouts. The peer
// is a TCP listener that accepts and never answers the MPA handshake.
func TestDialTimeout(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, silent, until the test ends
		}
	}()
	defer func() {
		tl.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	const wait = 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"Timeout", func() (net.Conn, error) {
			d := Dialer{Timeout: wait}
			return d.Dial("rdma", tl.Addr().String())
		}},
		{"Deadline", func() (net.Conn, error) {
			d := Dialer{Deadline: time.Now().Add(wait)}
			return d.Dial("rdma", tl.Addr().String())
		}},
		{"context", func() (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			var d Dialer
			return d.DialContext(ctx, "rdma", tl.Addr().String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := liveConnIDs()
			c, err := tc.dial()
			if c != nil {
				c.Close()
			}
			require.Error(t, err)
			var oe *net.OpError
			require.True(t, errors.As(err, &oe), "%T %v", err, err)
			require.Equal(t, "dial", oe.Op)
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "%v is not a timeout", err)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.Equal(t, "timeout", failureReason(err))
			require.Subset(t, before, liveConnIDs(), "the failed dial's Conn is no longer listed")
		})
	}
}

// liveConnIDs lists the IDs of the Conns in the registry.
func liveConnIDs() []uint64 {
	var ids []uint64
	for _, c := range Snapshot().Conns {
		ids = append(ids, c.ID)
	}
	return ids
}
