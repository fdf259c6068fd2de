package dat_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Rules of dat_ep_dup_connect(3DAT) ([SEED-dup]), with the package's
// decisions for the seed's defects ("UNDISCONNECTED" is DISCONNECTED; an
// unreachable host is UNREACHABLE).

// "The remote end of the requested connection shall be the same as the
// remote end of the dup_ep_handle." "Upon successful completion of this
// operation, the local Endpoint is transferred into
// DAT_EP_STATE_ACTIVE_CONNECTION_PENDING." "The Consumer-provided
// private_data is passed to the remote side and is provided to the remote
// Consumer in the Connection Request." "The Port Qualifier is passed to the
// remote side ... and is available to the remote Consumer in the
// Connection Request." Acceptance arrives as ESTABLISHED and the EP is
// CONNECTED.
func TestSeedDupConnectEstablished(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	first := c.ep(t)
	require.NoError(t, first.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, []byte("first"), dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(s.ep(t), nil))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	waitFor(t, c.evd, dat.ConnectionEventEstablished)

	dup := c.ep(t)
	require.NoError(t, dup.DupConnect(first, dat.TimeoutInfinite, []byte("second"), dat.QoSBestEffort))
	require.Equal(t, dat.EPActiveConnectionPending, state(t, dup))
	ev = waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.Same(t, psp, ev.CR.SP, "the dup went to the same connection qualifier")
	crp, err := ev.CR.CR.Query()
	require.NoError(t, err)
	requirePD(t, s.ia, []byte("second"), crp.PrivateData)
	require.Equal(t, loopback, crp.RemoteAddr.Addr())
	require.NotZero(t, crp.RemotePortQual)
	require.NoError(t, ev.CR.CR.Accept(s.ep(t), []byte("ok")))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	est := waitFor(t, c.evd, dat.ConnectionEventEstablished)
	require.Same(t, dup, est.Conn.EP)
	requirePD(t, s.ia, []byte("ok"), est.Conn.PrivateData)
	require.Equal(t, dat.EPConnected, state(t, dup))
	dp, err := dup.Query()
	require.NoError(t, err)
	fp, err := first.Query()
	require.NoError(t, err)
	require.Equal(t, fp.RemoteAddr, dp.RemoteAddr)
	require.Equal(t, fp.RemotePortQual, dp.RemotePortQual)
	require.Equal(t, crp.RemotePortQual, dp.LocalPortQual, "the remote consumer saw our port qualifier")
}

// dupFixture connects `first` to a peer and returns a fresh EP to dup from
// it. The peer is a real DAT server side.
func dupFixture(t *testing.T) (c, s side, psp *dat.PSP, first, ep *dat.EP) {
	c, s = newSide(t, "lo"), newSide(t, "lo")
	psp = s.psp(t)
	first = c.ep(t)
	require.NoError(t, first.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(s.ep(t), nil))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	waitFor(t, c.evd, dat.ConnectionEventEstablished)
	return c, s, psp, first, c.ep(t)
}

// "The rejection of the connection by the remote Consumer is reported ...
// through a DAT_CONNECTION_EVENT_PEER_REJECTED event ... and the local
// Endpoint is automatically transitioned" (to DISCONNECTED, as the package decides).
func TestSeedDupConnectPeerRejected(t *testing.T) {
	c, s, _, first, ep := dupFixture(t)
	require.NoError(t, ep.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Reject([]byte("busy")))
	rej := waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
	requirePD(t, s.ia, []byte("busy"), rej.Conn.PrivateData)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
}

// "remote Consumer is not listening on the requested Connection Qualifier"
// gives DAT_CONNECTION_EVENT_NON_PEER_REJECTED and the EP is DISCONNECTED.
func TestSeedDupConnectNonPeerRejected(t *testing.T) {
	c, _, psp, first, ep := dupFixture(t)
	require.NoError(t, psp.Free())
	require.NoError(t, ep.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort))
	waitFor(t, c.evd, dat.ConnectionEventNonPeerRejected)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
}

// "Backlog of the requested Service Point is full" is also a non-peer
// reject.
func TestSeedDupConnectBacklogFull(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, &dat.PSPOptions{Backlog: 1})
	require.NoError(t, err)
	first := c.ep(t)
	require.NoError(t, first.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(s.ep(t), nil))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	waitFor(t, c.evd, dat.ConnectionEventEstablished)

	pending := c.ep(t) // fills the backlog: its request is never answered
	require.NoError(t, pending.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort))
	waitFor(t, s.evd, dat.ConnectionRequestEvent)
	over := c.ep(t)
	require.NoError(t, over.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort))
	rej := waitFor(t, c.evd, dat.ConnectionEventNonPeerRejected)
	require.Same(t, over, rej.Conn.EP)
	require.Equal(t, dat.EPDisconnected, state(t, over))
}

// scriptedPeer accepts the first connection as a well-behaved MPA v2
// responder and lets every later one hang after reading its Request, so a
// dup to it cannot complete.
func scriptedPeer(t *testing.T) *rawPeer {
	return newRawPeer(t, func(i int, conn net.Conn) {
		if _, _, _, err := readMPARequest(conn); err != nil {
			return
		}
		if i == 0 {
			conn.Write(mpaReply(false, nil))
		}
		holdOpen(conn)
	})
}

