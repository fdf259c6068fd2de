package dat_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// The EP connection life cycle, transition by transition: creation,
// reservation and the passive side, the active side, then teardown and
// reuse, with the synchronous returns of each call.

// connectTo is dat_ep_connect to qual on loopback with best-effort QoS and
// default flags.
func connectTo(ep *dat.EP, qual dat.ConnQual, timeout dat.Timeout, pd []byte) error {
	return ep.Connect(loopback, qual, timeout, pd, dat.QoSBestEffort, dat.ConnectDefault)
}

// newMarkedSide is newSide with an EVD that also takes software events, so
// a test can show that nothing was posted before a marker.
func newMarkedSide(t *testing.T, name string) side {
	t.Helper()
	ia := openIA(t, name)
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	evd, err := ia.CreateEVD(64, dat.EVDDefault|dat.EVDSoftware)
	require.NoError(t, err)
	return side{ia: ia, pz: pz, evd: evd}
}

// requireNothingQueued posts a marker and checks that it is the next event:
// no other event was queued before it.
func requireNothingQueued(t *testing.T, evd *dat.EVD) {
	t.Helper()
	marker := new(int)
	require.NoError(t, evd.PostSE(marker))
	ev, _, err := evd.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err)
	require.Equal(t, dat.SoftwareEvent, ev.Number, "unexpected %v (%+v)", ev.Number, ev.Conn)
	require.Same(t, marker, ev.Software)
}

// maxPD is ProviderAttr.MaxPrivateDataSize of the IA.
func maxPD(t *testing.T, ia *dat.IA) int {
	t.Helper()
	_, p, err := ia.Query()
	require.NoError(t, err)
	return p.MaxPrivateDataSize
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// Active side: "dat_ep_connect ... accepted ⇒ ACTIVE_CONNECTION_PENDING",
// "remote Consumer accepts ⇒ CONNECTED, E: ESTABLISHED with the accepting
// side's private data"; the consumer-flag PSP request carries the
// requester's private data, address and the PSP, and no EP; on the passive
// side ESTABLISHED has no private data. Sizes 0, 1 and the provider
// maximum each way.
func TestConnectPrivateData(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	max := maxPD(t, c.ia)
	if testProvider == "iwarp" {
		require.Equal(t, 252, max, "the iWARP provider's limit (siw: 256 minus the MPA v2 block)")
	}
	psp := s.psp(t)
	for _, sz := range [][2]int{{0, 0}, {1, 1}, {max, max}, {max, 0}, {0, max}, {1, max}} {
		cpd, apd := pattern(sz[0]), pattern(sz[1])
		t.Run("connect "+strconv.Itoa(sz[0])+" bytes, accept "+strconv.Itoa(sz[1])+" bytes", func(t *testing.T) {
			cep := c.ep(t)
			require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), cpd))
			require.Equal(t, dat.EPActiveConnectionPending, state(t, cep))

			req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			require.Same(t, psp, req.CR.SP)
			require.Equal(t, psp.Qual(), req.CR.Qual)
			crp, err := req.CR.CR.Query()
			require.NoError(t, err)
			require.Equal(t, loopback, crp.RemoteAddr.Addr())
			require.NotZero(t, crp.RemoteAddr.Port())
			require.Equal(t, dat.PortQual(crp.RemoteAddr.Port()), crp.RemotePortQual)
			requirePD(t, s.ia, cpd, crp.PrivateData)
			require.Same(t, psp, crp.SP)
			require.Equal(t, psp.Qual(), crp.Qual)
			require.Nil(t, crp.LocalEP, "a consumer-flag PSP request carries no EP")

			sep := s.ep(t)
			require.NoError(t, req.CR.CR.Accept(sep, apd))
			sest := waitFor(t, s.evd, dat.ConnectionEventEstablished)
			require.Same(t, sep, sest.Conn.EP)
			require.Empty(t, sest.Conn.PrivateData, "the passive side's ESTABLISHED carries no private data")
			cest := waitFor(t, c.evd, dat.ConnectionEventEstablished)
			require.Same(t, cep, cest.Conn.EP)
			requirePD(t, c.ia, apd, cest.Conn.PrivateData)
			require.Equal(t, dat.EPConnected, state(t, cep))
			require.Equal(t, dat.EPConnected, state(t, sep))

			cp, err := cep.Query()
			require.NoError(t, err)
			require.Equal(t, loopback, cp.RemoteAddr)
			require.Equal(t, crp.RemotePortQual, cp.LocalPortQual, "the passive side saw our port")
		})
	}
}

// Exceeding max_private_data_size on connect, accept or reject is
// DAT_INVALID_PARAMETER ([MAN12]), synchronously, and changes nothing: the
// EP stays UNCONNECTED, the CR stays pending.
func TestPrivateDataTooLong(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	max := maxPD(t, c.ia)
	psp := s.psp(t)
	cep := c.ep(t)

	err := connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), pattern(max+1))
	requireExact(t, err, dat.InvalidParameter, dat.Arg(6))
	require.Equal(t, dat.EPUnconnected, state(t, cep))

	require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	sep := s.ep(t)
	requireExact(t, req.CR.CR.Accept(sep, pattern(max+1)), dat.InvalidParameter, dat.Arg(4))
	require.Equal(t, dat.EPUnconnected, state(t, sep))
	requireExact(t, req.CR.CR.Reject(pattern(max+1)), dat.InvalidParameter, dat.Arg(3))
	_, err = req.CR.CR.Query()
	require.NoError(t, err, "the CR is still pending")

	require.NoError(t, req.CR.CR.Accept(sep, pattern(max)))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	est := waitFor(t, c.evd, dat.ConnectionEventEstablished)
	require.Equal(t, pattern(max), est.Conn.PrivateData)
}

// Active side: "remote Consumer rejects (dat_cr_reject) ⇒ DISCONNECTED, E:
// PEER_REJECTED (DAT 2.0/DAPL: carries reject private data)".
func TestConnectPeerRejected(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	for _, pd := range [][]byte{nil, []byte("busy, try later"), pattern(maxPD(t, s.ia))} {
		t.Run(strconv.Itoa(len(pd))+" bytes of reject data", func(t *testing.T) {
			if a, _, err := c.ia.Query(); err == nil && len(pd) == 0 && testProvider != "iwarp" && a.Transport == "iwarp" {
				t.Skip("verbs over iWARP: the kernel reports an MPA reject and a TCP reset alike, so a reject without private data is NON_PEER_REJECTED (documented in dat/verbs)")
			}
			cep := c.ep(t)
			require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), []byte("hello")))
			req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			require.NoError(t, req.CR.CR.Reject(pd))
			rej := waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
			require.Same(t, cep, rej.Conn.EP)
			requirePD(t, c.ia, pd, rej.Conn.PrivateData)
			require.Equal(t, dat.EPDisconnected, state(t, cep))
		})
	}
}

