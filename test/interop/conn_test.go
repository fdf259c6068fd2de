//go:build verbs && linux && cgo

package interop_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// listen creates a PSP of the passive side on a qualifier its provider
// picks (a TCP port: the iwarp provider's socket, or siw's kernel socket),
// reporting requests on p.conn. It is freed at cleanup.
func listen(t *testing.T, p *side) *dat.PSP {
	t.Helper()
	psp, err := p.ia.CreatePSPAny(p.conn, dat.PSPConsumer, nil)
	require.NoError(t, err)
	t.Cleanup(func() { psp.Free() })
	return psp
}

// request is a connection request in flight: the active EP has called
// Connect and the passive side holds the CR it produced.
type request struct {
	a, p *side
	aep  *dat.EP
	cr   *dat.CR
}

// connectTo connects a fresh active EP to psp with private data pd, waits
// for the CR on the passive side and checks that the CR carries pd
// exactly and comes from the active IA's address.
func connectTo(t *testing.T, a, p *side, psp *dat.PSP, pd []byte) *request {
	t.Helper()
	aep := a.newEP(t)
	require.NoError(t, aep.Connect(p.addr, psp.Qual(), dat.TimeoutOf(eventWait), pd, dat.QoSBestEffort, dat.ConnectDefault))
	ev := next(t, p.conn, dat.ConnectionRequestEvent)
	param, err := ev.CR.CR.Query()
	require.NoError(t, err)
	requirePD(t, a.name+" connect private data in "+p.name+"'s CR", pd, param.PrivateData)
	require.Equal(t, a.addr, param.RemoteAddr.Addr(), "requester's address in the CR")
	return &request{a: a, p: p, aep: aep, cr: ev.CR.CR}
}

// link is an established connection between active EP aep and passive
// EP pep.
type link struct {
	a, p     *side
	aep, pep *dat.EP
}

// hello is the active side's first message on every link.
var hello = []byte("hello from the MPA initiator")

// accept accepts r on a fresh passive EP with private data pd, waits for
// ESTABLISHED on both sides, checks that the active side received pd,
// and exchanges the hello.
func (r *request) accept(t *testing.T, pd []byte) *link {
	t.Helper()
	pep := r.p.newEP(t)
	// The hello's receive must be posted before the Send can arrive:
	// iWARP has no receiver-not-ready retry.
	one := newSpread(len(hello))
	buf, want := one.sink(hello, 1)
	in := r.p.register(t, buf, dat.MemPrivLocalWrite)
	require.NoError(t, pep.PostRecv(one.iov(in), helloCookie, dat.CompletionDefault))
	require.NoError(t, r.cr.Accept(pep, pd))
	ev := next(t, r.p.conn, dat.ConnectionEventEstablished)
	require.Same(t, pep, ev.Conn.EP)
	ev = next(t, r.a.conn, dat.ConnectionEventEstablished)
	require.Same(t, r.aep, ev.Conn.EP)
	requirePD(t, r.p.name+" accept private data in "+r.a.name+"'s ESTABLISHED", pd, ev.Conn.PrivateData)
	requireState(t, r.aep, dat.EPConnected)
	requireState(t, pep, dat.EPConnected)

	// RFC 5044 §7.1.2: the MPA responder may send nothing before the
	// initiator's first FPDU has arrived (the iwarp provider holds its
	// sends until then; siw does not wait), so the initiator speaks
	// first.
	buf = make([]byte, one.size)
	one.each(len(hello), func(k, i int) { buf[i] = hello[k] })
	out := r.a.register(t, buf, dat.MemPrivLocalRead)
	require.NoError(t, r.aep.PostSend(one.iov(out), helloCookie, dat.CompletionDefault))
	done(t, r.a.req, helloCookie, dat.DTOSend)
	c := done(t, r.p.recv, helloCookie, dat.DTOReceive)
	require.Equal(t, uint32(len(hello)), c.Length)
	requireBytes(t, "hello", want, in.buf)
	return &link{a: r.a, p: r.p, aep: r.aep, pep: pep}
}

// helloCookie marks the hello's Send and receive.
const helloCookie = 0x4e110

// connect establishes a link from a to p with short private data each
// way.
func connect(t *testing.T, a, p *side) *link {
	t.Helper()
	r := connectTo(t, a, p, listen(t, p), []byte("connect from "+a.name))
	return r.accept(t, []byte("accept by "+p.name))
}

// requirePD checks received private data. Both ends are iWARP, whose MPA
// frames carry a length: the data must arrive exactly, neither truncated
// nor padded.
func requirePD(t *testing.T, what string, want, got []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	t.Fatalf("%s: sent %d bytes, received %d, the first difference at offset %d", what, len(want), len(got), i)
}

// privateData returns n bytes of private data that start and end with a
// zero byte, so that trimming or zero-padding is caught, and cover the
// whole byte range in between.
func privateData(n int, seed uint32) []byte {
	b := make([]byte, n)
	fill(b, seed)
	b[0], b[n-1] = 0, 0
	return b
}