// "When the timeout expired prior to completion of the Connection
// establishment, the local Endpoint is automatically transitioned into ...
// [DISCONNECTED] and the local Consumer [notified] through a
// DAT_CONNECTION_EVENT_TIMED_OUT event." The timeout is in microseconds.
func TestSeedDupConnectTimedOut(t *testing.T) {
	c := newSide(t, "lo")
	peer := scriptedPeer(t)
	first := c.ep(t)
	require.NoError(t, first.Connect(loopback, peer.qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	waitFor(t, c.evd, dat.ConnectionEventEstablished)
	ep := c.ep(t)
	require.NoError(t, ep.DupConnect(first, 50_000 /* µs */, nil, dat.QoSBestEffort))
	waitFor(t, c.evd, dat.ConnectionEventTimedOut)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
}

// "When the Provider cannot reach the remote host or the remote host does
// not respond within the Consumer-requested timeout, a
// DAT_CONNECTION_EVENT_UNREACHABLE is generated ... The Endpoint
// transitions into a DAT_EP_STATE_DISCONNECTED state." Here the consumer
// waits forever, and the provider gives up on a host that never answers
// the MPA Request (lo-fast sets a 1 s reply timeout).
func TestSeedDupConnectUnreachable(t *testing.T) {
	c := newSide(t, "lo-fast")
	peer := scriptedPeer(t)
	first := c.ep(t)
	require.NoError(t, first.Connect(loopback, peer.qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	waitFor(t, c.evd, dat.ConnectionEventEstablished)
	ep := c.ep(t)
	require.NoError(t, ep.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort))
	waitFor(t, c.evd, dat.ConnectionEventUnreachable)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
}

// Synchronous returns of dat_ep_dup_connect.
func TestSeedDupConnectReturns(t *testing.T) {
	c, _, _, first, ep := dupFixture(t)
	t.Run("DAT_MODEL_NOT_SUPPORTED: requested qos was not supported by the local Provider", func(t *testing.T) {
		requireCode(t, ep.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSHighThroughput), dat.ModelNotSupported, 0)
		require.Equal(t, dat.EPUnconnected, state(t, ep), "synchronous failure leaves the EP alone")
	})
	t.Run("DAT_INVALID_PARAMETER: timeout values must be positive", func(t *testing.T) {
		requireCode(t, ep.DupConnect(first, 0, nil, dat.QoSBestEffort), dat.InvalidParameter, dat.Arg(3))
	})
	t.Run("DAT_INVALID_PARAMETER: private data beyond the provider limit", func(t *testing.T) {
		_, prov, err := c.ia.Query()
		require.NoError(t, err)
		requireCode(t, ep.DupConnect(first, dat.TimeoutInfinite, make([]byte, prov.MaxPrivateDataSize+1), dat.QoSBestEffort), dat.InvalidParameter, dat.Arg(5))
		require.NoError(t, ep.DupConnect(first, dat.TimeoutInfinite, make([]byte, prov.MaxPrivateDataSize), dat.QoSBestEffort))
	})
	t.Run("DAT_INVALID_HANDLE: ep_handle or dup_ep_handle is invalid", func(t *testing.T) {
		fresh := c.ep(t)
		requireCode(t, fresh.DupConnect(nil, dat.TimeoutInfinite, nil, dat.QoSBestEffort), dat.InvalidHandle, dat.HandleEP)
		gone := c.ep(t)
		require.NoError(t, gone.Free())
		requireCode(t, fresh.DupConnect(gone, dat.TimeoutInfinite, nil, dat.QoSBestEffort), dat.InvalidHandle, dat.HandleEP)
		requireCode(t, gone.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort), dat.InvalidHandle, dat.HandleEP)
	})
	t.Run("DAT_INVALID_STATE: a parameter is in an invalid state", func(t *testing.T) {
		notConnected := c.ep(t)
		fresh := c.ep(t)
		requireCode(t, fresh.DupConnect(notConnected, dat.TimeoutInfinite, nil, dat.QoSBestEffort), dat.InvalidState, dat.StateEPUnconnected)
		requireCode(t, ep.DupConnect(first, dat.TimeoutInfinite, nil, dat.QoSBestEffort), dat.InvalidState, dat.StateEPActConnPending)
	})
}

// DAT_TIMEOUT is in microseconds; DAT_TIMEOUT_INFINITE means no timeout.
func TestTimeoutUnits(t *testing.T) {
	d, ok := dat.Timeout(1500).Duration()
	require.True(t, ok)
	require.Equal(t, "1.5ms", d.String())
	_, ok = dat.TimeoutInfinite.Duration()
	require.False(t, ok)
	require.Equal(t, dat.Timeout(2), dat.TimeoutOf(1001)) // 1001 ns rounds up to 2 µs
	require.Less(t, dat.TimeoutOf(1<<62), dat.TimeoutInfinite, "a finite duration never means infinite")
}
