package handshake

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sample = Hello{Version: Version, Credits: 32, RingAddr: 0x7f00_1234_5000, RingKey: 0xabcdef01, RingSize: 256 << 10}

func TestHelloLayout(t *testing.T) {
	got := AppendHello(nil, sample)
	want, _ := hex.DecodeString("52444e54" + "01" + "00" + "0020" + "00007f0012345000" + "abcdef01" + "00040000")
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	if len(got) != HelloLen || HelloLen > MaxLen {
		t.Fatalf("length %d", len(got))
	}
	h, err := ParseHello(got)
	if err != nil || h != sample {
		t.Fatalf("ParseHello = %+v, %v", h, err)
	}
}

func TestParseHelloErrors(t *testing.T) {
	good := AppendHello(nil, sample)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name    string
		in      []byte
		reason  Reason
		offered uint8
		text    string
	}{
		{"empty", nil, ReasonMalformed, 0, "malformed hello: 0 bytes, too short for a header"},
		{"garbage", []byte("GET / HTTP/1.1\r\n"), ReasonBadMagic, 0, "bad magic: magic 0x47455420"},
		{"version 9", mod(func(b []byte) []byte { b[4] = 9; return b }), ReasonVersion, 9, "unsupported version 9 (server speaks 1)"},
		{"version 9, short", []byte{0x52, 0x44, 0x4e, 0x54, 9}, ReasonVersion, 9, ""},
		{"truncated", good[:20], ReasonMalformed, 0, ""},
		{"too long", append(mod(func(b []byte) []byte { return b }), make([]byte, 33)...), ReasonMalformed, 0, ""},
		{"one credit", mod(func(b []byte) []byte { b[7] = 1; return b }), ReasonMalformed, 0, ""},
		{"tiny ring", mod(func(b []byte) []byte { copy(b[20:], []byte{0, 0, 1, 0}); return b }), ReasonMalformed, 0, ""},
		{"wrapping ring", mod(func(b []byte) []byte { copy(b[8:], bytes.Repeat([]byte{0xff}, 8)); return b }), ReasonMalformed, 0, ""},
	} {
		_, err := ParseHello(tc.in)
		var he *Error
		if !errors.As(err, &he) {
			t.Errorf("%s: error %v is not an *Error", tc.name, err)
			continue
		}
		if he.Reason != tc.reason || he.Offered != tc.offered {
			t.Errorf("%s: got %+v", tc.name, he)
		}
		if tc.text != "" && he.Error() != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, he.Error(), tc.text)
		}
	}
	// Trailing bytes up to MaxLen are a future extension, not an error.
	if _, err := ParseHello(append(append([]byte(nil), good...), make([]byte, MaxLen-HelloLen)...)); err != nil {
		t.Errorf("extended hello: %v", err)
	}
}

func TestReject(t *testing.T) {
	for _, r := range []Reject{
		{Reason: ReasonBadMagic, Speaks: 1},
		{Reason: ReasonVersion, Speaks: 1, Offered: 9},
		{Reason: ReasonMalformed, Speaks: 1},
		{Reason: ReasonResources, Speaks: 1},
	} {
		b := AppendReject(nil, r)
		if len(b) != RejectLen {
			t.Fatalf("length %d", len(b))
		}
		got, ok := ParseReject(b)
		if !ok || got != r {
			t.Errorf("ParseReject(%x) = %+v, %v; want %+v", b, got, ok, r)
		}
	}
	for _, b := range [][]byte{nil, []byte("nope"), []byte("RDNT\x02\x01\x01\x01"), AppendHello(nil, sample)[:7]} {
		if _, ok := ParseReject(b); ok {
			t.Errorf("ParseReject(%q) accepted", b)
		}
	}
	_, err := ParseHello([]byte("RDNT\x09"))
	if got := RejectFor(err); got != (Reject{Reason: ReasonVersion, Speaks: Version, Offered: 9}) {
		t.Errorf("RejectFor = %+v", got)
	}
	if got := RejectFor(errors.New("x")).Reason; got != ReasonMalformed {
		t.Errorf("RejectFor(other) = %v", got)
	}
	if s := (Reject{Reason: ReasonVersion, Speaks: 1, Offered: 9}).Err().Error(); s != "unsupported version 9 (server speaks 1)" {
		t.Errorf("reject text %q", s)
	}
}

// FuzzParseHello checks that any input either parses into a Hello that
// re-encodes to the same first 24 bytes, or fails with an *Error whose
// reject payload parses back; nothing panics. The seed corpus is in
// testdata/fuzz/FuzzParseHello.
func FuzzParseHello(f *testing.F) {
	f.Add(AppendHello(nil, sample))
	f.Add([]byte("RDNT\x09"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHello(b)
		if err != nil {
			var he *Error
			if !errors.As(err, &he) {
				t.Fatalf("error %T", err)
			}
			_ = he.Error()
			r, ok := ParseReject(AppendReject(nil, RejectFor(err)))
			if !ok || r.Reason != he.Reason {
				t.Fatalf("reject round trip: %+v %v", r, ok)
			}
			return
		}
		if len(b) < HelloLen || len(b) > MaxLen {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if enc := AppendHello(nil, h); !bytes.Equal(enc, b[:HelloLen]) {
			t.Fatalf("round trip\n in %x\nout %x", b[:HelloLen], enc)
		}
	})
}
