package dat_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/dat/driver"
)

// freeTCPPort returns a TCP port of the test address that was free a
// moment ago (on verbs, an rdma_cm port: the two port spaces are apart,
// and one free in TCP is almost surely free there too).
func freeTCPPort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(loopback, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestConnectOptionsLocalPort: the local port of SetConnectOptions is the
// connection's, on both ends' view of it.
func TestConnectOptionsLocalPort(t *testing.T) {
	client, server := newSide(t, "lo"), newSide(t, "lo")
	psp := server.psp(t)
	port := freeTCPPort(t)
	cep := client.ep(t)
	require.NoError(t, cep.SetConnectOptions(&dat.ConnectOptions{LocalAddr: netip.AddrPortFrom(loopback, port)}))
	require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	ev := waitFor(t, server.evd, dat.ConnectionRequestEvent)
	crp, err := ev.CR.CR.Query()
	require.NoError(t, err)
	require.Equal(t, port, crp.RemoteAddr.Port(), "the server sees the client's port")
	sep := server.ep(t)
	require.NoError(t, ev.CR.CR.Accept(sep, nil))
	waitFor(t, server.evd, dat.ConnectionEventEstablished)
	waitFor(t, client.evd, dat.ConnectionEventEstablished)
	p, err := cep.Query()
	require.NoError(t, err)
	require.Equal(t, dat.PortQual(port), p.LocalPortQual)
	require.NoError(t, cep.Disconnect(dat.CloseAbrupt))
	waitFor(t, client.evd, dat.ConnectionEventDisconnected)
}

// TestConnectOptionsControl: a failing socket hook fails the connection as
// a non-peer reject carrying its error (iwarp: verbs has no socket).
func TestConnectOptionsControl(t *testing.T) {
	iwarpOnly(t, "verbs has no socket for Control")
	client, server := newSide(t, "lo"), newSide(t, "lo")
	psp := server.psp(t)
	boom := errors.New("boom")
	cep := client.ep(t)
	require.NoError(t, cep.SetConnectOptions(&dat.ConnectOptions{
		Control: func(context.Context, string, string, syscall.RawConn) error { return boom }}))
	require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	ev := waitFor(t, client.evd, dat.ConnectionEventNonPeerRejected)
	require.ErrorIs(t, ev.Conn.Err, boom)
}

// TestConnectOptionsNotSupported: a provider whose QPs take no options
// refuses a local address or a socket hook at once, and connects without
// keepalive settings it cannot apply.
func TestConnectOptionsNotSupported(t *testing.T) {
	iwarpOnly(t, "wraps the iwarp provider")
	ia, err := dat.OpenIA(context.Background(), "noopts:127.0.0.1", nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ia.Close(dat.CloseAbrupt)) })
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	evd, err := ia.CreateEVD(64, dat.EVDDefault)
	require.NoError(t, err)
	c := side{ia: ia, pz: pz, evd: evd}
	server := newSide(t, "lo")
	psp := server.psp(t)

	ep := c.ep(t)
	require.NoError(t, ep.SetConnectOptions(&dat.ConnectOptions{LocalAddr: netip.AddrPortFrom(loopback, 1)}))
	requireCode(t, connectTo(ep, psp.Qual(), dat.TimeoutOf(eventWait), nil), dat.ModelNotSupported, dat.NoSubtype)
	require.Equal(t, dat.EPUnconnected, state(t, ep))

	require.NoError(t, ep.SetConnectOptions(&dat.ConnectOptions{KeepAlive: -1}))
	require.NoError(t, connectTo(ep, psp.Qual(), dat.TimeoutOf(eventWait), nil))
	ev := waitFor(t, server.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(server.ep(t), nil))
	waitFor(t, c.evd, dat.ConnectionEventEstablished)
	require.NoError(t, ep.Disconnect(dat.CloseAbrupt))
	waitFor(t, c.evd, dat.ConnectionEventDisconnected)
}

// noOptsDriver is the iwarp provider with QPs that do not implement
// driver.OptionsConnector, as a provider written before it would.
type noOptsDriver struct{}

func (noOptsDriver) Open(ctx context.Context, args []string) (driver.IA, error) {
	d, ok := driver.Lookup("iwarp")
	if !ok {
		return nil, errors.New("no iwarp provider")
	}
	ia, err := d.Open(ctx, args)
	if err != nil {
		return nil, err
	}
	return noOptsIA{ia}, nil
}

type noOptsIA struct{ driver.IA }

func (ia noOptsIA) CreateQP(cfg driver.QPConfig) (driver.QP, error) {
	q, err := ia.IA.CreateQP(cfg)
	if err != nil {
		return nil, err
	}
	return struct{ driver.QP }{q}, nil
}

func init() { driver.Register("noopts", noOptsDriver{}) }
