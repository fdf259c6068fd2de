package wire

import (
	"bytes"
	"testing"
	"time"
)

// mpaBytes builds a raw frame header from its fields.
func mpaBytes(key string, flags, rev byte, pdLen uint16, pd []byte) []byte {
	b := append([]byte(key), flags, rev, byte(pdLen>>8), byte(pdLen))
	return append(b, pd...)
}

func TestMPAConstants(t *testing.T) {
	if MaxPrivateDataRFC != 512 || MaxPrivateDataSiw != 256 || MaxConsumerPrivateDataSiw != 252 || MPAHeaderLen != 20 {
		t.Fatal("limits")
	}
	if SiwMPARequestTimeout != 5*time.Second || SiwMPAReplyTimeout != 10*time.Second {
		t.Fatal("timeouts")
	}
}

func TestMPAHeaderParse(t *testing.T) {
	v2 := []byte{0, 1, 0, 1}
	tests := []struct {
		name  string
		b     []byte
		kind  MPAKind
		maxPD int
		want  MPAHeader
		err   error
	}{
		{"rping Request", mpaBytes(mpaKeyRequest, 0x10, 2, 4, v2), MPARequest, 256,
			MPAHeader{MPARequest, MPAFlagEnhanced, 2, 4}, nil},
		{"Reply rev 1 with CRC", mpaBytes(mpaKeyReply, 0x40, 1, 0, nil), MPAReply, 256,
			MPAHeader{MPAReply, MPAFlagCRC, 1, 0}, nil},
		{"rev 0 accepted", mpaBytes(mpaKeyRequest, 0, 0, 0, nil), MPARequest, 256,
			MPAHeader{MPARequest, 0, 0, 0}, nil},
		{"reject + markers + reserved kept", mpaBytes(mpaKeyReply, 0xAF, 1, 3, nil), MPAReply, 256,
			MPAHeader{MPAReply, 0xAF, 1, 3}, nil},
		{"PD at siw limit", mpaBytes(mpaKeyRequest, 0, 1, 256, nil), MPARequest, MaxPrivateDataSiw,
			MPAHeader{MPARequest, 0, 1, 256}, nil},
		{"PD over siw limit", mpaBytes(mpaKeyRequest, 0, 1, 257, nil), MPARequest, MaxPrivateDataSiw, MPAHeader{}, ErrMPAPrivateDataTooLong},
		{"PD at RFC limit", mpaBytes(mpaKeyRequest, 0, 1, 512, nil), MPARequest, MaxPrivateDataRFC,
			MPAHeader{MPARequest, 0, 1, 512}, nil},
		{"PD over RFC limit even if caller allows more", mpaBytes(mpaKeyRequest, 0, 1, 513, nil), MPARequest, 65535, MPAHeader{}, ErrMPAPrivateDataTooLong},
		{"no PD allowed", mpaBytes(mpaKeyRequest, 0, 1, 1, nil), MPARequest, 0, MPAHeader{}, ErrMPAPrivateDataTooLong},
		{"rev 3", mpaBytes(mpaKeyRequest, 0x10, 3, 4, v2), MPARequest, 256, MPAHeader{}, ErrMPARevision},
		{"rev 255", mpaBytes(mpaKeyReply, 0, 255, 0, nil), MPAReply, 256, MPAHeader{}, ErrMPARevision},
		{"Reply key on Request", mpaBytes(mpaKeyReply, 0x10, 2, 4, v2), MPARequest, 256, MPAHeader{}, ErrMPAKey},
		{"Request key on Reply", mpaBytes(mpaKeyRequest, 0x10, 2, 4, v2), MPAReply, 256, MPAHeader{}, ErrMPAKey},
		{"lower-case key", mpaBytes("mpa ID Req Frame", 0, 1, 0, nil), MPARequest, 256, MPAHeader{}, ErrMPAKey},
		{"E with rev 1", mpaBytes(mpaKeyRequest, 0x10, 1, 4, v2), MPARequest, 256, MPAHeader{}, ErrMPAEnhancedRevision},
		{"E with PD 3", mpaBytes(mpaKeyRequest, 0x10, 2, 3, nil), MPARequest, 256, MPAHeader{}, ErrMPAEnhancedPrivateData},
		{"E with PD 0", mpaBytes(mpaKeyReply, 0x50, 2, 0, nil), MPAReply, 256, MPAHeader{}, ErrMPAEnhancedPrivateData},
		{"short", mpaBytes(mpaKeyRequest, 0, 1, 0, nil)[:19], MPARequest, 256, MPAHeader{}, ErrShortBuffer},
		{"bad kind", mpaBytes(mpaKeyRequest, 0, 1, 0, nil), 0, 256, MPAHeader{}, ErrMPAKind},
		// siw's order: PD_Length before revision before key
		{"PD checked before revision", mpaBytes(mpaKeyRequest, 0, 9, 300, nil), MPARequest, 256, MPAHeader{}, ErrMPAPrivateDataTooLong},
		{"revision checked before key", mpaBytes("XXXXXXXXXXXXXXXX", 0, 9, 0, nil), MPARequest, 256, MPAHeader{}, ErrMPARevision},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h MPAHeader
			err := h.Parse(tc.b, tc.kind, tc.maxPD)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if h != tc.want {
				t.Fatalf("got %+v, want %+v", h, tc.want)
			}
			got, err := h.Append(nil)
			if err != nil || !bytes.Equal(got, tc.b[:MPAHeaderLen]) {
				t.Fatalf("re-encode % x, %v", got, err)
			}
		})
	}
}