// Active side: "nobody listening on the qualifier ⇒ DISCONNECTED, E:
// NON_PEER_REJECTED".
func TestConnectNonPeerRejected(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	qual := psp.Qual()
	require.NoError(t, psp.Free())
	cep := c.ep(t)
	require.NoError(t, connectTo(cep, qual, dat.TimeoutOf(eventWait), nil))
	ev := waitFor(t, c.evd, dat.ConnectionEventNonPeerRejected)
	require.Same(t, cep, ev.Conn.EP)
	require.Equal(t, dat.EPDisconnected, state(t, cep))
}

// silentPeer reads the MPA Request and never answers.
func silentPeer(t *testing.T) *rawPeer {
	return newRawPeer(t, func(_ int, conn net.Conn) {
		readMPARequest(conn)
		holdOpen(conn)
	})
}

// Active side: "consumer timeout (µs) expires first ⇒ DISCONNECTED, E:
// TIMED_OUT"; "remote host unreachable, or no response ⇒ DISCONNECTED, E:
// UNREACHABLE" (the provider's reply timeout, 1 s on lo-fast).
func TestConnectTimeouts(t *testing.T) {
	cases := []struct {
		rule    string
		ia      string
		timeout dat.Timeout
		want    dat.EventNumber
	}{
		{"a peer that never answers, consumer timeout: TIMED_OUT", "lo", dat.TimeoutOf(50 * time.Millisecond), dat.ConnectionEventTimedOut},
		{"consumer timeout shorter than the provider's: TIMED_OUT", "lo-fast", dat.TimeoutOf(50 * time.Millisecond), dat.ConnectionEventTimedOut},
		{"no consumer timeout, provider gives up: UNREACHABLE", "lo-fast", dat.TimeoutInfinite, dat.ConnectionEventUnreachable},
		{"consumer timeout longer than the provider's: UNREACHABLE", "lo-fast", dat.TimeoutOf(eventWait), dat.ConnectionEventUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			c := newSide(t, tc.ia)
			peer := silentPeer(t)
			cep := c.ep(t)
			require.NoError(t, connectTo(cep, peer.qual(), tc.timeout, nil))
			ev := waitFor(t, c.evd, tc.want)
			require.Same(t, cep, ev.Conn.EP)
			require.Equal(t, dat.EPDisconnected, state(t, cep))
		})
	}
}

// Synchronous returns of dat_ep_connect: an invalid call leaves the EP
// UNCONNECTED.
func TestConnectReturns(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	ep := c.ep(t)
	q := psp.Qual()
	cases := []struct {
		rule    string
		addr    netip.Addr
		qual    dat.ConnQual
		timeout dat.Timeout
		pd      []byte
		qos     dat.QoS
		flags   dat.ConnectFlags
		typ     dat.Return
		sub     dat.Subtype
	}{
		{"DAT_MODEL_NOT_SUPPORTED: qos HIGH_THROUGHPUT", loopback, q, dat.TimeoutInfinite, nil, dat.QoSHighThroughput, 0, dat.ModelNotSupported, 0},
		{"DAT_MODEL_NOT_SUPPORTED: qos LOW_LATENCY", loopback, q, dat.TimeoutInfinite, nil, dat.QoSLowLatency, 0, dat.ModelNotSupported, 0},
		{"DAT_MODEL_NOT_SUPPORTED: qos ECONOMY", loopback, q, dat.TimeoutInfinite, nil, dat.QoSEconomy, 0, dat.ModelNotSupported, 0},
		{"DAT_MODEL_NOT_SUPPORTED: qos PREMIUM", loopback, q, dat.TimeoutInfinite, nil, dat.QoSPremium, 0, dat.ModelNotSupported, 0},
		{"DAT_MODEL_NOT_SUPPORTED: MULTIPATH_REQUESTED without multipath", loopback, q, dat.TimeoutInfinite, nil, 0, dat.ConnectMultipathRequested, dat.ModelNotSupported, 0},
		{"DAT_MODEL_NOT_SUPPORTED: MULTIPATH_REQUIRED without multipath", loopback, q, dat.TimeoutInfinite, nil, 0, dat.ConnectMultipathRequired, dat.ModelNotSupported, 0},
		{"DAT_INVALID_PARAMETER: qualifier 0", loopback, 0, dat.TimeoutInfinite, nil, 0, 0, dat.InvalidParameter, dat.Arg(3)},
		{"DAT_INVALID_PARAMETER: qualifier 65536", loopback, 65536, dat.TimeoutInfinite, nil, 0, 0, dat.InvalidParameter, dat.Arg(3)},
		{"DAT_INVALID_PARAMETER: qualifier 2^40", loopback, 1 << 40, dat.TimeoutInfinite, nil, 0, 0, dat.InvalidParameter, dat.Arg(3)},
		{"DAT_INVALID_PARAMETER: timeout 0", loopback, q, 0, nil, 0, 0, dat.InvalidParameter, dat.Arg(4)},
		{"DAT_INVALID_PARAMETER: private data beyond the provider's maximum", loopback, q, dat.TimeoutInfinite, pattern(maxPD(t, c.ia) + 1), 0, 0, dat.InvalidParameter, dat.Arg(6)},
		{"DAT_INVALID_ADDRESS: no remote address", netip.Addr{}, q, dat.TimeoutInfinite, nil, 0, 0, dat.InvalidAddress, 0},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			err := ep.Connect(tc.addr, tc.qual, tc.timeout, tc.pd, tc.qos, tc.flags)
			requireCode(t, err, tc.typ, tc.sub)
			require.Equal(t, dat.EPUnconnected, state(t, ep), "a refused connect leaves the EP alone")
		})
	}
	// Nothing above reached the PSP.
	_, err := s.evd.Dequeue()
	requireCode(t, err, dat.QueueEmpty, 0)
}

