package wire

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// mpaSeeds and fpduSeeds are the golden vectors; they seed f.Add and the
// checked-in corpus under testdata/fuzz (see TestWriteFuzzSeeds).
func mpaSeeds(t testing.TB) map[string][]byte {
	c2s := readTestdata(t, "siw-dtest-b4096-B4.c2s.bin")
	s2c := readTestdata(t, "siw-dtest-b4096-B4.s2c.bin")
	return map[string][]byte{
		"rping-request": unhex(t, rpingFrame4Request),
		"rping-reply":   unhex(t, rpingFrame6Reply),
		"dtest-request": c2s[:72],
		"dtest-reply":   s2c[:72],
		"v1-reject":     mpaBytes(mpaKeyReply, 0x20, 1, 5, []byte("nope!")),
		"rev3":          mpaBytes(mpaKeyRequest, 0x10, 3, 4, []byte{0, 1, 0, 1}),
		"e-short-pd":    mpaBytes(mpaKeyRequest, 0x10, 2, 2, []byte{0, 1}),
		"p2p":           mpaBytes(mpaKeyRequest, 0xD0, 2, 6, []byte{0x80, 0x80, 0xC0, 0x80, 'h', 'i'}),
	}
}

func fpduSeeds(t testing.TB) map[string]struct {
	b   []byte
	crc bool
} {
	type seed = struct {
		b   []byte
		crc bool
	}
	s := map[string]seed{
		"spec-send-crc":     {unhex(t, specSendCRC), true},
		"spec-rreq-crc":     {unhex(t, specReadReqCRC), true},
		"spec-rtr-crc":      {unhex(t, specRTRCRC), true},
		"spec-term-crc":     {unhex(t, specTermCRC), true},
		"rping-send":        {unhex(t, rpingFrame8Send), false},
		"rping-rreq":        {unhex(t, rpingFrame9ReadReq), false},
		"rping-rresp":       {unhex(t, rpingFrame10RResp), false},
		"rping-write":       {unhex(t, rpingFrame13Write), false},
		"dtest-write-4096":  {readTestdata(t, "siw-dtest-b4096-B4.c2s.bin")[112 : 112+4116], false},
		"ulpdu-underflow":   {[]byte{0, 0, 0x41, 0x43, 0, 0, 0, 0}, false},
		"bad-qn":            {unhex(t, "00 12 41 43 00000000 00000007 00000001 00000000 00000000"), false},
		"term-ddp-attached": {nil, true},
	}
	for n := 1; n <= 3; n++ {
		f := FPDU{Header: Header{Opcode: OpSendSE, Last: true, MSN: 2}, Payload: seq(0x61, n)}
		b, _ := f.Append(nil, true)
		s[fmt.Sprintf("send-pad%d-crc", PadLen(18+n))] = seed{b, true}
	}
	tm := SiwTerminate(TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPAccessRights}, unhex(t, rpingFrame9ReadReq), TermLayoutSiwLE, nil)
	b, _ := AppendTerminate(nil, &tm, true)
	s["term-ddp-attached"] = seed{b, true}
	return s
}

// FuzzMPAFrame: the Request/Reply parser never panics, agrees with the
// header-first reader path, and whatever it accepts re-encodes to the
// same bytes.
func FuzzMPAFrame(f *testing.F) {
	for _, b := range mpaSeeds(f) {
		f.Add(b, b[9] == 'p', uint16(MaxPrivateDataSiw))
	}
	f.Fuzz(func(t *testing.T, data []byte, reply bool, maxPD uint16) {
		kind := MPARequest
		if reply {
			kind = MPAReply
		}
		var fr MPAFrame
		n, err := fr.Parse(data, kind, int(maxPD))
		var h MPAHeader
		herr := h.Parse(data, kind, int(maxPD))
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n=%d", err, n)
			}
			if herr == nil && len(data) >= MPAHeaderLen+int(h.PDLength) {
				t.Fatalf("header parses but frame fails: %v", err)
			}
			return
		}
		if herr != nil || h != fr.Header {
			t.Fatalf("header-first path: %+v, %v vs %+v", h, herr, fr.Header)
		}
		if n != fr.Len() || n > len(data) || int(fr.Header.PDLength) > min(int(maxPD), MaxPrivateDataRFC) {
			t.Fatalf("n=%d Len=%d PD=%d", n, fr.Len(), fr.Header.PDLength)
		}
		if fr.Header.Enhanced() && (fr.Header.Revision != 2 || fr.Header.PDLength < MPAv2Len) {
			t.Fatalf("accepted bad enhanced frame %+v", fr.Header)
		}
		out, err := fr.Append(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(out, data[:n]) {
			t.Fatalf("round trip\n in % x\nout % x", data[:n], out)
		}
	})
}

