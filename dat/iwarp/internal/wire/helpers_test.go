package wire

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unhex decodes hex with any whitespace in it, so vectors can be written
// the way tshark and the spec print them.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// streamFPDU is one FPDU found by walkStream, with its offset in the stream.
type streamFPDU struct {
	off int
	raw []byte
}

// walkStream reads a captured one-direction TCP byte stream the way a
// provider's reader would: the MPA frame header first (20 bytes), exactly
// PD_Length more, then per FPDU 4 bytes, the rest of the header, the rest
// of the ULPDU and the trailer, accumulating the CRC over the pieces. It
// never looks past the FPDU it is reading. It returns the MPA frame and
// the FPDUs.
func walkStream(t *testing.T, s []byte, kind MPAKind, withCRC bool) (MPAFrame, []streamFPDU) {
	t.Helper()
	var f MPAFrame
	if err := f.Header.Parse(s[:MPAHeaderLen], kind, MaxPrivateDataSiw); err != nil {
		t.Fatalf("MPA header: %v", err)
	}
	pdEnd := MPAHeaderLen + int(f.Header.PDLength)
	if err := f.ParsePrivateData(s[MPAHeaderLen:pdEnd]); err != nil {
		t.Fatalf("MPA private data: %v", err)
	}
	var out []streamFPDU
	off := pdEnd
	for off < len(s) {
		op, l, err := ParseControl(s[off : off+4])
		if err != nil {
			t.Fatalf("FPDU at %d: %v", off, err)
		}
		hl := op.HeaderLen()
		var h Header
		if _, err := h.Parse(s[off : off+hl]); err != nil {
			t.Fatalf("header at %d: %v", off, err)
		}
		end := off + ULPDULengthLen + l
		crc := CRC(0).Update(s[off : off+hl])
		// Payload arrives in pieces in real life; feed it in two.
		mid := off + hl + (end-off-hl)/2
		crc = crc.Update(s[off+hl : mid]).Update(s[mid:end])
		n := FPDULen(l)
		if err := CheckTrailer(s[end:off+n], l, crc, withCRC); err != nil {
			t.Fatalf("trailer at %d: %v", off, err)
		}
		out = append(out, streamFPDU{off, s[off : off+n]})
		off += n
	}
	return f, out
}
