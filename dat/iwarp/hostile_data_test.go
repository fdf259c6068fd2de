package iwarp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// hostileEnv is a responder IA with regions of every kind a hostile
// initiator may aim at, each surrounded by guard bytes.
type hostileEnv struct {
	s       side
	w       *region // remote write + read
	ro      *region // remote read only
	wo      *region // remote write only
	other   *region // remote write + read, but in another PD
	recvBuf *region // local write, for the posted receive
}

func newHostileEnv(t *testing.T) *hostileEnv {
	e := &hostileEnv{s: newSide(t)}
	pdB, err := e.s.ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	e.w = newRegion(t, e.s.pd, 4096, rwAccess)
	e.ro = newRegion(t, e.s.pd, 4096, driver.AccessLocalWrite|driver.AccessRemoteRead)
	e.wo = newRegion(t, e.s.pd, 4096, driver.AccessRemoteWrite)
	e.other = newRegion(t, pdB, 4096, rwAccess)
	e.recvBuf = newRegion(t, e.s.pd, 256, driver.AccessLocalWrite)
	return e
}

func (e *hostileEnv) regions() []*region { return []*region{e.w, e.ro, e.wo, e.other, e.recvBuf} }

// finalize recomputes the CRC of a whole FPDU after it was patched.
func finalize(b []byte, crc bool) []byte {
	if crc {
		n := len(b) - wire.CRCLen
		binary.LittleEndian.PutUint32(b[n:], wire.Checksum(b[:n]))
	}
	return b
}

func patchCtrl(b []byte, and, or uint16) []byte {
	c := binary.BigEndian.Uint16(b[2:])
	binary.BigEndian.PutUint16(b[2:], c&and|or)
	return b
}

// Terminate causes as (layer, etype, ecode).
type cause struct {
	layer wire.TermLayer
	etype uint8
	ecode uint8
}

func TestHostileFPDUs(t *testing.T) {
	for _, crc := range []bool{false, true} {
		name := "crc=0"
		if crc {
			name = "crc=1"
		}
		t.Run(name, func(t *testing.T) { hostileFPDUs(t, crc) })
	}
}