// FuzzFPDU: the whole-FPDU decoder (framing + CRC + DDP/RDMAP header +
// body) never panics; what it accepts the streaming reader path accepts
// too, and re-encoding gives the same bytes, except that pad and (with
// CRC off) the CRC field come out canonical (zero), since receivers
// ignore them like siw does. SiwTerminate is fed the same bytes as an
// offending header.
func FuzzFPDU(f *testing.F) {
	for _, s := range fpduSeeds(f) {
		f.Add(s.b, s.crc)
	}
	f.Fuzz(func(t *testing.T, data []byte, withCRC bool) {
		if len(data) >= 2 {
			var buf [MaxTerminateAttachLen]byte
			c := TermCause{TermLayer(data[0] & 3), data[1] & 3, data[len(data)-1]}
			tm := SiwTerminate(c, data, TermLayout(data[0]>>7), buf[:])
			if !validAttachLen(len(tm.Attached)) {
				t.Fatalf("SiwTerminate attached %d bytes", len(tm.Attached))
			}
		}

		var fp FPDU
		n, err := fp.Parse(data, withCRC)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n=%d", err, n)
			}
			return
		}
		l := int(fp.Header.ULPDULength)
		if n != FPDULen(l) || n > len(data) || l < fp.Header.Opcode.MinULPDULength() {
			t.Fatalf("n=%d ULPDU_Length=%d", n, l)
		}

		// Streaming path over the same bytes.
		op, sl, err := ParseControl(data[:4])
		if err != nil || op != fp.Header.Opcode || sl != l {
			t.Fatalf("ParseControl = %v, %d, %v", op, sl, err)
		}
		var h Header
		if _, err := h.Parse(data[:op.HeaderLen()]); err != nil || h != fp.Header {
			t.Fatalf("Header.Parse = %+v, %v", h, err)
		}
		end := ULPDULengthLen + l
		if err := CheckTrailer(data[end:n], l, CRC(0).Update(data[:end]), withCRC); err != nil {
			t.Fatalf("CheckTrailer: %v", err)
		}

		out, err := fp.Append(nil, withCRC)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		canonical := append([]byte(nil), data[:end]...)
		canonical = AppendTrailer(canonical, l, CRC(0).Update(canonical), withCRC)
		if !bytes.Equal(out, canonical) {
			t.Fatalf("round trip\n in % x\nout % x", data[:n], out)
		}
		if bytes.Equal(data[end:end+PadLen(l)], zeroPad[:PadLen(l)]) && (withCRC || bytes.Equal(data[n-4:n], []byte{0, 0, 0, 0})) &&
			!bytes.Equal(out, data[:n]) {
			t.Fatalf("canonical input did not round-trip")
		}
	})
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/{FuzzMPAFrame,FuzzFPDU}
// from the golden vectors when WIRE_WRITE_FUZZ_SEEDS=1; otherwise it
// checks that the checked-in corpus is there.
func TestWriteFuzzSeeds(t *testing.T) {
	write := os.Getenv("WIRE_WRITE_FUZZ_SEEDS") == "1"
	put := func(target, name, content string) {
		p := filepath.Join("testdata", "fuzz", target, name)
		if !write {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("missing seed %s (run with WIRE_WRITE_FUZZ_SEEDS=1)", p)
			}
			return
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range mpaSeeds(t) {
		put("FuzzMPAFrame", name, fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\nuint16(%d)\n", b, b[9] == 'p', MaxPrivateDataSiw))
	}
	for name, s := range fpduSeeds(t) {
		put("FuzzFPDU", name, fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", s.b, s.crc))
	}
}

// The seeds must reach the interesting code: all but the deliberately bad
// ones decode.
func TestFuzzSeedsDecode(t *testing.T) {
	wantMPA := map[string]error{"rev3": ErrMPARevision, "e-short-pd": ErrMPAEnhancedPrivateData}
	for name, b := range mpaSeeds(t) {
		kind := MPARequest
		if b[9] == 'p' {
			kind = MPAReply
		}
		var fr MPAFrame
		if _, err := fr.Parse(b, kind, MaxPrivateDataSiw); err != wantMPA[name] {
			t.Errorf("MPA seed %s: %v", name, err)
		}
	}
	wantFPDU := map[string]error{"ulpdu-underflow": ErrULPDUTooShort, "bad-qn": ErrInvalidQN}
	for name, s := range fpduSeeds(t) {
		var fp FPDU
		if _, err := fp.Parse(s.b, s.crc); err != wantFPDU[name] {
			t.Errorf("FPDU seed %s: %v", name, err)
		}
	}
}
