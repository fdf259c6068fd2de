package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// fpduPrefix builds the first 4 bytes of an FPDU from its raw fields.
func fpduPrefix(ulpdu uint16, ctrl uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, ulpdu)
	return binary.BigEndian.AppendUint16(b, ctrl)
}

// ctrlWord assembles a DDP/RDMAP control word from its fields.
func ctrlWord(tagged, last bool, dv, rv uint16, op uint16) uint16 {
	w := dv<<8 | rv<<6 | op
	if tagged {
		w |= 0x8000
	}
	if last {
		w |= 0x4000
	}
	return w
}

func TestParseControl(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		op   Opcode
		l    int
		err  error
	}{
		{"empty", nil, 0, 0, ErrShortBuffer},
		{"one byte", []byte{0}, 0, 0, ErrShortBuffer},
		{"ULPDU_Length 0", []byte{0, 0}, 0, 0, ErrULPDUTooShort},
		{"ULPDU_Length 1", []byte{0, 1, 0x41, 0x43}, 0, 1, ErrULPDUTooShort},
		{"no control word yet", []byte{0, 34, 0x41}, 0, 34, ErrShortBuffer},
		{"DDP version 0 tagged", fpduPrefix(14, ctrlWord(true, true, 0, 1, 0)), 0, 14, ErrDDPVersionTagged},
		{"DDP version 2 untagged", fpduPrefix(18, ctrlWord(false, true, 2, 1, 3)), 0, 18, ErrDDPVersionUntagged},
		{"DDP version 3 untagged", fpduPrefix(18, ctrlWord(false, true, 3, 1, 3)), 0, 18, ErrDDPVersionUntagged},
		{"RDMAP version 0", fpduPrefix(18, ctrlWord(false, true, 1, 0, 3)), 0, 18, ErrRDMAPVersion},
		{"RDMAP version 2", fpduPrefix(18, ctrlWord(false, true, 1, 2, 3)), 0, 18, ErrRDMAPVersion},
		{"DDP version checked before opcode", fpduPrefix(18, ctrlWord(false, true, 0, 1, 9)), 0, 18, ErrDDPVersionUntagged},
		{"RDMAP version checked before opcode", fpduPrefix(18, ctrlWord(false, true, 1, 3, 9)), 0, 18, ErrRDMAPVersion},
		{"opcode 8 (RFC 7306)", fpduPrefix(18, ctrlWord(false, true, 1, 1, 8)), 8, 18, ErrRDMAPOpcode},
		{"opcode 15", fpduPrefix(18, ctrlWord(true, true, 1, 1, 15)), 15, 18, ErrRDMAPOpcode},
		{"tagged Send", fpduPrefix(18, ctrlWord(true, true, 1, 1, 3)), OpSend, 18, ErrTaggedMismatch},
		{"untagged Write", fpduPrefix(18, ctrlWord(false, true, 1, 1, 0)), OpWrite, 18, ErrTaggedMismatch},
		{"Write too short", fpduPrefix(13, ctrlWord(true, true, 1, 1, 0)), OpWrite, 13, ErrULPDUTooShort},
		{"Read Response too short", fpduPrefix(2, ctrlWord(true, true, 1, 1, 2)), OpReadResponse, 2, ErrULPDUTooShort},
		{"Send too short", fpduPrefix(17, ctrlWord(false, true, 1, 1, 3)), OpSend, 17, ErrULPDUTooShort},
		{"Send SE Inv too short", fpduPrefix(14, ctrlWord(false, true, 1, 1, 6)), OpSendSEInvalidate, 14, ErrULPDUTooShort},
		{"Read Request too short", fpduPrefix(45, ctrlWord(false, true, 1, 1, 1)), OpReadRequest, 45, ErrULPDUTooShort},
		{"Read Request with payload", fpduPrefix(47, ctrlWord(false, true, 1, 1, 1)), OpReadRequest, 47, ErrReadRequestLength},
		{"Read Request huge", fpduPrefix(65535, ctrlWord(false, true, 1, 1, 1)), OpReadRequest, 65535, ErrReadRequestLength},
		{"Terminate too short", fpduPrefix(21, ctrlWord(false, true, 1, 1, 7)), OpTerminate, 21, ErrULPDUTooShort},
		{"zero-length Write", fpduPrefix(14, ctrlWord(true, true, 1, 1, 0)), OpWrite, 14, nil},
		{"zero-length Send, not last", fpduPrefix(18, ctrlWord(false, false, 1, 1, 3)), OpSend, 18, nil},
		{"Read Request", fpduPrefix(46, ctrlWord(false, true, 1, 1, 1)), OpReadRequest, 46, nil},
		{"Terminate", fpduPrefix(22, ctrlWord(false, true, 1, 1, 7)), OpTerminate, 22, nil},
		{"max Write", fpduPrefix(65535, ctrlWord(true, false, 1, 1, 0)), OpWrite, 65535, nil},
		{"reserved bits ignored", fpduPrefix(18, ctrlWord(false, true, 1, 1, 5)|CtrlReservedMask), OpSendSE, 18, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op, l, err := ParseControl(tc.b)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == ErrShortBuffer && len(tc.b) < 2 {
				return
			}
			if l != tc.l || (tc.op != 0 && op != tc.op) {
				t.Fatalf("= %v, %d; want %v, %d", op, l, tc.op, tc.l)
			}
			if err == nil && tc.l < op.MinULPDULength() {
				t.Fatal("accepted too-short ULPDU")
			}
		})
	}
}

