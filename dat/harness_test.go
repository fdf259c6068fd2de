package dat_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat"
)

// Every test runs against the real pure-Go iWARP provider on 127.0.0.1,
// through the IA names of testdata/dat.conf.
func TestMain(m *testing.M) {
	if os.Getenv(dat.RegistryEnv) == "" {
		os.Setenv(dat.RegistryEnv, "testdata/dat.conf")
	}
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// The suite runs against any provider (issue: one dat suite, parametrized
// by IA). By default it uses the iwarp provider on 127.0.0.1 through
// testdata/dat.conf. To run it on another IA, point RDMANET_DAT_CONF at a
// registry whose "lo" entry opens that IA, set RDMANET_TEST_ADDR to the
// IA's address and RDMANET_TEST_PROVIDER to the provider's name; test/vm
// does this for the verbs provider on rxe0 and siw0.
var (
	loopback     = netip.MustParseAddr(envOr("RDMANET_TEST_ADDR", "127.0.0.1"))
	testProvider = envOr("RDMANET_TEST_PROVIDER", "iwarp")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// iwarpOnly skips tests that need the pure-Go iwarp provider's own
// machinery: hand-written MPA peers on TCP, or its Open options.
func iwarpOnly(t testing.TB, why string) {
	t.Helper()
	if testProvider != "iwarp" {
		t.Skipf("needs the iwarp provider (%s); running on %s", why, testProvider)
	}
}

// eventWait bounds every wait for an event in these tests.
const eventWait = 10 * time.Second

// openIA opens the named test IA and closes it abruptly at cleanup.
func openIA(t testing.TB, name string) *dat.IA {
	t.Helper()
	if name != "lo" {
		iwarpOnly(t, "IA "+name+" uses iwarp options")
	}
	ia, err := dat.OpenIA(context.Background(), name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ia.Close(dat.CloseAbrupt)) })
	return ia
}

// side is one IA with a PZ and an EVD taking every stream, which is what
// most tests need.
type side struct {
	ia  *dat.IA
	pz  *dat.PZ
	evd *dat.EVD
}

func newSide(t testing.TB, name string) side {
	t.Helper()
	ia := openIA(t, name)
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	evd, err := ia.CreateEVD(64, dat.EVDDefault)
	require.NoError(t, err)
	return side{ia: ia, pz: pz, evd: evd}
}

// ep creates an EP with default attributes whose every stream goes to the
// side's EVD.
func (s side) ep(t testing.TB) *dat.EP {
	t.Helper()
	ep, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, nil)
	require.NoError(t, err)
	return ep
}

// waitFor waits for the next event on evd and checks its number.
func waitFor(t testing.TB, evd *dat.EVD, want dat.EventNumber) dat.Event {
	t.Helper()
	ev, _, err := evd.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err, "waiting for %v", want)
	require.Equal(t, want, ev.Number, "event: %+v", ev.Conn)
	return ev
}

// state returns the EP's state.
func state(t testing.TB, ep *dat.EP) dat.EPState {
	t.Helper()
	st, err := ep.GetStatus()
	require.NoError(t, err)
	return st.State
}

// requireCode checks that err is a DAT error of the given type and, if
// sub is not NoSubtype, subtype.
func requireCode(t testing.TB, err error, typ dat.Return, sub dat.Subtype) {
	t.Helper()
	require.Error(t, err)
	var de *dat.Error
	require.True(t, errors.As(err, &de), "not a *dat.Error: %v", err)
	require.Equal(t, typ, de.Code.Type(), "type of %v", err)
	if sub != dat.NoSubtype {
		require.Equal(t, sub, de.Code.Subtype(), "subtype of %v", err)
	}
}