// Active side: "≠ UNCONNECTED: connect ⇒ unchanged, R: DAT_INVALID_STATE", with
// the subtype naming the EP's state (as DAPL's dapls_ep_state_subtype maps it).
func TestConnectInvalidState(t *testing.T) {
	for _, st := range reachableStates {
		if st.state == dat.EPUnconnected {
			continue
		}
		t.Run(st.state.String(), func(t *testing.T) {
			c, s := newSide(t, "lo"), newSide(t, "lo")
			ep := st.make(t, c, s)
			requireExact(t, connectTo(ep, 4791, dat.TimeoutInfinite, nil), dat.InvalidState, stateSubtype[st.state])
			require.Equal(t, st.state, state(t, ep))
		})
	}
}

// stateSubtype is the state subtype DAPL's dapls_ep_state_subtype gives
// for an EP in state S.
var stateSubtype = map[dat.EPState]dat.Subtype{
	dat.EPUnconnected:                dat.StateEPUnconnected,
	dat.EPReserved:                   dat.StateEPReserved,
	dat.EPPassiveConnectionPending:   dat.StateEPPassConnPend,
	dat.EPActiveConnectionPending:    dat.StateEPActConnPending,
	dat.EPTentativeConnectionPending: dat.StateEPTentConnPend,
	dat.EPConnected:                  dat.StateEPConnected,
	dat.EPDisconnectPending:          dat.StateEPDiscPending,
	dat.EPDisconnected:               dat.StateEPDisconnected,
	dat.EPCompletionPending:          dat.StateEPComplPending,
}

// Teardown: "CONNECTED: dat_ep_disconnect(GRACEFUL) ⇒ DISCONNECT_PENDING →
// DISCONNECTED, E: DISCONNECTED"; the peer, closed cleanly, sees
// DISCONNECTED too (not BROKEN). Either side may start it.
func TestDisconnectGraceful(t *testing.T) {
	for _, activeCloses := range []bool{true, false} {
		name := "passive side disconnects"
		if activeCloses {
			name = "active side disconnects"
		}
		t.Run(name, func(t *testing.T) {
			c, s := newSide(t, "lo"), newSide(t, "lo")
			cep, sep, _ := connected(t, c, s, nil, nil)
			local, peer := c, s
			lep, pep := cep, sep
			if !activeCloses {
				local, peer, lep, pep = s, c, sep, cep
			}
			require.NoError(t, lep.Disconnect(dat.CloseGraceful))
			st := state(t, lep)
			require.Contains(t, []dat.EPState{dat.EPDisconnectPending, dat.EPDisconnected}, st)
			ev := waitFor(t, local.evd, dat.ConnectionEventDisconnected)
			require.Same(t, lep, ev.Conn.EP)
			require.Equal(t, dat.EPDisconnected, state(t, lep))
			pev := waitFor(t, peer.evd, dat.ConnectionEventDisconnected)
			require.Same(t, pep, pev.Conn.EP)
			require.NoError(t, pev.Conn.Err, "a clean close is not a failure")
			require.Equal(t, dat.EPDisconnected, state(t, pep))
			_, err := peer.ia.AsyncEVD().Dequeue()
			requireCode(t, err, dat.QueueEmpty, 0) // no DAT_ASYNC_ERROR_EP_BROKEN
		})
	}
}

// Teardown: abrupt disconnect ⇒ DISCONNECTED at once with a local DISCONNECTED
// event; the peer learns the connection ended.
func TestDisconnectAbrupt(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	cep, sep, _ := connected(t, c, s, nil, nil)
	require.NoError(t, cep.Disconnect(dat.CloseAbrupt))
	require.Equal(t, dat.EPDisconnected, state(t, cep), "abrupt: DISCONNECTED on return")
	ev := waitFor(t, c.evd, dat.ConnectionEventDisconnected)
	require.Same(t, cep, ev.Conn.EP)
	pev, _, err := s.evd.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err)
	require.Contains(t, []dat.EventNumber{dat.ConnectionEventDisconnected, dat.ConnectionEventBroken}, pev.Number)
	require.Same(t, sep, pev.Conn.EP)
	require.Equal(t, dat.EPDisconnected, state(t, sep))
}

// Teardown: dat_ep_disconnect on a DISCONNECTED EP "has no effect": success and
// no event; DAT_INVALID_STATE in UNCONNECTED, RESERVED, PASSIVE_CP and
// TENTATIVE_CP; bad flags are DAT_INVALID_PARAMETER.
func TestDisconnectStates(t *testing.T) {
	t.Run("DISCONNECTED: no-op", func(t *testing.T) {
		c, s := newMarkedSide(t, "lo"), newSide(t, "lo")
		cep, _, _ := connected(t, c, s, nil, nil)
		require.NoError(t, cep.Disconnect(dat.CloseAbrupt))
		waitFor(t, c.evd, dat.ConnectionEventDisconnected)
		require.NoError(t, cep.Disconnect(dat.CloseAbrupt))
		require.NoError(t, cep.Disconnect(dat.CloseGraceful))
		require.Equal(t, dat.EPDisconnected, state(t, cep))
		requireNothingQueued(t, c.evd)
	})
	for _, st := range reachableStates {
		switch st.state {
		case dat.EPUnconnected, dat.EPReserved, dat.EPPassiveConnectionPending, dat.EPTentativeConnectionPending:
		default:
			continue
		}
		t.Run(st.state.String()+": DAT_INVALID_STATE", func(t *testing.T) {
			c, s := newSide(t, "lo"), newSide(t, "lo")
			ep := st.make(t, c, s)
			for _, f := range []dat.CloseFlags{dat.CloseAbrupt, dat.CloseGraceful} {
				requireExact(t, ep.Disconnect(f), dat.InvalidState, stateSubtype[st.state])
				require.Equal(t, st.state, state(t, ep))
			}
		})
	}
	t.Run("DAT_INVALID_PARAMETER: close flags", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		cep, _, _ := connected(t, c, s, nil, nil)
		requireCode(t, cep.Disconnect(9), dat.InvalidParameter, 0)
		require.Equal(t, dat.EPConnected, state(t, cep))
	})
}

// gatedPeer reads the MPA Request, reports it on got, and answers with an
// accepting Reply only once release is closed; wrote is closed after the
// Reply was written (or failed).
type gatedPeer struct {
	*rawPeer
	got       chan struct{}
	release   chan struct{}
	wrote     chan struct{}
	releaseFn func() // closes release once
}