func TestMPAFrameParse(t *testing.T) {
	consumer := seq(0x01, 48)
	enhanced := mpaBytes(mpaKeyRequest, 0x10, 2, 52, append([]byte{0x80, 0x04, 0xC0, 0x04}, consumer...))
	var f MPAFrame
	n, err := f.Parse(append(enhanced, 0xEE), MPARequest, MaxPrivateDataSiw)
	if err != nil || n != 72 {
		t.Fatalf("Parse = %d, %v", n, err)
	}
	if f.V2 != (MPAv2{PeerToPeer: true, IRD: 4, WriteRTR: true, ReadRTR: true, ORD: 4}) || !bytes.Equal(f.PrivateData, consumer) || f.Len() != 72 {
		t.Fatalf("%+v", f)
	}
	// Header first, then exactly PD_Length: the reader's path.
	var g MPAFrame
	if err := g.Header.Parse(enhanced[:20], MPARequest, MaxPrivateDataSiw); err != nil {
		t.Fatal(err)
	}
	if err := g.ParsePrivateData(enhanced[20:71]); err != ErrShortBuffer {
		t.Fatalf("wrong PD size: %v", err)
	}
	if err := g.ParsePrivateData(enhanced[20:]); err != nil || g.V2 != f.V2 {
		t.Fatalf("%v %+v", err, g)
	}

	plain := mpaBytes(mpaKeyReply, 0x40, 1, 3, []byte("abc"))
	if n, err := f.Parse(plain, MPAReply, 256); err != nil || n != 23 || string(f.PrivateData) != "abc" || f.V2 != (MPAv2{}) {
		t.Fatalf("plain: %d %v %+v", n, err, f)
	}
	if _, err := f.Parse(plain[:22], MPAReply, 256); err != ErrShortBuffer {
		t.Fatalf("truncated PD: %v", err)
	}
	if _, err := f.Parse(plain, MPARequest, 256); err != ErrMPAKey {
		t.Fatalf("wrong kind: %v", err)
	}
}