// Every protocol error must carry the Terminate cause siw would send.
func TestHeaderErrorCauses(t *testing.T) {
	tests := []struct {
		err  error
		want TermCause
	}{
		{ErrULPDUTooShort, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPFPDUStart}},
		{ErrReadRequestLength, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPFPDUStart}},
		{ErrTerminateLength, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPFPDUStart}},
		{ErrCRC, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}},
		{ErrDDPVersionTagged, TermCause{LayerDDP, ETypeDDPTaggedBuffer, 4}},
		{ErrDDPVersionUntagged, TermCause{LayerDDP, ETypeDDPUntaggedBuffer, 6}},
		{ErrRDMAPVersion, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, 5}},
		{ErrRDMAPOpcode, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, 6}},
		{ErrTaggedMismatch, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, 6}},
		{ErrInvalidQN, TermCause{LayerDDP, ETypeDDPUntaggedBuffer, 1}},
		{ErrMPAKey, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}},
		{ErrMPARevision, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}},
		{ErrMPAPrivateDataTooLong, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}},
		{ErrMPAEnhancedRevision, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}},
		{ErrMPAEnhancedPrivateData, TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}},
	}
	for _, tc := range tests {
		got, ok := CauseOf(tc.err)
		if !ok || got != tc.want {
			t.Errorf("%v: cause %v, want %v", tc.err, got, tc.want)
		}
		if tc.err.Error() == "" {
			t.Errorf("empty message")
		}
	}
	for _, err := range []error{ErrShortBuffer, ErrULPDUTooLong, ErrTrailerLength, ErrMPAKind, ErrIRDORDRange, nil} {
		if _, ok := CauseOf(err); ok {
			t.Errorf("%v must not carry a Terminate cause", err)
		}
	}
	if got := (TermCause{LayerDDP, 2, 6}).String(); got != "layer 1 type 2 code 6" {
		t.Errorf("String = %q", got)
	}
}

func TestHeaderParse(t *testing.T) {
	untagged := func(op uint16, ulpdu uint16, qn uint32) []byte {
		b := fpduPrefix(ulpdu, ctrlWord(false, true, 1, 1, op))
		b = binary.BigEndian.AppendUint32(b, 0xAABBCCDD) // RsvdULP / Invalidate STag
		b = binary.BigEndian.AppendUint32(b, qn)
		b = binary.BigEndian.AppendUint32(b, 7)         // MSN
		return binary.BigEndian.AppendUint32(b, 0x1000) // MO
	}
	tagged := fpduPrefix(14, ctrlWord(true, false, 1, 1, 2))
	tagged = binary.BigEndian.AppendUint32(tagged, 0x11223344)
	tagged = binary.BigEndian.AppendUint64(tagged, 0x0102030405060708)

	tests := []struct {
		name string
		b    []byte
		want Header
		n    int
		err  error
	}{
		{"Read Response", tagged, Header{ULPDULength: 14, Opcode: OpReadResponse, STag: 0x11223344, TO: 0x0102030405060708}, 16, nil},
		{"tagged short", tagged[:15], Header{}, 0, ErrShortBuffer},
		{"Send with Invalidate", untagged(4, 18, 0), Header{ULPDULength: 18, Last: true, Opcode: OpSendInvalidate, STag: 0xAABBCCDD, MSN: 7, MO: 0x1000}, 20, nil},
		{"Read Request header", untagged(1, 46, 1), Header{ULPDULength: 46, Last: true, Opcode: OpReadRequest, STag: 0xAABBCCDD, MSN: 7, MO: 0x1000}, 20, nil},
		{"Terminate header", untagged(7, 22, 2), Header{ULPDULength: 22, Last: true, Opcode: OpTerminate, STag: 0xAABBCCDD, MSN: 7, MO: 0x1000}, 20, nil},
		{"untagged short", untagged(3, 18, 0)[:19], Header{}, 0, ErrShortBuffer},
		{"Send on QN 1", untagged(3, 18, 1), Header{}, 0, ErrInvalidQN},
		{"Send SE on QN 2", untagged(5, 18, 2), Header{}, 0, ErrInvalidQN},
		{"Read Request on QN 0", untagged(1, 46, 0), Header{}, 0, ErrInvalidQN},
		{"Terminate on QN 0", untagged(7, 22, 0), Header{}, 0, ErrInvalidQN},
		{"Terminate on QN 3", untagged(7, 22, 3), Header{}, 0, ErrInvalidQN},
		{"bad version", fpduPrefix(18, 0x4143^0x0300), Header{}, 0, ErrDDPVersionUntagged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := Header{Reserved: 0x30, MSN: 99, TO: 5} // stale values must not leak
			n, err := h.Parse(tc.b)
			if err != tc.err || n != tc.n {
				t.Fatalf("Parse = %d, %v; want %d, %v", n, err, tc.n, tc.err)
			}
			if err != nil {
				return
			}
			if h != tc.want {
				t.Fatalf("got  %+v\nwant %+v", h, tc.want)
			}
			if h.Len() != n || h.RestLen() != int(h.ULPDULength)+2-n {
				t.Fatalf("Len %d RestLen %d", h.Len(), h.RestLen())
			}
			got, err := h.Append(nil, h.RestLen())
			if err != nil || !bytes.Equal(got, tc.b[:n]) {
				t.Fatalf("re-encode = % x, %v; want % x", got, err, tc.b[:n])
			}
		})
	}
}