func newGatedPeer(t *testing.T) *gatedPeer {
	g := &gatedPeer{got: make(chan struct{}, 1), release: make(chan struct{}), wrote: make(chan struct{})}
	var once sync.Once
	g.rawPeer = newRawPeer(t, func(i int, conn net.Conn) {
		if i > 0 {
			holdOpen(conn)
			return
		}
		if _, _, _, err := readMPARequest(conn); err != nil {
			close(g.wrote)
			return
		}
		g.got <- struct{}{}
		<-g.release
		conn.Write(mpaReply(false, []byte("too late")))
		close(g.wrote)
		holdOpen(conn)
	})
	// Runs before the peer's own cleanup, so its handler never blocks it.
	t.Cleanup(func() { once.Do(func() { close(g.release) }) })
	g.releaseFn = func() { once.Do(func() { close(g.release) }) }
	return g
}

// Teardown (dat.EP.Disconnect): "ACTIVE_CONNECTION_PENDING: establishment is
// aborted, DISCONNECTED with a DISCONNECTED event" — and an answer that
// arrives afterwards does not establish the connection.
func TestDisconnectAbortsActiveConnectionPending(t *testing.T) {
	for _, f := range []dat.CloseFlags{dat.CloseAbrupt, dat.CloseGraceful} {
		t.Run(closeName(f), func(t *testing.T) {
			c := newMarkedSide(t, "lo")
			peer := newGatedPeer(t)
			cep := c.ep(t)
			require.NoError(t, connectTo(cep, peer.qual(), dat.TimeoutInfinite, nil))
			select {
			case <-peer.got:
			case <-time.After(eventWait):
				t.Fatal("the peer never received the MPA Request")
			}
			require.Equal(t, dat.EPActiveConnectionPending, state(t, cep))
			require.NoError(t, cep.Disconnect(f))
			require.Equal(t, dat.EPDisconnected, state(t, cep))
			ev := waitFor(t, c.evd, dat.ConnectionEventDisconnected)
			require.Same(t, cep, ev.Conn.EP)

			peer.releaseFn()
			select {
			case <-peer.wrote:
			case <-time.After(eventWait):
				t.Fatal("the peer never answered")
			}
			requireNothingQueued(t, c.evd)
			require.Equal(t, dat.EPDisconnected, state(t, cep), "no ESTABLISHED after the abort")
		})
	}
}

func closeName(f dat.CloseFlags) string {
	if f == dat.CloseGraceful {
		return "DAT_CLOSE_GRACEFUL"
	}
	return "DAT_CLOSE_ABRUPT"
}

// Reuse, dat_ep_reset: DISCONNECTED ⇒ UNCONNECTED, and the EP can connect
// again; on UNCONNECTED it does nothing; any other state is
// DAT_INVALID_STATE.
func TestReset(t *testing.T) {
	t.Run("DISCONNECTED: back to UNCONNECTED, and connects again", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		psp := s.psp(t)
		cep := c.ep(t)
		for round := 0; round < 3; round++ {
			require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), []byte{byte(round)}))
			req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			crp, err := req.CR.CR.Query()
			require.NoError(t, err)
			requirePD(t, s.ia, []byte{byte(round)}, crp.PrivateData)
			if round == 1 {
				// A failed attempt also leaves the EP DISCONNECTED. (With
				// data: verbs over iWARP cannot tell an empty reject from
				// a reset.)
				require.NoError(t, req.CR.CR.Reject([]byte("no")))
				waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
			} else {
				require.NoError(t, req.CR.CR.Accept(s.ep(t), nil))
				waitFor(t, s.evd, dat.ConnectionEventEstablished)
				waitFor(t, c.evd, dat.ConnectionEventEstablished)
				require.NoError(t, cep.Disconnect(dat.CloseGraceful))
				waitFor(t, c.evd, dat.ConnectionEventDisconnected)
				waitFor(t, s.evd, dat.ConnectionEventDisconnected)
			}
			require.Equal(t, dat.EPDisconnected, state(t, cep))
			require.NoError(t, cep.Reset())
			require.Equal(t, dat.EPUnconnected, state(t, cep))
			p, err := cep.Query()
			require.NoError(t, err)
			require.False(t, p.RemoteAddr.IsValid(), "reset forgets the old remote end")
		}
	})
	for _, st := range reachableStates {
		want := dat.Subtype(0)
		if st.state != dat.EPUnconnected {
			want = stateSubtype[st.state]
		}
		name := st.state.String() + ": DAT_INVALID_STATE"
		if st.state == dat.EPUnconnected {
			name = st.state.String() + ": no-op"
		}
		if st.state == dat.EPDisconnected {
			continue // covered above
		}
		t.Run(name, func(t *testing.T) {
			c, s := newSide(t, "lo"), newSide(t, "lo")
			ep := st.make(t, c, s)
			err := ep.Reset()
			if want == 0 {
				require.NoError(t, err)
			} else {
				requireExact(t, err, dat.InvalidState, want)
			}
			require.Equal(t, st.state, state(t, ep))
		})
	}
}

// dat_ep_free: DAT_INVALID_STATE in RESERVED, PASSIVE_CP and
// TENTATIVE_CP; an EP in any other state is freed, a connection torn down
// (the peer sees DISCONNECTED or BROKEN).
func TestEPFreeStates(t *testing.T) {
	for _, st := range reachableStates {
		switch st.state {
		case dat.EPReserved, dat.EPPassiveConnectionPending, dat.EPTentativeConnectionPending:
			t.Run(st.state.String()+": DAT_INVALID_STATE", func(t *testing.T) {
				c, s := newSide(t, "lo"), newSide(t, "lo")
				ep := st.make(t, c, s)
				requireExact(t, ep.Free(), dat.InvalidState, stateSubtype[st.state])
				require.Equal(t, st.state, state(t, ep), "the EP still exists")
			})
		default:
			t.Run(st.state.String()+": freed", func(t *testing.T) {
				c, s := newSide(t, "lo"), newSide(t, "lo")
				ep := st.make(t, c, s)
				require.NoError(t, ep.Free())
				_, err := ep.GetStatus()
				requireExact(t, err, dat.InvalidHandle, dat.HandleEP)
			})
		}
	}
	t.Run("CONNECTED: the peer sees the connection end", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		cep, sep, _ := connected(t, c, s, nil, nil)
		require.NoError(t, sep.Free())
		ev, _, err := c.evd.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err)
		require.Contains(t, []dat.EventNumber{dat.ConnectionEventDisconnected, dat.ConnectionEventBroken}, ev.Number)
		require.Same(t, cep, ev.Conn.EP)
		require.Equal(t, dat.EPDisconnected, state(t, cep))
		require.NoError(t, s.evd.Free(), "the freed EP released its EVD") // s.evd had only sep
	})
}

