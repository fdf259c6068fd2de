package iwarp_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// guardLen is the size of the guard zones on each side of a test region.
const guardLen = 4096

// guardByte fills guard zones; any other value there means a write escaped
// its registered window.
const guardByte = 0xA5

// region is registered memory with guard zones around it: all is the
// whole allocation, buf the registered window in its middle.
type region struct {
	all []byte
	buf []byte
	mr  driver.MR
}

func newRegion(t testing.TB, pd driver.PD, size int, access driver.Access) *region {
	t.Helper()
	all := make([]byte, guardLen+size+guardLen)
	for i := range all {
		all[i] = guardByte
	}
	r := &region{all: all, buf: all[guardLen : guardLen+size : guardLen+size]}
	clear(r.buf)
	mr, err := pd.Register(r.buf, access)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	r.mr = mr
	t.Cleanup(func() { mr.Close() })
	return r
}

// checkGuards fails the test if a byte outside the window changed.
func (r *region) checkGuards(t testing.TB) {
	t.Helper()
	for i, b := range r.all[:guardLen] {
		if b != guardByte {
			t.Fatalf("guard byte %d below the region changed to %#x", guardLen-i, b)
		}
	}
	for i, b := range r.all[guardLen+len(r.buf):] {
		if b != guardByte {
			t.Fatalf("guard byte %d above the region changed to %#x", i, b)
		}
	}
}

// sge names [off, off+n) of r.
func (r *region) sge(off, n int) driver.SGE {
	return driver.SGE{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}
}

// remote names [off, off+n) of r for a peer.
func (r *region) remote(off, n int) driver.RemoteSegment {
	return driver.RemoteSegment{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), RKey: r.mr.RKey()}
}

func fillRandom(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

// side is one end of a data-path test: an IA, a PD and QP configuration.
type side struct {
	ia *iwarp.IA
	pd driver.PD
}

func newSide(t testing.TB, opts ...string) side {
	t.Helper()
	ia := openIA(t.(*testing.T), opts...)
	pd, err := ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return side{ia: ia, pd: pd}
}

func (s side) cfg() driver.QPConfig {
	return driver.QPConfig{PD: s.pd, MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 6, MaxRecvSGE: 6, IRD: 4, ORD: 4}
}

// dpair is a connected pair of QPs with sinks.
type dpair struct {
	ini, resp         *iwarp.QP
	iniSink, respSink *sink
}

// connectData connects an initiator QP on a to a responder QP on b. The
// prepare callbacks run on each idle QP before the connection exists (to
// post receives). The initiator's first FPDU must be sent by the test.
func connectData(t *testing.T, a, b side, acfg, bcfg driver.QPConfig, prepIni, prepResp func(*iwarp.QP)) dpair {
	t.Helper()
	ctx := testCtx(t)
	l := listen(t, b.ia, driver.ListenConfig{})
	p := dpair{iniSink: newSink(), respSink: newSink()}
	p.ini = newQP(t, a.ia, acfg, p.iniSink)
	p.resp = newQP(t, b.ia, bcfg, p.respSink)
	if prepIni != nil {
		prepIni(p.ini)
	}
	if prepResp != nil {
		prepResp(p.resp)
	}
	ch := connectAsync(ctx, p.ini, l.Addr(), nil)
	r := accept(t, ctx, l)
	if _, err := r.Accept(ctx, p.resp, nil); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatalf("connect: %v", res.err)
	}
	return p
}

func mustPost(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("post: %v", err)
	}
}

// --- raw peers for hostile tests ---------------------------------------

// rawPeer is a hand-driven MPA initiator connected to one of our
// responder QPs.
type rawPeer struct {
	c   *net.TCPConn
	crc bool
}