func hostileFPDUs(t *testing.T, crc bool) {
	leakCheck(t)
	e := newHostileEnv(t)
	p := &rawPeer{crc: crc}
	w := e.w.mr
	payload16 := bytes.Repeat([]byte{0xEE}, 16)
	write := func(stag uint32, to uint64, data []byte) []byte {
		return p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: true, STag: stag, TO: to}, Payload: data})
	}
	send := func(msn, mo uint32, data []byte) []byte {
		return p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: msn, MO: mo}, Payload: data})
	}
	rreq := func(msn uint32, stag uint32, to uint64, size uint32) []byte {
		return p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: msn},
			ReadRequest: wire.ReadRequest{SinkSTag: 0x4242, SinkTO: 0x1000, Size: size, SourceSTag: stag, SourceTO: to}})
	}
	unknownSTag := uint32(0xFFFFFF00) | w.RKey()&0xFF

	cases := []struct {
		name   string
		stream []byte
		noRecv bool
		// halfClose half-closes the raw side after the stream.
		halfClose bool
		want      cause
		// recvStatus is the expected status of the posted receive.
		recvStatus driver.Status
		// placed: payload may legitimately have landed inside a window.
		placed bool
	}{
		{name: "write unknown STag", stream: write(unknownSTag, w.Addr(), payload16), want: cause{wire.LayerDDP, 1, 0}},
		{name: "write wrong key", stream: write(w.RKey()^0x5A, w.Addr(), payload16), want: cause{wire.LayerDDP, 1, 0}},
		{name: "write STag of another PD", stream: write(e.other.mr.RKey(), e.other.mr.Addr(), payload16), want: cause{wire.LayerDDP, 1, 2}},
		{name: "write without REMOTE_WRITE", stream: write(e.ro.mr.RKey(), e.ro.mr.Addr(), payload16), want: cause{wire.LayerDDP, 1, 0}},
		{name: "write TO below the region", stream: write(w.RKey(), w.Addr()-1, payload16), want: cause{wire.LayerDDP, 1, 1}},
		{name: "write past the end by 1", stream: write(w.RKey(), w.Addr()+4096-15, payload16), want: cause{wire.LayerDDP, 1, 1}},
		{name: "write zero bytes past the end", stream: write(w.RKey(), w.Addr()+4097, nil), want: cause{wire.LayerDDP, 1, 1}},
		{name: "write huge length", stream: func() []byte {
			b := write(w.RKey(), w.Addr(), make([]byte, 65535-14))
			return b[:100] // the header claims 65521 bytes; they never come
		}(), want: cause{wire.LayerDDP, 1, 1}},
		{name: "write TO wrap", stream: write(w.RKey(), math.MaxUint64-7, payload16), want: cause{wire.LayerDDP, 1, 3}},
		{name: "write second segment changes STag", stream: append(
			p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, STag: w.RKey(), TO: w.Addr()}, Payload: payload16}),
			write(e.ro.mr.RKey(), e.ro.mr.Addr(), payload16)...), want: cause{wire.LayerDDP, 1, 0}, placed: true},
		{name: "write second segment wrong TO", stream: append(
			p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, STag: w.RKey(), TO: w.Addr()}, Payload: payload16}),
			write(w.RKey(), w.Addr()+100, payload16)...), want: cause{wire.LayerDDP, 1, 1}, placed: true},
		{name: "read request beyond bounds", stream: rreq(1, w.RKey(), w.Addr()+4000, 200), want: cause{wire.LayerRDMAP, 1, 1}},
		{name: "read request huge size", stream: rreq(1, w.RKey(), w.Addr(), math.MaxUint32), want: cause{wire.LayerRDMAP, 1, 1}},
		{name: "read request without REMOTE_READ", stream: rreq(1, e.wo.mr.RKey(), e.wo.mr.Addr(), 16), want: cause{wire.LayerRDMAP, 1, 2}},
		{name: "read request unknown STag", stream: rreq(1, unknownSTag, w.Addr(), 16), want: cause{wire.LayerRDMAP, 1, 0}},
		{name: "read request STag of another PD", stream: rreq(1, e.other.mr.RKey(), e.other.mr.Addr(), 16), want: cause{wire.LayerRDMAP, 1, 3}},
		{name: "read request wrong MSN", stream: rreq(2, w.RKey(), w.Addr(), 16), want: cause{wire.LayerDDP, 2, 3}},
		{name: "read request not last", stream: finalize(patchCtrl(rreq(1, w.RKey(), w.Addr(), 16), ^uint16(0x4000), 0), crc), want: cause{wire.LayerDDP, 2, 5}},
		{name: "read response without a read", stream: p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpReadResponse, Last: true, STag: w.RKey(), TO: w.Addr()}, Payload: payload16}),
			want: cause{wire.LayerDDP, 0, 0}},
		{name: "write interleaved with a read response", stream: append(
			p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, STag: w.RKey(), TO: w.Addr()}, Payload: payload16}),
			p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpReadResponse, Last: true, STag: w.RKey(), TO: w.Addr()}})...),
			want: cause{wire.LayerDDP, 0, 0}, placed: true},
		{name: "send wrong MSN", stream: send(2, 0, payload16), want: cause{wire.LayerDDP, 2, 3}},
		{name: "send wrong MO", stream: send(1, 5, payload16), want: cause{wire.LayerDDP, 2, 4}},
		{name: "send second segment wrong MO", stream: append(
			p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, MSN: 1}, Payload: payload16}),
			send(1, 17, payload16)...), want: cause{wire.LayerDDP, 2, 4}, placed: true},
		{name: "send wrong QN", stream: func() []byte {
			b := send(1, 0, payload16)
			binary.BigEndian.PutUint32(b[8:], 5)
			return finalize(b, crc)
		}(), want: cause{wire.LayerDDP, 2, 1}},
		{name: "send bad DDP version", stream: finalize(patchCtrl(send(1, 0, payload16), ^uint16(0x0300), 0x0200), crc), want: cause{wire.LayerDDP, 2, 6}},
		{name: "write bad DDP version", stream: finalize(patchCtrl(write(w.RKey(), w.Addr(), payload16), ^uint16(0x0300), 0), crc), want: cause{wire.LayerDDP, 1, 4}},
		{name: "bad RDMAP version", stream: finalize(patchCtrl(send(1, 0, payload16), ^uint16(0x00C0), 0x0080), crc), want: cause{wire.LayerRDMAP, 2, 5}},
		{name: "opcode 8", stream: finalize(patchCtrl(send(1, 0, payload16), ^uint16(0x000F), 8), crc), want: cause{wire.LayerRDMAP, 2, 6}},
		{name: "opcode 15", stream: finalize(patchCtrl(send(1, 0, payload16), ^uint16(0x000F), 15), crc), want: cause{wire.LayerRDMAP, 2, 6}},
		{name: "send with invalidate", stream: p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSendInvalidate, Last: true, MSN: 1, STag: w.RKey()}}),
			want: cause{wire.LayerRDMAP, 2, 9}},
		{name: "send bigger than the receive", stream: send(1, 0, make([]byte, 257)), want: cause{wire.LayerDDP, 2, 2}, recvStatus: driver.StatusLocalLength},
		{name: "send with no receive posted", stream: send(1, 0, payload16), noRecv: true, want: cause{wire.LayerDDP, 2, 2}},
		{name: "truncated FPDU then close", stream: write(w.RKey(), w.Addr(), make([]byte, 100))[:60], halfClose: true,
			want: cause{wire.LayerLLP, 0, 1}, placed: true},
		{name: "ULPDU_Length below the minimum", stream: func() []byte {
			b := send(1, 0, nil)
			binary.BigEndian.PutUint16(b, 10)
			return b
		}(), want: cause{wire.LayerLLP, 0, 3}},
		{name: "ULPDU_Length zero", stream: []byte{0, 0, 0, 0, 0, 0, 0, 0}, want: cause{wire.LayerLLP, 0, 3}},
	}
	if crc {
		cases = append(cases, struct {
			name       string
			stream     []byte
			noRecv     bool
			halfClose  bool
			want       cause
			recvStatus driver.Status
			placed     bool
		}{name: "bad CRC", stream: func() []byte {
			b := send(1, 0, payload16)
			b[len(b)-1] ^= 0x40
			return b
		}(), want: cause{wire.LayerLLP, 0, 2}, placed: true})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range e.regions() {
				clear(r.buf)
			}
			sk := newSink()
			raw, _ := rawConnect(t, e.s, e.s.cfg(), sk, crc, 1, 1, func(q *iwarp.QP) {
				if !tc.noRecv {
					mustPost(t, q.PostRecv(driver.RecvWR{ID: 1, Local: []driver.SGE{e.recvBuf.sge(0, 256)}}))
				}
			})
			raw.send(t, tc.stream)
			if tc.halfClose {
				raw.c.CloseWrite()
			}
			ctl, term := raw.readTerminate(t)
			got := cause{ctl.Layer, ctl.EType, ctl.ECode}
			if got != tc.want {
				t.Fatalf("Terminate %+v, want %+v", got, tc.want)
			}
			checkAttachment(t, ctl, term, tc.stream)
			err := sk.waitDisconnected(t)
			t.Logf("OnDisconnect(%v)", err)
			assertTerminateError(t, err, tc.want.layer, tc.want.etype, tc.want.ecode)
			// A receive the offending Send failed completes in error; an
			// untouched one is dropped (package dat flushes it). Either
			// way the CQ holds everything once OnDisconnect is called.
			if tc.recvStatus != 0 {
				c, ok := sk.poll(t)
				if !ok || c.WRID != 1 || c.Status != tc.recvStatus {
					t.Fatalf("receive completed %+v (%v), want status %d", c, ok, tc.recvStatus)
				}
			}
			sk.none(t, 0)
			for _, r := range e.regions() {
				r.checkGuards(t)
				if !tc.placed && !bytes.Equal(r.buf, make([]byte, len(r.buf))) {
					t.Fatal("a rejected FPDU's payload was placed")
				}
			}
			// After the Terminate the provider closes the stream.
			raw.c.SetReadDeadline(time.Now().Add(testTimeout))
			if _, _, err := raw.readFPDU(); err == nil {
				t.Fatal("FPDU after the Terminate")
			}
		})
	}
}

