package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Hand-assembled golden frames: an MPA v2 Request with IRD/ORD 1/1, and
// FPDUs with CRC for a Send, an RDMA Read Request, the zero-length RDMA
// Write of MPA v2 ready-to-receive (RTR) and a Terminate. Their CRCs were
// computed separately with hash/crc32 (Castagnoli) when the vectors were
// written; the siw captures in testdata have CRC off, so no CRC has been
// checked against a real siw yet.
var (
	specMPARequest = `4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 10 02 00 04 00 01 00 01`
	specSendCRC    = `00 22 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00
	                  00 00 7f 00 00 00 10 00 00 00 12 34 00 00 00 40 46 52 37 08`
	specReadReqCRC = `00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00
	                  00 00 56 78 00 00 56 12 34 56 00 00 00 00 00 40 00 00 12 34
	                  00 00 7f 00 00 00 10 00 ca b1 9e 41`
	specRTRCRC  = `00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 eb d3 4c 5f`
	specTermCRC = `00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 02 00 00 7f e4 25 85`
)

func TestSpecMPARequest(t *testing.T) {
	want := unhex(t, specMPARequest)
	f := MPAFrame{
		Header: MPAHeader{Kind: MPARequest, Flags: MPAFlagEnhanced, Revision: 2},
		V2:     MPAv2{IRD: 1, ORD: 1},
	}
	got, err := f.Append(nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, %v; want % x", got, err, want)
	}
	// siw's Reply: same trailing 8 bytes after the Reply key.
	f.Header.Kind = MPAReply
	rep, _ := f.Append(nil)
	if string(rep[:16]) != "MPA ID Rep Frame" || !bytes.Equal(rep[16:], want[16:]) {
		t.Fatalf("reply = % x", rep)
	}
}

func TestSpecSend(t *testing.T) {
	want := unhex(t, specSendCRC)
	payload := unhex(t, "00 00 7f 00 00 00 10 00  00 00 12 34  00 00 00 40") // buf, rkey, size
	f := FPDU{Header: Header{Last: true, Opcode: OpSend, MSN: 1}, Payload: payload}
	got, err := f.Append(nil, true)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, %v\nwant % x", got, err, want)
	}
	off, _ := f.Append(nil, false)
	if !bytes.Equal(off[:36], want[:36]) || !bytes.Equal(off[36:], []byte{0, 0, 0, 0}) {
		t.Fatalf("CRC off = % x", off)
	}
	var p FPDU
	if n, err := p.Parse(want, true); err != nil || n != len(want) {
		t.Fatalf("Parse = %d, %v", n, err)
	}
	if !bytes.Equal(p.Payload, payload) || p.Header.MSN != 1 || !p.Header.Last {
		t.Fatalf("parsed %+v", p)
	}
	if _, err := p.Parse(off, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(off, true); err != ErrCRC {
		t.Fatalf("zero CRC with CRC on: %v", err)
	}
}

func TestSpecReadRequest(t *testing.T) {
	want := unhex(t, specReadReqCRC)
	f := FPDU{
		Header:      Header{Last: true, Opcode: OpReadRequest, MSN: 1},
		ReadRequest: ReadRequest{SinkSTag: 0x5678, SinkTO: 0x0000561234560000, Size: 64, SourceSTag: 0x1234, SourceTO: 0x00007f0000001000},
	}
	got, err := f.Append(nil, true)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, %v\nwant % x", got, err, want)
	}
	var p FPDU
	if _, err := p.Parse(want, true); err != nil || p.ReadRequest != f.ReadRequest {
		t.Fatalf("Parse: %+v, %v", p.ReadRequest, err)
	}
}

func TestSpecRTR(t *testing.T) {
	want := unhex(t, specRTRCRC)
	f := FPDU{Header: Header{Last: true, Opcode: OpWrite, STag: 1, TO: 0}}
	got, err := f.Append(nil, true)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, %v\nwant % x", got, err, want)
	}
}

func TestSpecTerminate(t *testing.T) {
	want := unhex(t, specTermCRC)
	term := SiwTerminate(TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}, nil, TermLayoutRFC, nil)
	got, err := AppendTerminate(nil, &term, true)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AppendTerminate = % x, %v\nwant % x", got, err, want)
	}
	// What siw on a little-endian host really sends for the same cause:
	// layer in the low nibble of byte 20 (see TermLayout).
	siw := SiwTerminate(TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}, nil, TermLayoutSiwLE, nil)
	got, _ = AppendTerminate(nil, &siw, false)
	if !bytes.Equal(got[20:24], []byte{0x02, 0x02, 0x00, 0x00}) {
		t.Fatalf("siw layout control = % x", got[20:24])
	}
}