// Teardown: a peer closing an established connection cleanly gives the local
// EP a DISCONNECTED event (BROKEN is for failures).
func TestPeerClosesConnection(t *testing.T) {
	t.Run("a DAT peer disconnects gracefully", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		cep, sep, _ := connected(t, c, s, nil, nil)
		require.NoError(t, sep.Disconnect(dat.CloseGraceful))
		ev := waitFor(t, c.evd, dat.ConnectionEventDisconnected)
		require.Same(t, cep, ev.Conn.EP)
		require.Equal(t, dat.EPDisconnected, state(t, cep))
	})
	t.Run("a raw peer closes after ESTABLISHED", func(t *testing.T) {
		c := newSide(t, "lo")
		closeNow := make(chan struct{})
		var once sync.Once
		peer := newRawPeer(t, func(_ int, conn net.Conn) {
			if _, _, _, err := readMPARequest(conn); err != nil {
				return
			}
			conn.Write(mpaReply(false, nil))
			<-closeNow
			conn.Close()
		})
		t.Cleanup(func() { once.Do(func() { close(closeNow) }) })
		cep := c.ep(t)
		require.NoError(t, connectTo(cep, peer.qual(), dat.TimeoutOf(eventWait), nil))
		waitFor(t, c.evd, dat.ConnectionEventEstablished)
		once.Do(func() { close(closeNow) })
		ev := waitFor(t, c.evd, dat.ConnectionEventDisconnected)
		require.Same(t, cep, ev.Conn.EP)
		require.Equal(t, dat.EPDisconnected, state(t, cep))
		_, err := c.ia.AsyncEVD().Dequeue()
		requireCode(t, err, dat.QueueEmpty, 0)
	})
	t.Run("a raw peer closes right behind its Reply", func(t *testing.T) {
		// The close may reach the provider before dat has turned the
		// Reply into ESTABLISHED; the EP must still end DISCONNECTED with
		// both events, in order.
		c := newSide(t, "lo")
		peer := newRawPeer(t, func(_ int, conn net.Conn) {
			if _, _, _, err := readMPARequest(conn); err != nil {
				return
			}
			conn.Write(mpaReply(false, nil))
			conn.Close()
		})
		for i := 0; i < 20; i++ {
			if i%2 == 1 {
				// Widen the window between CONNECTED and ESTABLISHED,
				// so that the close lands in it.
				restore := dat.SetHookBeforeEstablished(func() { time.Sleep(20 * time.Millisecond) })
				defer restore()
			} else {
				dat.SetHookBeforeEstablished(nil)
			}
			cep := c.ep(t)
			require.NoError(t, connectTo(cep, peer.qual(), dat.TimeoutOf(eventWait), nil))
			ev, _, err := c.evd.Wait(dat.TimeoutOf(eventWait), 1)
			require.NoError(t, err)
			if ev.Number == dat.ConnectionEventNonPeerRejected {
				// The close overtook the Reply: a refused connection.
				require.Equal(t, dat.EPDisconnected, state(t, cep))
				continue
			}
			require.Equal(t, dat.ConnectionEventEstablished, ev.Number, "iteration %d", i)
			ev = waitFor(t, c.evd, dat.ConnectionEventDisconnected)
			require.Same(t, cep, ev.Conn.EP)
			require.Equal(t, dat.EPDisconnected, state(t, cep))
			require.NoError(t, cep.Free())
		}
	})
}