// checkAttachment verifies the Terminate's attachment siw-style: DDP and
// RDMAP errors on a complete header carry it (M, D; R for a Read Request
// protection error) with the DDP Segment Length in its first 2 bytes.
func checkAttachment(t *testing.T, ctl wire.TermControl, term wire.Terminate, stream []byte) {
	t.Helper()
	if !ctl.D {
		if len(term.Attached) != 0 {
			t.Fatalf("attachment without D: %x", term.Attached)
		}
		return
	}
	if !ctl.M || len(term.Attached) < wire.TaggedHeaderLen {
		t.Fatalf("control %+v attachment %x", ctl, term.Attached)
	}
	// The offending header is the first or the second FPDU of stream.
	for off := 0; off < len(stream); {
		l := int(binary.BigEndian.Uint16(stream[off:]))
		end := off + len(term.Attached)
		if end <= len(stream) && bytes.Equal(term.Attached[2:], stream[off+2:end]) {
			return
		}
		off += wire.FPDULen(l)
	}
	t.Fatalf("attachment %x is no header of the stream", term.Attached)
}

// TestHostileIRDExceeded: a raw initiator that advertised ORD 1 sends two
// Read Requests; the second exceeds the responder's IRD of 1 while the
// first is still being answered.
func TestHostileIRDExceeded(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	// Larger than what loopback socket buffers can hold, so the first
	// Response is still being written when the second Request arrives.
	const size = 16 << 20
	big := newRegion(t, s.pd, size, rwAccess)
	cfg := s.cfg()
	cfg.IRD, cfg.ORD = 1, 1
	sk := newSink()
	raw, q := rawConnect(t, s, cfg, sk, false, 1, 1, nil)
	if info, _ := q.ConnInfo(); info.IRD != 1 {
		t.Fatalf("IRD %d", info.IRD)
	}
	rr := func(msn uint32) []byte {
		return raw.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: msn},
			ReadRequest: wire.ReadRequest{SinkSTag: 0x99, SinkTO: 0, Size: size, SourceSTag: big.mr.RKey(), SourceTO: big.mr.Addr()}})
	}
	raw.send(t, append(rr(1), rr(2)...))
	ctl, _ := raw.readTerminate(t)
	if c := (cause{ctl.Layer, ctl.EType, ctl.ECode}); c != (cause{wire.LayerRDMAP, 2, 7}) {
		t.Fatalf("Terminate %+v, want RDMAP/remote operation/7", c)
	}
	assertTerminateError(t, sk.waitDisconnected(t), wire.LayerRDMAP, 2, 7)
	big.checkGuards(t)
}