// CRC check value and the little-endian trailer, independent of the
// package's own code paths.
func TestSpecCRCByteOrder(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("check value %08x", got)
	}
	for _, v := range []string{specSendCRC, specReadReqCRC, specRTRCRC, specTermCRC} {
		b := unhex(t, v)
		body, trailer := b[:len(b)-4], b[len(b)-4:]
		if got := binary.LittleEndian.Uint32(trailer); got != Checksum(body) {
			t.Errorf("trailer %08x, CRC-32C %08x", got, Checksum(body))
		}
	}
}

// Frames from siw-rping-C3-S64.pcapng (rping -c -C 3 -S 64 against
// rping -s, both on siw; CRC off). Frame numbers as in the .txt decode.
const (
	rpingFrame4Request = `4d504120494420526571204672616d651002000400010001`
	rpingFrame6Reply   = `4d504120494420526570204672616d651002000400010001`
	rpingFrame8Send    = `00224143000000000000000000000001000000000000562bc4fc8ba0b4eeca000000004000000000`
	rpingFrame9ReadReq = `002e4141000000000000000100000001000000002c5ebb00000055e7f402956000000040b4eeca000000562bc4fc8ba000000000`
	rpingFrame10RResp  = `004ec1422c5ebb00000055e7f402956072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071720000000000`
	rpingFrame13Write  = `004ec1406bd22e000000562bc4fc556072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071720000000000`
)

func TestRpingMPA(t *testing.T) {
	for _, tc := range []struct {
		hex  string
		kind MPAKind
	}{{rpingFrame4Request, MPARequest}, {rpingFrame6Reply, MPAReply}} {
		b := unhex(t, tc.hex)
		var f MPAFrame
		n, err := f.Parse(b, tc.kind, MaxPrivateDataSiw)
		if err != nil || n != 24 {
			t.Fatalf("Parse = %d, %v", n, err)
		}
		want := MPAHeader{Kind: tc.kind, Flags: MPAFlagEnhanced, Revision: 2, PDLength: 4}
		if f.Header != want || f.V2 != (MPAv2{IRD: 1, ORD: 1}) || len(f.PrivateData) != 0 {
			t.Fatalf("got %+v", f)
		}
		if got, _ := f.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("re-encode % x", got)
		}
		// and the spec's worked example is this very frame
		if tc.kind == MPARequest && !bytes.Equal(b, unhex(t, specMPARequest)) {
			t.Fatal("spec MPA Request differs from capture")
		}
	}
}

func TestRpingFPDUs(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want FPDU
	}{
		{"frame 8 Send (client advertisement)", rpingFrame8Send, FPDU{
			Header:  Header{ULPDULength: 34, Last: true, Opcode: OpSend, MSN: 1},
			Payload: []byte{0, 0, 0x56, 0x2b, 0xc4, 0xfc, 0x8b, 0xa0, 0xb4, 0xee, 0xca, 0, 0, 0, 0, 0x40},
		}},
		{"frame 9 Read Request", rpingFrame9ReadReq, FPDU{
			Header: Header{ULPDULength: 46, Last: true, Opcode: OpReadRequest, MSN: 1},
			ReadRequest: ReadRequest{SinkSTag: 0x2c5ebb00, SinkTO: 0x000055e7f4029560, Size: 64,
				SourceSTag: 0xb4eeca00, SourceTO: 0x0000562bc4fc8ba0},
		}},
		{"frame 10 Read Response", rpingFrame10RResp, FPDU{
			Header:  Header{ULPDULength: 78, Last: true, Opcode: OpReadResponse, STag: 0x2c5ebb00, TO: 0x000055e7f4029560},
			Payload: []byte("rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\x00"),
		}},
		{"frame 13 Write", rpingFrame13Write, FPDU{
			Header:  Header{ULPDULength: 78, Last: true, Opcode: OpWrite, STag: 0x6bd22e00, TO: 0x0000562bc4fc5560},
			Payload: []byte("rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\x00"),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := unhex(t, tc.hex)
			var f FPDU
			n, err := f.Parse(b, false)
			if err != nil || n != len(b) {
				t.Fatalf("Parse = %d, %v", n, err)
			}
			if f.Header != tc.want.Header || f.ReadRequest != tc.want.ReadRequest || !bytes.Equal(f.Payload, tc.want.Payload) {
				t.Fatalf("got  %+v\nwant %+v", f, tc.want)
			}
			got, err := f.Append(nil, false)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("re-encode = % x, %v", got, err)
			}
		})
	}
}

