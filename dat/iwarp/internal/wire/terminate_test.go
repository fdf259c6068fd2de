package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestTermControlWord(t *testing.T) {
	tests := []struct {
		name     string
		c        TermControl
		rfc, siw uint32
	}{
		{"LLP CRC", TermControl{Layer: LayerLLP, EType: ETypeLLPMPA, ECode: ECodeLLPCRC}, 0x20020000, 0x02020000},
		{"DDP untagged MSN range + M D", TermControl{Layer: LayerDDP, EType: ETypeDDPUntaggedBuffer, ECode: ECodeDDPUntaggedMSNRange, M: true, D: true},
			0x1203C000, 0x21030300},
		{"RDMAP remote protection M D R", TermControl{Layer: LayerRDMAP, EType: ETypeRDMAPRemoteProtection, ECode: ECodeRDMAPCannotInvalidate, M: true, D: true, R: true},
			0x0109E000, 0x10090700},
		{"RDMAP catastrophic unspecified", TermControl{Layer: LayerRDMAP, EType: ETypeRDMAPCatastrophic, ECode: ECodeRDMAPUnspecified},
			0x00FF0000, 0x00FF0000},
		{"only R", TermControl{R: true}, 0x2000, 0x400},
		{"nibbles truncated", TermControl{Layer: 0x1F, EType: 0x2E, ECode: 1}, 0xFE010000, 0xEF010000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Word(TermLayoutRFC); got != tc.rfc {
				t.Errorf("RFC word %08x, want %08x", got, tc.rfc)
			}
			if got := tc.c.Word(TermLayoutSiwLE); got != tc.siw {
				t.Errorf("siw word %08x, want %08x", got, tc.siw)
			}
		})
	}
}

func TestTermControlRoundTrip(t *testing.T) {
	for _, layout := range []TermLayout{TermLayoutRFC, TermLayoutSiwLE} {
		for l := 0; l < 16; l++ {
			for e := 0; e < 16; e++ {
				for flags := 0; flags < 8; flags++ {
					c := TermControl{Layer: TermLayer(l), EType: uint8(e), ECode: uint8(l*16 + e),
						M: flags&1 != 0, D: flags&2 != 0, R: flags&4 != 0}
					if got := ParseTermControl(c.Word(layout), layout); got != c {
						t.Fatalf("layout %d: %+v -> %+v", layout, c, got)
					}
				}
			}
		}
	}
	// Reserved bits are ignored by the decoder.
	if c := ParseTermControl(0x20021FFF, TermLayoutRFC); c != (TermControl{Layer: 2, ECode: 2}) {
		t.Fatalf("%+v", c)
	}
	if c := ParseTermControl(0x0202F8FF, TermLayoutSiwLE); c != (TermControl{Layer: 2, ECode: 2}) {
		t.Fatalf("%+v", c)
	}
	if (TermControl{Layer: 1, EType: 2, ECode: 3, M: true}).Cause() != (TermCause{1, 2, 3}) {
		t.Fatal("Cause")
	}
}

func TestTerminateParse(t *testing.T) {
	ctl := []byte{0x12, 0x03, 0xC0, 0x00}
	for _, n := range []int{0, 16, 20, 48} {
		body := append(append([]byte(nil), ctl...), seq(1, n)...)
		var tm Terminate
		if err := tm.Parse(body); err != nil {
			t.Fatalf("attach %d: %v", n, err)
		}
		if tm.Control != 0x1203C000 || len(tm.Attached) != n || tm.Len() != 4+n {
			t.Fatalf("attach %d: %+v", n, tm)
		}
		seg, ok := tm.DDPSegLen()
		if ok != (n > 0) || (ok && seg != 0x0102) {
			t.Fatalf("DDPSegLen = %#x, %v", seg, ok)
		}
		if f := tm.Fields(TermLayoutRFC); f.Cause() != (TermCause{LayerDDP, ETypeDDPUntaggedBuffer, 3}) || !f.M || !f.D || f.R {
			t.Fatalf("Fields %+v", f)
		}
		got, err := tm.Append(nil)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("re-encode % x, %v", got, err)
		}
	}
	for _, n := range []int{1, 2, 4, 14, 15, 17, 18, 21, 44, 47, 49, 100} {
		var tm Terminate
		if err := tm.Parse(append(append([]byte(nil), ctl...), make([]byte, n)...)); err != ErrTerminateLength {
			t.Errorf("attach %d: %v", n, err)
		}
		tm.Attached = make([]byte, n)
		if _, err := tm.Append(nil); err != ErrTerminateLength {
			t.Errorf("append attach %d: %v", n, err)
		}
	}
	var tm Terminate
	if err := tm.Parse(ctl[:3]); err != ErrShortBuffer {
		t.Fatalf("short: %v", err)
	}
}