func TestMPAFrameAppend(t *testing.T) {
	tests := []struct {
		name string
		f    MPAFrame
		want []byte
		err  error
	}{
		{"v1 no PD", MPAFrame{Header: MPAHeader{Kind: MPARequest, Revision: 1, PDLength: 77}}, mpaBytes(mpaKeyRequest, 0, 1, 0, nil), nil},
		{"v1 reject with PD", MPAFrame{Header: MPAHeader{Kind: MPAReply, Flags: MPAFlagReject, Revision: 1}, PrivateData: []byte("no")},
			mpaBytes(mpaKeyReply, 0x20, 1, 2, []byte("no")), nil},
		{"v2 P2P write RTR", MPAFrame{Header: MPAHeader{Kind: MPAReply, Flags: MPAFlagEnhanced | MPAFlagCRC, Revision: 2},
			V2: MPAv2{PeerToPeer: true, IRD: 128, WriteRTR: true, ORD: 16}},
			mpaBytes(mpaKeyReply, 0x50, 2, 4, []byte{0x80, 0x80, 0x80, 0x10}), nil},
		{"v2 block ignored without E", MPAFrame{Header: MPAHeader{Kind: MPARequest, Revision: 2}, V2: MPAv2{IRD: 5}},
			mpaBytes(mpaKeyRequest, 0, 2, 0, nil), nil},
		{"v2 consumer PD at RFC limit", MPAFrame{Header: MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 2}, PrivateData: make([]byte, 508)},
			mpaBytes(mpaKeyRequest, 0x10, 2, 512, make([]byte, 512)), nil},
		{"v2 consumer PD over RFC limit", MPAFrame{Header: MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 2}, PrivateData: make([]byte, 509)},
			nil, ErrMPAPrivateDataTooLong},
		{"v1 PD over RFC limit", MPAFrame{Header: MPAHeader{Kind: MPARequest, Revision: 1}, PrivateData: make([]byte, 513)}, nil, ErrMPAPrivateDataTooLong},
		{"E with rev 1", MPAFrame{Header: MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 1}}, nil, ErrMPAEnhancedRevision},
		{"rev 3", MPAFrame{Header: MPAHeader{Kind: MPARequest, Revision: 3}}, nil, ErrMPARevision},
		{"no kind", MPAFrame{Header: MPAHeader{Revision: 1}}, nil, ErrMPAKind},
		{"IRD too big", MPAFrame{Header: MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 2}, V2: MPAv2{IRD: 0x4000}}, nil, ErrIRDORDRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f.Append([]byte{0xAA})
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				if !bytes.Equal(got, []byte{0xAA}) {
					t.Fatalf("failed Append left % x", got)
				}
				return
			}
			if !bytes.Equal(got[1:], tc.want) || got[0] != 0xAA || tc.f.Len() != len(tc.want) {
				t.Fatalf("got % x\nwant % x", got[1:], tc.want)
			}
		})
	}
	// Header.Append writes PDLength as given and enforces the same rules.
	h := MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 2, PDLength: 2}
	if _, err := h.Append(nil); err != ErrMPAEnhancedPrivateData {
		t.Fatalf("header append: %v", err)
	}
}

func TestMPAv2(t *testing.T) {
	tests := []struct {
		b []byte
		v MPAv2
	}{
		{[]byte{0x00, 0x01, 0x00, 0x01}, MPAv2{IRD: 1, ORD: 1}},
		{[]byte{0x00, 0x04, 0x00, 0x04}, MPAv2{IRD: 4, ORD: 4}},
		{[]byte{0x80, 0x80, 0x80, 0x80}, MPAv2{PeerToPeer: true, IRD: 128, WriteRTR: true, ORD: 128}},
		{[]byte{0x40, 0x00, 0x40, 0x00}, MPAv2{ZeroLengthRTR: true, ReadRTR: true}},
		{[]byte{0xFF, 0xFF, 0xFF, 0xFF}, MPAv2{true, true, NoIRDORD, true, true, NoIRDORD}},
		{[]byte{0xBF, 0xFF, 0x7F, 0xFF}, MPAv2{PeerToPeer: true, IRD: MaxIRDORD, ReadRTR: true, ORD: MaxIRDORD}},
	}
	for _, tc := range tests {
		var v MPAv2
		if err := v.Parse(tc.b); err != nil || v != tc.v {
			t.Errorf("Parse(% x) = %+v, %v", tc.b, v, err)
		}
		if got, err := tc.v.Append(nil); err != nil || !bytes.Equal(got, tc.b) {
			t.Errorf("Append(%+v) = % x, %v", tc.v, got, err)
		}
	}
	var v MPAv2
	if err := v.Parse([]byte{0, 1, 0}); err != ErrShortBuffer {
		t.Fatalf("short: %v", err)
	}
	for _, bad := range []MPAv2{{IRD: 0x4000}, {ORD: 0xFFFF}} {
		if _, err := bad.Append(nil); err != ErrIRDORDRange {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
