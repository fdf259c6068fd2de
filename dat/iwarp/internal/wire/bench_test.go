package wire

import (
	"testing"
)

// BenchmarkFPDUEncode64K measures building a 64 KiB-payload Write FPDU the
// zero-copy way (header + trailer around the caller's payload): the cost
// is the CRC over the payload.
func BenchmarkFPDUEncode64K(b *testing.B) {
	for _, withCRC := range []bool{true, false} {
		name := "crc"
		if !withCRC {
			name = "nocrc"
		}
		b.Run(name, func(b *testing.B) {
			payload := seq(0, MaxULPDULength-(TaggedHeaderLen-ULPDULengthLen)) // 65521 bytes, ULPDU 65535
			hdr := make([]byte, 0, TaggedHeaderLen)
			trailer := make([]byte, 0, 8)
			h := Header{Opcode: OpWrite, Last: true, STag: 0x1234, TO: 0x7f0000001000}
			b.SetBytes(int64(FPDULen(MaxULPDULength)))
			b.ReportAllocs()
			for b.Loop() {
				hb, err := h.Append(hdr[:0], len(payload))
				if err != nil {
					b.Fatal(err)
				}
				trailer = AppendFPDUTrailer(trailer[:0], hb, payload, withCRC)
			}
		})
	}
}

// BenchmarkFPDUCopyEncode64K is the copying variant (FPDU.Append into one
// buffer), for comparison.
func BenchmarkFPDUCopyEncode64K(b *testing.B) {
	f := FPDU{Header: Header{Opcode: OpWrite, Last: true, STag: 0x1234}, Payload: seq(0, MaxULPDULength-14)}
	out := make([]byte, 0, MaxFPDULen)
	b.SetBytes(int64(FPDULen(MaxULPDULength)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if out, err = f.Append(out[:0], true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFPDUDecode64K: receive side, whole-FPDU decode with CRC check.
func BenchmarkFPDUDecode64K(b *testing.B) {
	f := FPDU{Header: Header{Opcode: OpWrite, Last: true, STag: 0x1234}, Payload: seq(0, MaxULPDULength-14)}
	raw, _ := f.Append(nil, true)
	var p FPDU
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Parse(raw, true); err != nil {
			b.Fatal(err)
		}
	}
}