func TestSiwTerminate(t *testing.T) {
	// Offending headers as received (ULPDU_Length first).
	send := unhex(t, rpingFrame8Send)[:20]    // Send, 16 bytes payload (ULPDU 34)
	rreq := unhex(t, rpingFrame9ReadReq)[:48] // Read Request (ULPDU 46)
	write := unhex(t, rpingFrame13Write)[:16] // Write, 64 bytes payload (ULPDU 78)
	sendSegLen := func(b []byte) []byte {     // siw: payload length in the length slot
		out := append([]byte(nil), b...)
		binary.BigEndian.PutUint16(out, binary.BigEndian.Uint16(b)-uint16(opcodeOf(b).HeaderLen()-2))
		return out
	}
	tests := []struct {
		name   string
		cause  TermCause
		hdr    []byte
		ctl    TermControl
		attach []byte
	}{
		{"LLP CRC: nothing", TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}, send,
			TermControl{Layer: LayerLLP, ECode: ECodeLLPCRC}, nil},
		{"RDMAP catastrophic: nothing", TermCause{LayerRDMAP, ETypeRDMAPCatastrophic, ECodeRDMAPUnspecified}, send,
			TermControl{ECode: 0xFF}, nil},
		{"RDMAP remote protection on Send: 20 bytes, M D R", TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPCannotInvalidate}, send,
			TermControl{EType: 1, ECode: 9, M: true, D: true, R: true}, sendSegLen(send)},
		{"RDMAP remote protection on Read Request: 48 bytes", TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPAccessRights}, rreq,
			TermControl{EType: 1, ECode: 2, M: true, D: true, R: true}, sendSegLen(rreq)},
		{"RDMAP remote protection on Write: 16 bytes", TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPBaseBounds}, write,
			TermControl{EType: 1, ECode: 1, M: true, D: true, R: true}, sendSegLen(write)},
		{"RDMAP bad version: nothing", TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPVersion}, send,
			TermControl{EType: 2, ECode: 5}, nil},
		{"RDMAP bad opcode: nothing", TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPOpcode}, send,
			TermControl{EType: 2, ECode: 6}, nil},
		{"RDMAP remote op on Read Request: DDP header only", TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPCatastrophicStream}, rreq,
			TermControl{EType: 2, ECode: 7, M: true, D: true}, sendSegLen(rreq[:20])},
		{"DDP tagged invalid STag on Write: 16 bytes", TermCause{LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedInvalidSTag}, write,
			TermControl{Layer: LayerDDP, EType: 1, M: true, D: true}, sendSegLen(write)},
		{"DDP untagged no buffer on Send: 20 bytes", TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedNoBuffer}, send,
			TermControl{Layer: LayerDDP, EType: 2, ECode: 2, M: true, D: true}, sendSegLen(send)},
		{"DDP MSN range on Read Request: segment length 0", TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedMSNRange}, rreq,
			TermControl{Layer: LayerDDP, EType: 2, ECode: 3, M: true, D: true}, sendSegLen(rreq[:20])},
		{"DDP tagged version: nothing", TermCause{LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedVersion}, write,
			TermControl{Layer: LayerDDP, EType: 1, ECode: 4}, nil},
		{"DDP untagged version: nothing", TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedVersion}, send,
			TermControl{Layer: LayerDDP, EType: 2, ECode: 6}, nil},
		{"DDP error without header: nothing", TermCause{LayerDDP, ETypeDDPCatastrophic, 0}, nil,
			TermControl{Layer: LayerDDP}, nil},
		{"DDP error with truncated header: nothing", TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedInvalidMO}, send[:19],
			TermControl{Layer: LayerDDP, EType: 2, ECode: 4}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf [MaxTerminateAttachLen]byte
			for _, layout := range []TermLayout{TermLayoutRFC, TermLayoutSiwLE} {
				tm := SiwTerminate(tc.cause, tc.hdr, layout, buf[:])
				if got := tm.Fields(layout); got != tc.ctl {
					t.Fatalf("layout %d: control %+v, want %+v", layout, got, tc.ctl)
				}
				if tm.Control != tc.ctl.Word(layout) || !bytes.Equal(tm.Attached, tc.attach) {
					t.Fatalf("attached % x, want % x", tm.Attached, tc.attach)
				}
				// The whole FPDU decodes back to the same Terminate.
				fp, err := AppendTerminate(nil, &tm, true)
				if err != nil {
					t.Fatal(err)
				}
				var f FPDU
				if n, err := f.Parse(fp, true); err != nil || n != len(fp) {
					t.Fatalf("Parse = %d, %v", n, err)
				}
				if f.Header.MSN != 1 || f.Header.MO != 0 || !f.Header.Last || f.Terminate.Control != tm.Control ||
					!bytes.Equal(f.Terminate.Attached, tm.Attached) {
					t.Fatalf("decoded %+v", f)
				}
			}
		})
	}
}

func opcodeOf(b []byte) Opcode { return Opcode(b[3] & 0xF) }

// siw computes the segment length modulo 2^16; a header whose ULPDU_Length
// underflows its opcode's header size gives a wrapped value, not a panic.
func TestSiwTerminateSegLenWraps(t *testing.T) {
	hdr := unhex(t, rpingFrame8Send)[:20]
	hdr[1] = 10 // ULPDU_Length 10 < 18
	tm := SiwTerminate(TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedInvalidQN}, hdr, TermLayoutRFC, nil)
	if seg, ok := tm.DDPSegLen(); !ok || seg != 0xFFF8 {
		t.Fatalf("seg = %#x, %v", seg, ok)
	}
}

func TestSiwTerminateNoAlloc(t *testing.T) {
	hdr := unhex(t, rpingFrame9ReadReq)[:48]
	var buf [MaxTerminateAttachLen]byte
	out := make([]byte, 0, 128)
	n := testing.AllocsPerRun(100, func() {
		tm := SiwTerminate(TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, 0}, hdr, TermLayoutSiwLE, buf[:])
		out, _ = AppendTerminate(out[:0], &tm, true)
	})
	if n != 0 {
		t.Fatalf("%v allocs", n)
	}
}