// Reservation: dat_rsp_create ⇒ RESERVED; dat_rsp_free ⇒ UNCONNECTED; a
// request ⇒ PASSIVE_CONNECTION_PENDING with sp_handle NULL "because the
// RSP is destroyed by this event" and CR local_ep_handle = the EP; accept
// with DAT_HANDLE_NULL; reject ⇒ UNCONNECTED; EP not UNCONNECTED ⇒
// DAT_INVALID_STATE.
func TestRSP(t *testing.T) {
	t.Run("dat_rsp_create ⇒ RESERVED, dat_rsp_free ⇒ UNCONNECTED", func(t *testing.T) {
		s := newSide(t, "lo")
		ep := s.ep(t)
		rsp, err := s.ia.CreateRSP(0, ep, s.evd)
		require.NoError(t, err)
		require.NotZero(t, rsp.Qual())
		require.Equal(t, dat.EPReserved, state(t, ep))
		require.NoError(t, rsp.Free())
		require.Equal(t, dat.EPUnconnected, state(t, ep))
		requireExact(t, rsp.Free(), dat.InvalidHandle, dat.HandleRSP)
		// The EP can be reserved again.
		rsp, err = s.ia.CreateRSP(0, ep, s.evd)
		require.NoError(t, err)
		require.NoError(t, rsp.Free())
	})
	// rspRequest reserves an EP, sends it a request and returns the
	// request event.
	rspRequest := func(t *testing.T, c, s side, pd []byte) (sep, cep *dat.EP, rsp *dat.RSP, ev dat.Event) {
		sep = s.ep(t)
		rsp, err := s.ia.CreateRSP(0, sep, s.evd)
		require.NoError(t, err)
		cep = c.ep(t)
		require.NoError(t, connectTo(cep, rsp.Qual(), dat.TimeoutOf(eventWait), pd))
		ev = waitFor(t, s.evd, dat.ConnectionRequestEvent)
		return sep, cep, rsp, ev
	}
	t.Run("request ⇒ PASSIVE_CONNECTION_PENDING, SP NULL, CR names the EP; accept with NULL EP", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		sep, cep, rsp, ev := rspRequest(t, c, s, []byte("to the RSP"))
		require.Nil(t, ev.CR.SP)
		require.Equal(t, rsp.Qual(), ev.CR.Qual)
		require.Equal(t, dat.EPPassiveConnectionPending, state(t, sep))
		crp, err := ev.CR.CR.Query()
		require.NoError(t, err)
		require.Same(t, sep, crp.LocalEP)
		require.Nil(t, crp.SP)
		requirePD(t, s.ia, []byte("to the RSP"), crp.PrivateData)
		requireExact(t, rsp.Free(), dat.InvalidHandle, dat.HandleRSP) // consumed by the request
		requireExact(t, ev.CR.CR.Accept(s.ep(t), nil), dat.InvalidHandle, dat.HandleEP)

		require.NoError(t, ev.CR.CR.Accept(nil, []byte("welcome")))
		est := waitFor(t, s.evd, dat.ConnectionEventEstablished)
		require.Same(t, sep, est.Conn.EP)
		cest := waitFor(t, c.evd, dat.ConnectionEventEstablished)
		require.Same(t, cep, cest.Conn.EP)
		requirePD(t, s.ia, []byte("welcome"), cest.Conn.PrivateData)
		require.Equal(t, dat.EPConnected, state(t, sep))
	})
	t.Run("accept naming the RSP's own EP", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		sep, _, _, ev := rspRequest(t, c, s, nil)
		require.NoError(t, ev.CR.CR.Accept(sep, nil))
		waitFor(t, s.evd, dat.ConnectionEventEstablished)
		waitFor(t, c.evd, dat.ConnectionEventEstablished)
	})
	t.Run("reject ⇒ UNCONNECTED", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		sep, cep, _, ev := rspRequest(t, c, s, nil)
		require.NoError(t, ev.CR.CR.Reject([]byte("no")))
		require.Equal(t, dat.EPUnconnected, state(t, sep), "the EP is back under consumer control")
		rej := waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
		require.Same(t, cep, rej.Conn.EP)
		requirePD(t, s.ia, []byte("no"), rej.Conn.PrivateData)
		_, err := s.ia.CreateRSP(0, sep, s.evd)
		require.NoError(t, err, "and can be reserved again")
	})
	for _, st := range reachableStates {
		if st.state == dat.EPUnconnected {
			continue
		}
		t.Run("dat_rsp_create on "+st.state.String()+": DAT_INVALID_STATE", func(t *testing.T) {
			c, s := newSide(t, "lo"), newSide(t, "lo")
			ep := st.make(t, c, s)
			evd := s.evd
			if ep != nil {
				p, err := ep.Query()
				require.NoError(t, err)
				if p.IA != s.ia {
					evd = c.evd
				}
				_, err = p.IA.CreateRSP(0, ep, evd)
				requireExact(t, err, dat.InvalidState, stateSubtype[st.state])
			}
			require.Equal(t, st.state, state(t, ep))
		})
	}
	t.Run("dat_rsp_create: DAT_CONN_QUAL_IN_USE", func(t *testing.T) {
		s := newSide(t, "lo")
		psp := s.psp(t)
		ep := s.ep(t)
		_, err := s.ia.CreateRSP(psp.Qual(), ep, s.evd)
		requireCode(t, err, dat.ConnQualInUse, 0)
		require.ErrorIs(t, err, dat.ErrConnQualInUse)
		require.Equal(t, dat.EPUnconnected, state(t, ep))
	})
}

// A request on a PSP with DAT_PSP_PROVIDER_FLAG comes with a provider EP
// in TENTATIVE_CONNECTION_PENDING, created with default attributes and no
// PZ; accept needs it configured (DAT_INVALID_STATE/EP_NOTREADY without a
// PZ, as for any EP created without one); reject returns it to the
// provider, which frees it.
func TestPSPProvider(t *testing.T) {
	request := func(t *testing.T, c, s side) (cep, pep *dat.EP, cr *dat.CR) {
		psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPProvider, nil)
		require.NoError(t, err)
		cep = c.ep(t)
		require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), []byte("provider")))
		ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
		require.Same(t, psp, ev.CR.SP)
		crp, err := ev.CR.CR.Query()
		require.NoError(t, err)
		require.NotNil(t, crp.LocalEP)
		return cep, crp.LocalEP, ev.CR.CR
	}
	t.Run("the provider EP: TENTATIVE_CONNECTION_PENDING, no PZ, no EVDs", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		_, pep, _ := request(t, c, s)
		p, err := pep.Query()
		require.NoError(t, err)
		require.Equal(t, dat.EPTentativeConnectionPending, p.State)
		require.Same(t, s.ia, p.IA)
		require.Nil(t, p.PZ)
		require.Nil(t, p.RecvEVD)
		require.Nil(t, p.RequestEVD)
		require.Nil(t, p.ConnectEVD)
	})
	t.Run("accept before it has a PZ: DAT_INVALID_STATE/EP_NOTREADY; after dat_ep_modify it connects", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		cep, pep, cr := request(t, c, s)
		err := cr.Accept(nil, nil)
		requireExact(t, err, dat.InvalidState, dat.StateEPNotReady)
		require.ErrorIs(t, err, dat.ErrEPNotReady)
		require.Equal(t, dat.EPTentativeConnectionPending, state(t, pep))

		p, err := pep.Query()
		require.NoError(t, err)
		p.PZ, p.RecvEVD, p.RequestEVD, p.ConnectEVD = s.pz, s.evd, s.evd, s.evd
		p.Attr.MaxRecvDTOs, p.Attr.MaxRecvIOV = 8, 1
		p.Attr.MaxRequestDTOs, p.Attr.MaxRequestIOV = 8, 1
		mask := dat.FieldPZ | dat.FieldRecvEVD | dat.FieldRequestEVD | dat.FieldConnectEVD |
			dat.FieldMaxRecvDTOs | dat.FieldMaxRecvIOV | dat.FieldMaxRequestDTOs | dat.FieldMaxRequestIOV
		require.NoError(t, pep.Modify(mask, &p))
		require.Equal(t, dat.EPTentativeConnectionPending, state(t, pep))

		require.NoError(t, cr.Accept(nil, []byte("from the provider EP")))
		est := waitFor(t, s.evd, dat.ConnectionEventEstablished)
		require.Same(t, pep, est.Conn.EP)
		cest := waitFor(t, c.evd, dat.ConnectionEventEstablished)
		require.Same(t, cep, cest.Conn.EP)
		requirePD(t, s.ia, []byte("from the provider EP"), cest.Conn.PrivateData)
		require.Equal(t, dat.EPConnected, state(t, pep))
		requireExact(t, cr.Accept(nil, nil), dat.InvalidHandle, dat.HandleCR)
	})
	t.Run("reject frees the provider EP", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		cep, pep, cr := request(t, c, s)
		require.NoError(t, cr.Reject([]byte("nope")))
		_, err := pep.Query()
		requireExact(t, err, dat.InvalidHandle, dat.HandleEP)
		rej := waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
		require.Same(t, cep, rej.Conn.EP)
		requirePD(t, s.ia, []byte("nope"), rej.Conn.PrivateData)
	})
	t.Run("accept naming a consumer EP: DAT_INVALID_HANDLE (the request carries an EP)", func(t *testing.T) {
		c, s := newSide(t, "lo"), newSide(t, "lo")
		_, _, cr := request(t, c, s)
		requireExact(t, cr.Accept(s.ep(t), nil), dat.InvalidHandle, dat.HandleEP)
	})
}