// connected builds a connection between a fresh client EP and a server EP
// accepted on a PSP, with the given private data each way. It returns the
// two EPs and the CR parameters the server saw.
func connected(t testing.TB, client, server side, cpd, apd []byte) (cep, sep *dat.EP, crp dat.CRParam) {
	t.Helper()
	psp, err := server.ia.CreatePSPAny(server.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	defer psp.Free()
	cep = client.ep(t)
	require.NoError(t, cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), cpd, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, server.evd, dat.ConnectionRequestEvent)
	crp, err = ev.CR.CR.Query()
	require.NoError(t, err)
	sep = server.ep(t)
	require.NoError(t, ev.CR.CR.Accept(sep, apd))
	waitFor(t, server.evd, dat.ConnectionEventEstablished)
	est := waitFor(t, client.evd, dat.ConnectionEventEstablished)
	requirePD(t, client.ia, apd, est.Conn.PrivateData)
	return cep, sep, crp
}

// rawPeer is a hand-driven TCP listener on loopback that speaks MPA from
// bytes built here (not from the provider's codec), for peers that behave
// in ways a correct provider never would. handle runs once per accepted
// connection, in order.
type rawPeer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	held []net.Conn
}

func newRawPeer(t testing.TB, handle func(i int, c net.Conn)) *rawPeer {
	t.Helper()
	iwarpOnly(t, "a hand-written MPA peer on TCP")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &rawPeer{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.held = append(p.held, c)
			p.mu.Unlock()
			p.wg.Add(1)
			go func(i int) {
				defer p.wg.Done()
				handle(i, c)
			}(i)
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *rawPeer) qual() dat.ConnQual { return dat.ConnQual(p.ln.Addr().(*net.TCPAddr).Port) }

func (p *rawPeer) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.held {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// readMPARequest reads one MPA Request frame (RFC 5044 §7.1.1) and returns
// its revision, flags and private data.
func readMPARequest(c net.Conn) (rev, flags byte, pd []byte, err error) {
	var h [20]byte
	if _, err = io.ReadFull(c, h[:]); err != nil {
		return
	}
	if string(h[:16]) != "MPA ID Req Frame" {
		return 0, 0, nil, errors.New("not an MPA Request")
	}
	pd = make([]byte, binary.BigEndian.Uint16(h[18:]))
	_, err = io.ReadFull(c, pd)
	return h[17], h[16], pd, err
}

// mpaReply builds an MPA v2 Reply (E set, rev 2) with IRD/ORD 0 and the
// given consumer data; reject sets R.
func mpaReply(reject bool, consumer []byte) []byte {
	b := []byte("MPA ID Rep Frame")
	flags := byte(0x10) // E
	if reject {
		flags |= 0x20
	}
	b = append(b, flags, 2)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(consumer)))
	b = append(b, 0, 0, 0, 0) // IRD 0, ORD 0, no P2P
	return append(b, consumer...)
}

// holdOpen keeps the connection open, reading and discarding, until the
// peer closes it.
func holdOpen(c net.Conn) { io.Copy(io.Discard, c) }

// wirePD is the private data a peer receives when sent is sent over the
// IA's transport. On iWARP (and on the iwarp provider) that is sent
// exactly. IB and RoCE connection messages have a fixed-size private-data
// field and no length, so the receiver gets the whole field: sent
// zero-padded to MaxPrivateDataSize (as in DAPL's openib_cma provider).
func wirePD(t testing.TB, ia *dat.IA, sent []byte) []byte {
	t.Helper()
	a, p, err := ia.Query()
	require.NoError(t, err)
	switch a.Transport {
	case "ib", "roce":
		require.LessOrEqual(t, len(sent), p.MaxPrivateDataSize)
		return append(append([]byte{}, sent...), make([]byte, p.MaxPrivateDataSize-len(sent))...)
	}
	if len(sent) == 0 {
		return nil
	}
	return sent
}

// requirePD checks that got is what a peer receives when sent is sent
// over the IA's transport (wirePD).
func requirePD(t testing.TB, ia *dat.IA, sent, got []byte) {
	t.Helper()
	require.True(t, bytes.Equal(wirePD(t, ia, sent), got), "private data: sent %q, got %q", sent, got)
}

// psp creates a consumer PSP on a free qualifier whose connection requests
// go to the side's EVD, and frees it when the test ends.
func (s side) psp(t testing.TB) *dat.PSP {
	t.Helper()
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	t.Cleanup(func() { psp.Free() })
	return psp
}
