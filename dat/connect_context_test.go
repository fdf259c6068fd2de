package dat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// dequeueNow takes the next event off evd without waiting: the outcome of
// a ConnectContext must be queued by the time it returns.
func dequeueNow(t *testing.T, evd *dat.EVD, want dat.EventNumber) dat.Event {
	t.Helper()
	ev, err := evd.Dequeue()
	require.NoError(t, err, "no event queued, want %v", want)
	require.Equal(t, want, ev.Number, "event: %+v", ev.Conn)
	return ev
}

// ConnectContext and DupConnectContext return once the outcome is on the
// connection EVD: ESTABLISHED with the accept's private data, the EP
// CONNECTED.
func TestConnectContextEstablished(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	// The server answers from a goroutine of its own while the client's
	// call is in progress.
	served := make(chan error, 2)
	go func() {
		for accepted := 0; accepted < 2; {
			ev, _, err := s.evd.Wait(dat.TimeoutOf(eventWait), 1)
			switch {
			case err != nil:
				served <- err
				return
			case ev.Number == dat.ConnectionEventEstablished: // the server's side of the last one
				continue
			case ev.Number != dat.ConnectionRequestEvent:
				served <- errors.New("unexpected " + ev.Number.String())
				return
			}
			sep, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, nil)
			if err == nil {
				err = ev.CR.CR.Accept(sep, []byte("welcome"))
			}
			served <- err
			accepted++
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	cep := c.ep(t)
	require.NoError(t, cep.ConnectContext(ctx, loopback, psp.Qual(), []byte("hi"), dat.QoSBestEffort, dat.ConnectDefault))
	ev := dequeueNow(t, c.evd, dat.ConnectionEventEstablished)
	require.Same(t, cep, ev.Conn.EP)
	requirePD(t, c.ia, []byte("welcome"), ev.Conn.PrivateData)
	require.Equal(t, dat.EPConnected, state(t, cep))
	require.NoError(t, <-served)

	dep := c.ep(t)
	require.NoError(t, dep.DupConnectContext(ctx, cep, []byte("again"), dat.QoSBestEffort))
	ev = dequeueNow(t, c.evd, dat.ConnectionEventEstablished)
	require.Same(t, dep, ev.Conn.EP)
	require.Equal(t, dat.EPConnected, state(t, dep))
	require.NoError(t, <-served)
	for _, ep := range []*dat.EP{cep, dep} {
		require.NoError(t, ep.Disconnect(dat.CloseAbrupt))
		require.NoError(t, ep.Free())
	}
}

// The context bounds the attempt: its deadline gives TIMED_OUT, its
// cancellation NON_PEER_REJECTED with the context's error, both queued
// when the call returns and the EP DISCONNECTED.
func TestConnectContextEnds(t *testing.T) {
	iwarpOnly(t, "a hand-written silent MPA peer")
	c := newSide(t, "lo")
	peer := silentPeer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ep := c.ep(t)
	require.NoError(t, ep.ConnectContext(ctx, loopback, peer.qual(), nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := dequeueNow(t, c.evd, dat.ConnectionEventTimedOut)
	require.Same(t, ep, ev.Conn.EP)
	require.Equal(t, dat.EPDisconnected, state(t, ep))

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	ep = c.ep(t)
	require.NoError(t, ep.ConnectContext(ctx, loopback, peer.qual(), nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev = dequeueNow(t, c.evd, dat.ConnectionEventNonPeerRejected)
	require.ErrorIs(t, ev.Conn.Err, context.Canceled)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
}

// Argument and state errors come back from the call, as from Connect, and
// leave the EP as it was.
func TestConnectContextReturns(t *testing.T) {
	c := newMarkedSide(t, "lo")
	ep := c.ep(t)
	ctx := context.Background()
	requireCode(t, ep.ConnectContext(ctx, loopback, 0, nil, dat.QoSBestEffort, dat.ConnectDefault), dat.InvalidParameter, dat.Arg(3))
	requireCode(t, ep.ConnectContext(ctx, loopback, 1, nil, dat.QoSBestEffort, dat.ConnectFlags(1)), dat.ModelNotSupported, dat.NoSubtype)
	requireCode(t, ep.DupConnectContext(ctx, ep, nil, dat.QoSBestEffort), dat.InvalidState, dat.StateEPUnconnected)
	require.Equal(t, dat.EPUnconnected, state(t, ep))
	requireNothingQueued(t, c.evd)
}

// With the iwarp provider, whose accept only writes the MPA Reply
// (driver.LocalAccepter), CR.Accept makes the connection in the calling
// goroutine: the server's ESTABLISHED is queued when it returns.
func TestAcceptLocallyEstablished(t *testing.T) {
	iwarpOnly(t, "an accept that does not wait for the peer")
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	cep := c.ep(t)
	require.NoError(t, cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	sep := s.ep(t)
	require.NoError(t, ev.CR.CR.Accept(sep, []byte("now")))
	ev = dequeueNow(t, s.evd, dat.ConnectionEventEstablished)
	require.Same(t, sep, ev.Conn.EP)
	require.Equal(t, dat.EPConnected, state(t, sep))
	est := waitFor(t, c.evd, dat.ConnectionEventEstablished)
	requirePD(t, c.ia, []byte("now"), est.Conn.PrivateData)
}