// TestCaptureStreams reads every captured stream with the header-first
// reader API and checks that each FPDU also decodes whole and re-encodes
// byte-exact.
func TestCaptureStreams(t *testing.T) {
	tests := []struct {
		file   string
		kind   MPAKind
		pd     []byte // consumer private data expected after the v2 block
		ird    uint16
		nFPDUs int
	}{
		{"siw-rping-C3-S64.c2s.bin", MPARequest, nil, 1, 9},
		{"siw-rping-C3-S64.s2c.bin", MPAReply, nil, 1, 12},
		{"siw-dtest-b4096-B4.c2s.bin", MPARequest, seq(0x01, 48), 4, 16},
		{"siw-dtest-b4096-B4.s2c.bin", MPAReply, seq(0x02, 48), 4, 16},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			s := readTestdata(t, tc.file)
			mpa, fpdus := walkStream(t, s, tc.kind, false)
			if !mpa.Header.Enhanced() || mpa.Header.Revision != 2 || mpa.Header.Flags != MPAFlagEnhanced {
				t.Fatalf("MPA header %+v", mpa.Header)
			}
			if mpa.V2 != (MPAv2{IRD: tc.ird, ORD: tc.ird}) || !bytes.Equal(mpa.PrivateData, tc.pd) {
				t.Fatalf("MPA v2 %+v, pd % x", mpa.V2, mpa.PrivateData)
			}
			if got, _ := mpa.Append(nil); !bytes.Equal(got, s[:mpa.Len()]) {
				t.Fatalf("MPA re-encode % x", got)
			}
			if len(fpdus) != tc.nFPDUs {
				t.Fatalf("%d FPDUs, want %d", len(fpdus), tc.nFPDUs)
			}
			msn := map[uint32]uint32{}
			for _, sf := range fpdus {
				var f FPDU
				if n, err := f.Parse(sf.raw, false); err != nil || n != len(sf.raw) {
					t.Fatalf("at %d: Parse = %d, %v", sf.off, n, err)
				}
				if !f.Header.Opcode.Tagged() {
					// siw numbers every untagged queue from 1.
					qn := f.Header.Opcode.QN()
					msn[qn]++
					if f.Header.MSN != msn[qn] || f.Header.MO != 0 {
						t.Fatalf("at %d: %v MSN %d MO %d, want MSN %d", sf.off, f.Header.Opcode, f.Header.MSN, f.Header.MO, msn[qn])
					}
				}
				got, err := f.Append(nil, false)
				if err != nil || !bytes.Equal(got, sf.raw) {
					t.Fatalf("at %d: re-encode differs (%v)", sf.off, err)
				}
			}
		})
	}
}

// The dtest MPA frames with DAPL's 48 bytes of consumer private data.
func TestDtestMPA(t *testing.T) {
	req := readTestdata(t, "siw-dtest-b4096-B4.c2s.bin")[:72]
	rep := readTestdata(t, "siw-dtest-b4096-B4.s2c.bin")[:72]
	want := unhex(t, `4d504120494420526571204672616d6510020034000400040102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f30`)
	if !bytes.Equal(req, want) {
		t.Fatal("testdata does not hold frame 9 of the capture")
	}
	f := MPAFrame{
		Header:      MPAHeader{Kind: MPAReply, Flags: MPAFlagEnhanced, Revision: 2},
		V2:          MPAv2{IRD: 4, ORD: 4},
		PrivateData: seq(0x02, 48),
	}
	got, err := f.Append(nil)
	if err != nil || !bytes.Equal(got, rep) {
		t.Fatalf("reply = % x, %v", got, err)
	}
	if f.Len() != 72 || binary.BigEndian.Uint16(got[18:]) != 52 {
		t.Fatalf("len %d, PD_Length %d", f.Len(), binary.BigEndian.Uint16(got[18:]))
	}
}

func seq(first byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i)
	}
	return b
}
