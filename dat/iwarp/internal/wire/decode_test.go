package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestFPDURoundTripAllOpcodes(t *testing.T) {
	var tbuf [MaxTerminateAttachLen]byte
	term := SiwTerminate(TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedNoBuffer}, unhex(t, rpingFrame8Send), TermLayoutRFC, tbuf[:])
	fpdus := []FPDU{
		{Header: Header{Opcode: OpReadRequest, Last: true, MSN: 3}, ReadRequest: ReadRequest{1, 2, 3, 4, 5}},
		{Header: Header{Opcode: OpTerminate, Last: true, MSN: 1}, Terminate: term},
		{Header: Header{Opcode: OpTerminate, Last: true, MSN: 1}, Terminate: Terminate{Control: 0x00FF0000}},
	}
	for _, op := range []Opcode{OpWrite, OpReadResponse, OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate} {
		for _, n := range []int{0, 1, 2, 3, 4, 5, 1000, 65535 - op.MinULPDULength()} {
			fpdus = append(fpdus, FPDU{Header: Header{Opcode: op, Last: n%2 == 0, STag: 0xfeedbeef, TO: 1 << 40, MSN: 9, MO: 77}, Payload: seq(byte(n), n)})
		}
	}
	for _, withCRC := range []bool{false, true} {
		for _, f := range fpdus {
			b, err := f.Append([]byte{0xAB}, withCRC)
			if err != nil {
				t.Fatalf("%v: %v", f.Header.Opcode, err)
			}
			b = b[1:]
			if len(b)%4 != 0 {
				t.Fatalf("%v: FPDU length %d not 4-aligned", f.Header.Opcode, len(b))
			}
			var p FPDU
			n, err := p.Parse(append(b, 1, 2, 3), withCRC) // trailing bytes are not ours
			if err != nil || n != len(b) {
				t.Fatalf("%v len %d: Parse = %d, %v", f.Header.Opcode, len(f.Payload), n, err)
			}
			want := f
			if !want.Header.Opcode.Tagged() {
				want.Header.TO = 0
			} else {
				want.Header.MSN, want.Header.MO = 0, 0
			}
			want.Header.ULPDULength = p.Header.ULPDULength
			if p.Header != want.Header || p.ReadRequest != want.ReadRequest || !bytes.Equal(p.Payload, want.Payload) ||
				p.Terminate.Control != want.Terminate.Control || !bytes.Equal(p.Terminate.Attached, want.Terminate.Attached) {
				t.Fatalf("got  %+v\nwant %+v", p.Header, want.Header)
			}
			again, _ := p.Append(nil, withCRC)
			if !bytes.Equal(again, b) {
				t.Fatalf("%v: second encoding differs", f.Header.Opcode)
			}
		}
	}
}

func TestFPDUParseErrors(t *testing.T) {
	send := unhex(t, specSendCRC)
	corrupt := func(b []byte, i int, x byte) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= x
		return c
	}
	// Send whose DDP version is 0, with a valid CRC over the bad header.
	badVersion := corrupt(send, 2, 0x01)
	badVersion = AppendFPDUTrailer(badVersion[:36:36], badVersion[:36], nil, true)
	// Terminate with a 3-byte attachment: ULPDU_Length 25, valid otherwise.
	badTerm := unhex(t, "00 19 41 47 00000000 00000002 00000001 00000000 20020000 010203")
	badTerm = AppendFPDUTrailer(badTerm, badTerm, nil, false)

	tests := []struct {
		name    string
		b       []byte
		withCRC bool
		err     error
	}{
		{"empty", nil, false, ErrShortBuffer},
		{"1 byte", send[:1], false, ErrShortBuffer},
		{"truncated trailer", send[:39], false, ErrShortBuffer},
		{"header only", send[:20], true, ErrShortBuffer},
		{"bad CRC", corrupt(send, 39, 0x80), true, ErrCRC},
		{"corrupt header reported as CRC error", corrupt(send, 3, 0x08), true, ErrCRC},
		{"corrupt header without CRC", corrupt(send, 3, 0x08), false, ErrRDMAPOpcode},
		{"bad DDP version with good CRC", badVersion, true, ErrDDPVersionUntagged},
		{"ULPDU_Length 0", []byte{0, 0, 0, 0, 0, 0, 0, 0}, false, ErrULPDUTooShort},
		{"ULPDU_Length 1", []byte{0, 1, 0x41, 0, 0, 0, 0, 0}, false, ErrULPDUTooShort},
		{"Send with ULPDU_Length 2", []byte{0, 2, 0x41, 0x43, 0, 0, 0, 0}, false, ErrULPDUTooShort},
		{"Send with ULPDU_Length 17", append(unhex(t, "00 11 41 43"), make([]byte, 20)...), false, ErrULPDUTooShort},
		{"bad Terminate attachment", badTerm, false, ErrTerminateLength},
		{"Read Request on QN 0", corrupt(unhex(t, rpingFrame9ReadReq), 11, 1), false, ErrInvalidQN},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f FPDU
			n, err := f.Parse(tc.b, tc.withCRC)
			if err != tc.err || n != 0 {
				t.Fatalf("Parse = %d, %v; want %v", n, err, tc.err)
			}
		})
	}
}