func TestHeaderReservedBitsRoundTrip(t *testing.T) {
	b := fpduPrefix(18, ctrlWord(false, true, 1, 1, 3)|0x2410)
	b = append(b, make([]byte, 16)...)
	var h Header
	if _, err := h.Parse(b); err != nil {
		t.Fatal(err)
	}
	if h.Reserved != 0x2410 {
		t.Fatalf("Reserved = %#x", h.Reserved)
	}
	got, _ := h.Append(nil, 0)
	if !bytes.Equal(got, b) {
		t.Fatalf("% x != % x", got, b)
	}
	h.Reserved = 0xFFFF // bits outside the mask are not writable
	got, _ = h.Append(nil, 0)
	if binary.BigEndian.Uint16(got[2:])&^CtrlReservedMask != ctrlWord(false, true, 1, 1, 3) {
		t.Fatalf("control % x", got[2:4])
	}
}

func TestHeaderAppendErrors(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		rest int
		err  error
	}{
		{"opcode 8", Header{Opcode: 8}, 0, ErrRDMAPOpcode},
		{"negative rest", Header{Opcode: OpSend}, -1, ErrULPDUTooShort},
		{"Write too long", Header{Opcode: OpWrite}, MaxULPDULength - 13, ErrULPDUTooLong},
		{"Send too long", Header{Opcode: OpSend}, MaxULPDULength - 17, ErrULPDUTooLong},
		{"Read Request without body", Header{Opcode: OpReadRequest}, 0, ErrULPDUTooShort},
		{"Read Request with payload", Header{Opcode: OpReadRequest}, ReadRequestBodyLen + 1, ErrReadRequestLength},
		{"Terminate without control", Header{Opcode: OpTerminate}, 3, ErrULPDUTooShort},
		{"Write max", Header{Opcode: OpWrite}, MaxULPDULength - 14, nil},
		{"Send max", Header{Opcode: OpSend}, MaxULPDULength - 18, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.h.Append([]byte{1, 2}, tc.rest)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil && !bytes.Equal(out, []byte{1, 2}) {
				t.Fatalf("failed Append changed the buffer: % x", out)
			}
			if err == nil && int(binary.BigEndian.Uint16(out[2:]))+2 != tc.h.Len()+tc.rest {
				t.Fatalf("ULPDU_Length % x", out[2:4])
			}
		})
	}
}

// Append derives ULPDU_Length and QN; the struct fields for them are
// ignored, so a reused struct cannot produce an inconsistent header.
func TestHeaderAppendDerivesLengthAndQN(t *testing.T) {
	h := Header{ULPDULength: 999, Last: true, Opcode: OpTerminate, MSN: 1}
	got, err := h.Append(nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, "00 16 41 47 00000000 00000002 00000001 00000000")
	if !bytes.Equal(got, want) {
		t.Fatalf("% x, want % x", got, want)
	}
}