// TestPeerTerminate: a Terminate from the peer ends the connection with an
// error naming the peer's cause, and is not answered.
func TestPeerTerminate(t *testing.T) {
	leakCheck(t)
	for _, layout := range []wire.TermLayout{wire.TermLayoutRFC, wire.TermLayoutSiwLE} {
		s := newSide(t)
		sk := newSink()
		raw, _ := rawConnect(t, s, s.cfg(), sk, true, 1, 1, nil)
		hdr := raw.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: true, STag: 7}})
		term := wire.SiwTerminate(wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPTaggedBuffer, ECode: wire.ECodeDDPTaggedBaseBounds}, hdr, layout, nil)
		b, err := wire.AppendTerminate(nil, &term, true)
		if err != nil {
			t.Fatal(err)
		}
		raw.send(t, b)
		err = sk.waitDisconnected(t)
		t.Logf("OnDisconnect(%v)", err)
		var te *iwarp.TerminateError
		if !errors.As(err, &te) || !te.Remote || te.Malformed || te.Layer != 1 || te.EType != 1 || te.ECode != 1 {
			t.Fatalf("layout %d: OnDisconnect(%v), want the peer's DDP tagged base/bounds Terminate", layout, err)
		}
		raw.c.SetReadDeadline(time.Now().Add(testTimeout))
		if f, _, err := raw.readFPDU(); err == nil {
			t.Fatalf("answered a Terminate with %v", f.Header.Opcode)
		}
	}
}