// Passive side, dat_cr_accept for a consumer-flag PSP: the EP must be
// given (DAT_INVALID_HANDLE), live and of the CR's IA (DAT_INVALID_HANDLE),
// UNCONNECTED (DAT_INVALID_STATE) and ready (EP_NOTREADY); a CR is consumed
// by accept or reject, and using it again is DAT_INVALID_HANDLE/CR. Failed
// accepts leave the CR pending.
func TestCRAcceptRules(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	other := newSide(t, "lo")
	psp := s.psp(t)
	cep := c.ep(t)
	require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	cr := waitFor(t, s.evd, dat.ConnectionRequestEvent).CR.CR

	freed := s.ep(t)
	require.NoError(t, freed.Free())
	noPZ, err := s.ia.CreateEP(nil, s.evd, s.evd, s.evd, nil)
	require.NoError(t, err)
	reserved := s.ep(t)
	_, err = s.ia.CreateRSP(0, reserved, s.evd)
	require.NoError(t, err)
	_, sConnected, _ := connected(t, other, s, nil, nil)

	cases := []struct {
		rule string
		ep   *dat.EP
		typ  dat.Return
		sub  dat.Subtype
	}{
		{"DAT_INVALID_HANDLE: no EP for a request that carries none", nil, dat.InvalidHandle, dat.HandleEP},
		{"DAT_INVALID_HANDLE: a freed EP", freed, dat.InvalidHandle, dat.HandleEP},
		{"DAT_INVALID_HANDLE: an EP of another IA", other.ep(t), dat.InvalidHandle, dat.HandleEP},
		{"DAT_INVALID_STATE: EP RESERVED", reserved, dat.InvalidState, dat.StateEPReserved},
		{"DAT_INVALID_STATE: EP CONNECTED", sConnected, dat.InvalidState, dat.StateEPConnected},
		{"DAT_INVALID_STATE: EP without a PZ is not ready", noPZ, dat.InvalidState, dat.StateEPNotReady},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			requireExact(t, cr.Accept(tc.ep, nil), tc.typ, tc.sub)
			_, err := cr.Query()
			require.NoError(t, err, "the CR is still pending")
		})
	}
	t.Run("a good EP; the CR is then consumed", func(t *testing.T) {
		sep := s.ep(t)
		require.NoError(t, cr.Accept(sep, nil))
		require.Contains(t, []dat.EPState{dat.EPCompletionPending, dat.EPConnected}, state(t, sep))
		waitFor(t, c.evd, dat.ConnectionEventEstablished)
		requireExact(t, cr.Accept(s.ep(t), nil), dat.InvalidHandle, dat.HandleCR)
		requireExact(t, cr.Reject(nil), dat.InvalidHandle, dat.HandleCR)
		requireExact(t, second(cr.Query()), dat.InvalidHandle, dat.HandleCR)
	})
	t.Run("a rejected CR is consumed too", func(t *testing.T) {
		ep2 := c.ep(t)
		require.NoError(t, connectTo(ep2, psp.Qual(), dat.TimeoutOf(eventWait), nil))
		var cr2 *dat.CR
		for cr2 == nil {
			ev, _, err := s.evd.Wait(dat.TimeoutOf(eventWait), 1)
			require.NoError(t, err)
			if ev.Number == dat.ConnectionRequestEvent {
				cr2 = ev.CR.CR
			}
		}
		require.NoError(t, cr2.Reject(nil))
		requireExact(t, cr2.Reject(nil), dat.InvalidHandle, dat.HandleCR)
		requireExact(t, cr2.Accept(s.ep(t), nil), dat.InvalidHandle, dat.HandleCR)
	})
}

// dat_psp_create: "DAT_CONN_QUAL_IN_USE: the specified Connection Qualifier
// is in use"; invalid qualifiers, flags and backlog are
// DAT_INVALID_PARAMETER.
func TestPSPCreate(t *testing.T) {
	s, other := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	for _, ia := range []*dat.IA{s.ia, other.ia} {
		evd := s.evd
		if ia == other.ia {
			evd = other.evd
		}
		_, err := ia.CreatePSP(psp.Qual(), evd, dat.PSPConsumer, nil)
		requireCode(t, err, dat.ConnQualInUse, 0)
		require.ErrorIs(t, err, dat.ErrConnQualInUse)
	}
	cases := []struct {
		rule  string
		qual  dat.ConnQual
		flags dat.PSPFlags
		opts  *dat.PSPOptions
	}{
		{"qualifier 0 (use dat_psp_create_any)", 0, dat.PSPConsumer, nil},
		{"qualifier beyond 65535", 1 << 16, dat.PSPConsumer, nil},
		{"unknown PSP flags", 4000, 7, nil},
		{"negative backlog", 4000, dat.PSPConsumer, &dat.PSPOptions{Backlog: -1}},
	}
	for _, tc := range cases {
		t.Run("DAT_INVALID_PARAMETER: "+tc.rule, func(t *testing.T) {
			_, err := s.ia.CreatePSP(tc.qual, s.evd, tc.flags, tc.opts)
			requireCode(t, err, dat.InvalidParameter, 0)
		})
	}
	t.Run("DAT_INVALID_HANDLE: EVD without the CR stream", func(t *testing.T) {
		conn, err := s.ia.CreateEVD(4, dat.EVDConnection)
		require.NoError(t, err)
		_, err = s.ia.CreatePSPAny(conn, dat.PSPConsumer, nil)
		requireExact(t, err, dat.InvalidHandle, dat.HandleEVDCR)
	})
}

