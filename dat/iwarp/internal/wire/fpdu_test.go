package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestFramingLengths(t *testing.T) {
	tests := []struct{ ulpdu, pad, trailer, total int }{
		{0, 2, 6, 8},
		{1, 1, 5, 8},
		{2, 0, 4, 8},
		{3, 3, 7, 12},
		{14, 0, 4, 20}, // zero-length Write: the minimum FPDU
		{18, 0, 4, 24}, // zero-length Send
		{34, 0, 4, 40}, // rping Send
		{35, 3, 7, 44},
		{36, 2, 6, 44},
		{37, 1, 5, 44},
		{46, 0, 4, 52}, // Read Request
		{65535, 3, 7, MaxFPDULen},
	}
	for _, tc := range tests {
		if got := PadLen(tc.ulpdu); got != tc.pad {
			t.Errorf("PadLen(%d) = %d, want %d", tc.ulpdu, got, tc.pad)
		}
		if got := TrailerLen(tc.ulpdu); got != tc.trailer {
			t.Errorf("TrailerLen(%d) = %d, want %d", tc.ulpdu, got, tc.trailer)
		}
		if got := FPDULen(tc.ulpdu); got != tc.total || got%4 != 0 {
			t.Errorf("FPDULen(%d) = %d, want %d", tc.ulpdu, got, tc.total)
		}
	}
	if MaxFPDULen != 65544 || MinFPDULen != 20 {
		t.Fatalf("MaxFPDULen %d MinFPDULen %d", MaxFPDULen, MinFPDULen)
	}
}

func TestParseULPDULength(t *testing.T) {
	if _, err := ParseULPDULength([]byte{1}); err != ErrShortBuffer {
		t.Fatalf("short: %v", err)
	}
	if l, err := ParseULPDULength([]byte{0x12, 0x34, 0xff}); err != nil || l != 0x1234 {
		t.Fatalf("= %d, %v", l, err)
	}
}

// For every pad size the trailer must be zero pad + little-endian CRC-32C
// over the contiguous length field, ULPDU and pad, computed here without
// the package's CRC type.
func TestAppendTrailer(t *testing.T) {
	for n := 0; n < 8; n++ {
		// an FPDU body: length field + header-ish bytes + n payload bytes
		payload := seq(0xA0, n)
		hdr := []byte{0, byte(18 + n), 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
		ulpdu := len(hdr) - 2 + n
		contiguous := append(append(append([]byte(nil), hdr...), payload...), make([]byte, PadLen(ulpdu))...)
		want := append(append([]byte(nil), make([]byte, PadLen(ulpdu))...), 0, 0, 0, 0)
		binary.LittleEndian.PutUint32(want[len(want)-4:], Checksum(contiguous))

		got := AppendFPDUTrailer(nil, hdr, payload, true)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d trailer % x, want % x", n, got, want)
		}
		if got := AppendTrailer([]byte{9}, ulpdu, CRC(0).Update(hdr).Update(payload), true); !bytes.Equal(got[1:], want) || got[0] != 9 {
			t.Fatalf("n=%d AppendTrailer % x", n, got)
		}
		off := AppendFPDUTrailer(nil, hdr, payload, false)
		if !bytes.Equal(off, make([]byte, TrailerLen(ulpdu))) {
			t.Fatalf("n=%d CRC-off trailer % x", n, off)
		}
		// Receive side accepts both.
		crc := CRC(0).Update(hdr).Update(payload)
		if err := CheckTrailer(got, ulpdu, crc, true); err != nil {
			t.Fatalf("n=%d CheckTrailer: %v", n, err)
		}
		if err := CheckTrailer(off, ulpdu, crc, false); err != nil {
			t.Fatalf("n=%d CheckTrailer off: %v", n, err)
		}
	}
}

func TestCheckTrailerErrors(t *testing.T) {
	hdr := unhex(t, specSendCRC)
	body, trailer := hdr[:36], hdr[36:]
	crc := CRC(0).Update(body)
	if err := CheckTrailer(trailer, 34, crc, true); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), trailer...)
	bad[0] ^= 1
	if err := CheckTrailer(bad, 34, crc, true); err != ErrCRC {
		t.Fatalf("flipped CRC: %v", err)
	}
	if c, ok := CauseOf(ErrCRC); !ok || c != (TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}) {
		t.Fatalf("CRC cause %v", c)
	}
	// CRC off: garbage in the CRC field and pad is ignored, as by siw.
	if err := CheckTrailer([]byte{1, 2, 3, 4, 5, 6}, 36, 0, false); err != nil {
		t.Fatalf("CRC off: %v", err)
	}
	// With CRC on a nonzero pad byte changes the CRC.
	p := unhex(t, "00 01 41 00 00") // ulpdu 1, pad 1
	c := CRC(0).Update(p[:3])
	tr := AppendTrailer(nil, 1, c, true)
	tr[0] = 0xff
	if err := CheckTrailer(tr, 1, c, true); err != ErrCRC {
		t.Fatalf("pad corruption: %v", err)
	}
	for _, n := range []int{0, 3, 5} {
		if err := CheckTrailer(make([]byte, n), 34, crc, false); !errors.Is(err, ErrTrailerLength) {
			t.Fatalf("len %d: %v", n, err)
		}
	}
}