// A received FPDU with nonzero pad or (CRC off) a nonzero CRC field is
// accepted like siw accepts it; re-encoding yields the canonical form.
func TestFPDUNonCanonicalTrailer(t *testing.T) {
	b := unhex(t, "00 13 41 43 00000000 00000000 00000001 00000000 7a 55 66 77 88") // 1-byte Send, pad 3 = 55 66 77, CRC 88..
	b = append(b, 0x99, 0xAA, 0xBB)
	var f FPDU
	if n, err := f.Parse(b, false); err != nil || n != 28 || !bytes.Equal(f.Payload, []byte{0x7a}) {
		t.Fatalf("Parse = %d, %v", n, err)
	}
	got, _ := f.Append(nil, false)
	if !bytes.Equal(got[:21], b[:21]) || !bytes.Equal(got[21:], make([]byte, 7)) {
		t.Fatalf("% x", got)
	}
	// With CRC on, a CRC computed over the nonzero pad as sent matches.
	withPad := binary.LittleEndian.AppendUint32(append([]byte(nil), b[:24]...), Checksum(b[:24]))
	if _, err := f.Parse(withPad, true); err != nil {
		t.Fatalf("nonzero pad with matching CRC: %v", err)
	}
}

func TestFPDUAppendErrors(t *testing.T) {
	tests := []struct {
		name string
		f    FPDU
		err  error
	}{
		{"opcode 9", FPDU{Header: Header{Opcode: 9}}, ErrRDMAPOpcode},
		{"payload too long", FPDU{Header: Header{Opcode: OpSend}, Payload: make([]byte, 65535-17)}, ErrULPDUTooLong},
		{"bad Terminate attachment", FPDU{Header: Header{Opcode: OpTerminate}, Terminate: Terminate{Attached: make([]byte, 5)}}, ErrTerminateLength},
	}
	for _, tc := range tests {
		got, err := tc.f.Append([]byte{1}, true)
		if err != tc.err || !bytes.Equal(got, []byte{1}) {
			t.Errorf("%s: % x, %v", tc.name, got, err)
		}
	}
	// Payload is ignored for Read Request and Terminate.
	f := FPDU{Header: Header{Opcode: OpReadRequest, Last: true, MSN: 1}, Payload: []byte("x")}
	if b, err := f.Append(nil, false); err != nil || len(b) != 52 {
		t.Fatalf("%d %v", len(b), err)
	}
}

func TestNoAllocHotPath(t *testing.T) {
	write := unhex(t, rpingFrame13Write)
	hdr := make([]byte, 0, 64)
	trailer := make([]byte, 0, 8)
	var h Header
	var f FPDU
	n := testing.AllocsPerRun(100, func() {
		if _, err := h.Parse(write); err != nil {
			t.Fatal(err)
		}
		crc := CRC(0).Update(write[:16]).Update(write[16:80])
		if err := CheckTrailer(write[80:], 78, crc, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Parse(write, false); err != nil {
			t.Fatal(err)
		}
		hb, _ := h.Append(hdr[:0], 64)
		trailer = AppendFPDUTrailer(trailer[:0], hb, write[16:80], true)
	})
	if n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