// PSPOptions.Backlog: "Requests beyond it are refused and their
// initiators see DAT_CONNECTION_EVENT_NON_PEER_REJECTED" (on the active
// side a full SP backlog is a non-peer reject); settling a request frees
// its slot.
func TestPSPBacklog(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, &dat.PSPOptions{Backlog: 1})
	require.NoError(t, err)
	first := c.ep(t)
	require.NoError(t, connectTo(first, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	req := waitFor(t, s.evd, dat.ConnectionRequestEvent)

	over := c.ep(t)
	require.NoError(t, connectTo(over, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	rej := waitFor(t, c.evd, dat.ConnectionEventNonPeerRejected)
	require.Same(t, over, rej.Conn.EP)
	require.Equal(t, dat.EPDisconnected, state(t, over))

	require.NoError(t, req.CR.CR.Reject([]byte("no")))
	waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
	third := c.ep(t)
	require.NoError(t, connectTo(third, psp.Qual(), dat.TimeoutOf(eventWait), []byte("third")))
	req = waitFor(t, s.evd, dat.ConnectionRequestEvent)
	crp, err := req.CR.CR.Query()
	require.NoError(t, err)
	requirePD(t, s.ia, []byte("third"), crp.PrivateData)
}

// PSPOptions.SharePort: "listens with SO_REUSEPORT so several processes
// can serve one qualifier" — two PSPs on one qualifier both succeed, and a
// request reaches one of them; without it the second is
// DAT_CONN_QUAL_IN_USE.
func TestPSPSharePort(t *testing.T) {
	iwarpOnly(t, "rdma_cm cannot share a port")
	a, b, plain, c := newSide(t, "lo"), newSide(t, "lo"), newSide(t, "lo"), newSide(t, "lo")
	share := &dat.PSPOptions{SharePort: true}
	pa, err := a.ia.CreatePSPAny(a.evd, dat.PSPConsumer, share)
	require.NoError(t, err)
	pb, err := b.ia.CreatePSP(pa.Qual(), b.evd, dat.PSPConsumer, share)
	require.NoError(t, err)
	require.Equal(t, pa.Qual(), pb.Qual())
	_, err = plain.ia.CreatePSP(pa.Qual(), plain.evd, dat.PSPConsumer, nil)
	requireCode(t, err, dat.ConnQualInUse, 0)

	cep := c.ep(t)
	require.NoError(t, connectTo(cep, pa.Qual(), dat.TimeoutOf(eventWait), []byte("shared")))
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	got := make(chan dat.Event, 2)
	var wg sync.WaitGroup
	for _, evd := range []*dat.EVD{a.evd, b.evd} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ev, _, err := evd.WaitContext(ctx, 1); err == nil {
				got <- ev
			}
		}()
	}
	var req dat.Event
	select {
	case req = <-got:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	require.Equal(t, dat.ConnectionRequestEvent, req.Number)
	require.Contains(t, []*dat.PSP{pa, pb}, req.CR.SP)
	require.NoError(t, req.CR.CR.Reject([]byte("seen")))
	rej := waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
	requirePD(t, c.ia, []byte("seen"), rej.Conn.PrivateData)
}

// Teardown, DISCONNECT_PENDING: a graceful disconnect waits for the peer's
// close; meanwhile another graceful disconnect "has no effect", connect and
// reset are DAT_INVALID_STATE/EP_DISCPENDING, and an abrupt disconnect
// ends it at once with one DISCONNECTED event.
func TestDisconnectPending(t *testing.T) {
	c := newMarkedSide(t, "lo")
	// Accepts, then never closes its half of the stream.
	peer := newRawPeer(t, func(_ int, conn net.Conn) {
		if _, _, _, err := readMPARequest(conn); err != nil {
			return
		}
		conn.Write(mpaReply(false, nil))
		holdOpen(conn)
	})
	ep := c.ep(t)
	require.NoError(t, connectTo(ep, peer.qual(), dat.TimeoutOf(eventWait), nil))
	waitFor(t, c.evd, dat.ConnectionEventEstablished)

	require.NoError(t, ep.Disconnect(dat.CloseGraceful))
	require.Equal(t, dat.EPDisconnectPending, state(t, ep))
	require.NoError(t, ep.Disconnect(dat.CloseGraceful), "graceful while DISCONNECT_PENDING: no effect")
	require.Equal(t, dat.EPDisconnectPending, state(t, ep))
	requireExact(t, connectTo(ep, peer.qual(), dat.TimeoutInfinite, nil), dat.InvalidState, dat.StateEPDiscPending)
	requireExact(t, ep.Reset(), dat.InvalidState, dat.StateEPDiscPending)

	require.NoError(t, ep.Disconnect(dat.CloseAbrupt))
	require.Equal(t, dat.EPDisconnected, state(t, ep))
	ev := waitFor(t, c.evd, dat.ConnectionEventDisconnected)
	require.Same(t, ep, ev.Conn.EP)
	requireNothingQueued(t, c.evd)
}

// Passive side: "COMPLETION_PENDING | transport cannot complete (active side gone)
// ⇒ DISCONNECTED, E: ACCEPT_COMPLETION_ERROR".
func TestAcceptCompletionError(t *testing.T) {
	s := newSide(t, "lo")
	if a, _, err := s.ia.Query(); err == nil && a.Transport != "iwarp" {
		t.Skipf("the initiator is hand-written MPA over TCP, which only an iWARP IA accepts; this IA is %s", a.Transport)
	}
	psp := s.psp(t)
	conn, err := net.DialTimeout("tcp", psp.Addr().String(), eventWait)
	require.NoError(t, err)
	_, err = conn.Write(mpaRequest([]byte("gone soon")))
	require.NoError(t, err)
	req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	// The initiator goes away with a reset before the accept.
	require.NoError(t, conn.(*net.TCPConn).SetLinger(0))
	require.NoError(t, conn.Close())

	sep := s.ep(t)
	require.NoError(t, req.CR.CR.Accept(sep, nil))
	ev := waitFor(t, s.evd, dat.ConnectionEventAcceptCompletionErr)
	require.Same(t, sep, ev.Conn.EP)
	require.Error(t, ev.Conn.Err)
	require.Equal(t, dat.EPDisconnected, state(t, sep))
	require.NoError(t, sep.Reset(), "the EP can be reused")
}