// rawConnect makes a raw initiator connect to a responder QP on s created
// with cfg; prep runs on the QP before the connection (post receives).
// ird/ord are what the raw initiator advertises.
func rawConnect(t *testing.T, s side, cfg driver.QPConfig, h *sink, crc bool, ird, ord uint16, prep func(*iwarp.QP)) (*rawPeer, *iwarp.QP) {
	t.Helper()
	ctx := testCtx(t)
	l := listen(t, s.ia, driver.ListenConfig{})
	q := newQP(t, s.ia, cfg, h)
	if prep != nil {
		prep(q)
	}
	c := dialRaw(t, l.Addr())
	c.SetDeadline(time.Now().Add(testTimeout))
	req := wire.MPAFrame{
		Header: wire.MPAHeader{Kind: wire.MPARequest, Revision: 2, Flags: wire.MPAFlagEnhanced},
		V2:     wire.MPAv2{IRD: ird, ORD: ord},
	}
	if crc {
		req.Header.Flags |= wire.MPAFlagCRC
	}
	b, err := req.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := accept(t, ctx, l).Accept(ctx, q, nil); err != nil {
		t.Fatalf("accept: %v", err)
	}
	var hdr [wire.MPAHeaderLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("reply: %v", err)
	}
	var rep wire.MPAFrame
	if err := rep.Header.Parse(hdr[:], wire.MPAReply, 512); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if _, err := io.ReadFull(c, make([]byte, rep.Header.PDLength)); err != nil {
		t.Fatal(err)
	}
	if got := rep.Header.Flags&wire.MPAFlagCRC != 0; got != crc {
		t.Fatalf("reply CRC %v, want %v", got, crc)
	}
	return &rawPeer{c: c, crc: crc}, q
}

// fpdu encodes one FPDU.
func (p *rawPeer) fpdu(t testing.TB, f wire.FPDU) []byte {
	t.Helper()
	b, err := f.Append(nil, p.crc)
	if err != nil {
		t.Fatalf("encode %v: %v", f.Header.Opcode, err)
	}
	return b
}

func (p *rawPeer) send(t testing.TB, b []byte) {
	t.Helper()
	if _, err := p.c.Write(b); err != nil {
		t.Fatalf("raw write: %v", err)
	}
}

// readFPDU reads one whole FPDU from the stream.
func (p *rawPeer) readFPDU() (wire.FPDU, []byte, error) {
	var lb [2]byte
	if _, err := io.ReadFull(p.c, lb[:]); err != nil {
		return wire.FPDU{}, nil, err
	}
	l := int(binary.BigEndian.Uint16(lb[:]))
	b := make([]byte, wire.FPDULen(l))
	copy(b, lb[:])
	if _, err := io.ReadFull(p.c, b[2:]); err != nil {
		return wire.FPDU{}, nil, err
	}
	var f wire.FPDU
	if _, err := f.Parse(b, p.crc); err != nil {
		return f, b, fmt.Errorf("parse %x: %w", b[:min(len(b), 48)], err)
	}
	return f, b, nil
}

// readTerminate reads FPDUs (skipping any others) until a Terminate and
// returns its decoded control word.
func (p *rawPeer) readTerminate(t testing.TB) (wire.TermControl, wire.Terminate) {
	t.Helper()
	p.c.SetReadDeadline(time.Now().Add(testTimeout))
	for {
		f, _, err := p.readFPDU()
		if err != nil {
			t.Fatalf("no Terminate: %v", err)
		}
		if f.Header.Opcode == wire.OpTerminate {
			if f.Header.MSN != 1 || f.Header.MO != 0 || !f.Header.Last {
				t.Fatalf("Terminate header %+v, want MSN 1 MO 0 L", f.Header)
			}
			term := f.Terminate
			term.Attached = append([]byte(nil), term.Attached...)
			return term.Fields(wire.TermLayoutRFC), term
		}
	}
}

// expectNothing checks that nothing arrives on the raw stream within d.
func (p *rawPeer) expectNothing(t testing.TB, d time.Duration) {
	t.Helper()
	p.c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := p.c.Read(b[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes (%v), want nothing", n, err)
	}
	p.c.SetReadDeadline(time.Now().Add(testTimeout))
}

// assertTerminateError checks an OnDisconnect error against a cause.
func assertTerminateError(t testing.TB, err error, layer wire.TermLayer, etype, ecode uint8) {
	t.Helper()
	var te *iwarp.TerminateError
	if !errors.As(err, &te) {
		t.Fatalf("OnDisconnect(%v), want a *iwarp.TerminateError", err)
	}
	if te.Remote || te.Layer != uint8(layer) || te.EType != etype || te.ECode != ecode {
		t.Fatalf("OnDisconnect(%v) = %+v, want local Terminate %d/%d/%d", err, *te, layer, etype, ecode)
	}
}
