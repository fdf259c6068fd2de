package wire

import (
	"bytes"
	"strings"
	"testing"
)

var samples = []Control{
	{},
	{Prod: 1 << 40, Cons: 77, Grant: 16, Seq: 0xdeadbeef},
	{Prod: 300, Cons: 5, Flags: FlagFIN, Seq: 9, Inline: []byte("hello")},
	{Prod: 4096, Flags: FlagOffer, Offer: Offer{Addr: 0x7f0000001000, Key: 0x1234, Size: 1 << 20}},
	{Prod: 8192, Flags: FlagSwitch, Switch: 8000, Inline: bytes.Repeat([]byte{'x'}, InlineRoom(FlagSwitch))},
	{Prod: 1 << 20, Flags: FlagOffer | FlagSwitch | FlagFIN, Offer: Offer{Addr: 1, Key: 2, Size: 3}, Switch: 1 << 19, Inline: []byte{0}},
	{Prod: MaxInline, Inline: bytes.Repeat([]byte{0xff}, MaxInline)},
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples {
		b, err := Append(nil, &m)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if len(b) != m.Len() {
			t.Fatalf("%+v: %d bytes, Len says %d", m, len(b), m.Len())
		}
		got, err := Parse(b)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if got.Prod != m.Prod || got.Cons != m.Cons || got.Grant != m.Grant || got.Flags != m.Flags ||
			got.Seq != m.Seq || got.Offer != m.Offer || got.Switch != m.Switch || !bytes.Equal(got.Inline, m.Inline) {
			t.Fatalf("round trip:\n in %+v\nout %+v", m, got)
		}
	}
}

// TestLayout pins the header layout the package documentation gives.
func TestLayout(t *testing.T) {
	m := Control{Prod: 0x0102030405060708, Cons: 0x1112131415161718, Grant: 0x2122, Flags: FlagFIN | FlagSwitch, Seq: 0x31323334,
		Switch: 0x4142434445464748, Inline: []byte{0x55}}
	m.Prod = 0x0102030405060708
	b, err := Append(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x21, 0x22, 0x05, 1, 0x31, 0x32, 0x33, 0x34,
		0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x55}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoding\n got %x\nwant %x", b, want)
	}
}

// TestAppendInPlace: a sender encodes into its registered slot; Append
// must neither allocate nor write past the slot.
func TestAppendInPlace(t *testing.T) {
	slot := make([]byte, 2*SlotSize)
	m := samples[4]
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Append(slot[:0:SlotSize], &m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Append into a slot allocates %v times", allocs)
	}
	for _, c := range slot[SlotSize:] {
		if c != 0 {
			t.Fatal("Append wrote past the slot")
		}
	}
}

func TestAppendRefuses(t *testing.T) {
	long := Control{Prod: 1000, Flags: FlagOffer, Inline: make([]byte, InlineRoom(FlagOffer)+1)}
	if b, err := Append(nil, &long); err != ErrTooLong || len(b) != 0 {
		t.Errorf("over-long message: %d bytes, %v", len(b), err)
	}
	odd := Control{Flags: 0x80}
	if b, err := Append(nil, &odd); err == nil || len(b) != 0 {
		t.Errorf("unknown flag: %d bytes, %v", len(b), err)
	}
}

func TestParseRejects(t *testing.T) {
	good, _ := Append(nil, &samples[5])
	cases := map[string][]byte{
		"short":              good[:HeaderLen-1],
		"truncated ext":      good[:HeaderLen+4],
		"long":               append(append([]byte{}, good...), 0),
		"over a slot":        make([]byte, SlotSize+1),
		"unknown flag":       func() []byte { b, _ := Append(nil, &Control{}); b[18] = 0x40; return b }(),
		"inline over 0":      func() []byte { b, _ := Append(nil, &Control{Prod: 3, Inline: []byte("abc")}); b[7] = 2; return b }(),
		"inline unannounced": func() []byte { b, _ := Append(nil, &Control{Prod: 3}); return append(b, 'x') }(),
	}
	for name, b := range cases {
		if m, err := Parse(b); err == nil {
			t.Errorf("%s: parsed %+v", name, m)
		} else if !strings.HasPrefix(err.Error(), "wire: ") {
			t.Errorf("%s: error %q does not say where it comes from", name, err)
		}
	}
}

// FuzzParse: anything parses or fails cleanly, and whatever parses
// re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	for _, m := range samples {
		b, _ := Append(nil, &m)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if len(m.Inline) > InlineRoom(m.Flags) || uint64(len(m.Inline)) > m.Prod {
			t.Fatalf("accepted %d inline bytes ending at %d with flags %#x", len(m.Inline), m.Prod, m.Flags)
		}
		enc, err := Append(nil, &m)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("round trip\n in %x\nout %x", b, enc)
		}
	})
}
