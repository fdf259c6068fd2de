package main

import (
	"bytes"
	"testing"
)

func TestInfoEncoding(t *testing.T) {
	m := rdmaInfo{Buf: 0x0102030405060708, RKey: 0x090a0b0c, Size: 64}
	got := appendInfo(nil, m)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0, 0, 64}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendInfo = % x, want % x", got, want)
	}
	back, err := parseInfo(got)
	if err != nil || back != m {
		t.Fatalf("parseInfo = %+v, %v; want %+v", back, err, m)
	}
	// The server's go-ahead is an all-zero struct.
	if z := appendInfo(nil, rdmaInfo{}); !bytes.Equal(z, make([]byte, 16)) {
		t.Fatalf("zero message = % x", z)
	}
	// Appending keeps what is there.
	if b := appendInfo([]byte{0xff}, m); len(b) != 17 || b[0] != 0xff {
		t.Fatalf("appendInfo to a prefix = % x", b)
	}
}

func TestInfoLengthCheck(t *testing.T) {
	for _, n := range []int{0, 1, 15, 17, 32, 64} {
		if _, err := parseInfo(make([]byte, n)); err == nil {
			t.Errorf("parseInfo accepted %d bytes; rping takes exactly 16", n)
		}
	}
}

func FuzzInfo(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add(appendInfo(nil, rdmaInfo{Buf: 0x7f00deadbeef, RKey: 0x1234, Size: 64}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseInfo(b)
		if (err == nil) != (len(b) == infoLen) {
			t.Fatalf("parseInfo(%d bytes) error %v", len(b), err)
		}
		if err != nil {
			return
		}
		if enc := appendInfo(nil, m); !bytes.Equal(enc, b) {
			t.Fatalf("round trip: % x -> %+v -> % x", b, m, enc)
		}
		if again, _ := parseInfo(appendInfo(nil, m)); again != m {
			t.Fatalf("round trip of %+v gave %+v", m, again)
		}
	})
}
