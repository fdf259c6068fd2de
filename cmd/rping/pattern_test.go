package main

import (
	"bytes"
	"testing"
)

func TestPatternSpecStrings(t *testing.T) {
	// The spec's strings for -S 64: 63 characters and the NUL.
	for i, want := range []string{
		"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr",
		"rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs",
		"rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst",
	} {
		buf := bytes.Repeat([]byte{0xAA}, 64)
		fillPattern(buf, i)
		if got := string(buf[:63]); got != want || buf[63] != 0 {
			t.Errorf("iteration %d:\n got %q (last byte %#x)\nwant %q", i, got, buf[63], want)
		}
		if string(cString(buf)) != want {
			t.Errorf("iteration %d: cString = %q", i, cString(buf))
		}
	}
}

func TestPatternEdges(t *testing.T) {
	cases := []struct {
		size, i int
		want    string
	}{
		{23, 0, "rdma-ping-0: ABCDEFGHI"}, // -S 23, seen from kernel rping
		{23, 1, "rdma-ping-1: BCDEFGHIJ"},
		{23, 57, "rdma-ping-57: zABCDEFG"}, // the start wraps after 'z'
		{23, 58, "rdma-ping-58: ABCDEFGH"},
		{23, 1000000000, "rdma-ping-1000000000: "}, // snprintf fills, the run is cut to nothing
		{5, 0, "rdma"}, // shorter than the prefix: snprintf truncates
		{1, 0, ""},
		{16, 3, "rdma-ping-3: DE"},
	}
	for _, c := range cases {
		buf := bytes.Repeat([]byte{0xAA}, c.size)
		fillPattern(buf, c.i)
		if got := string(cString(buf)); got != c.want || buf[c.size-1] != 0 {
			t.Errorf("size %d iteration %d: got %q, want %q", c.size, c.i, got, c.want)
		}
	}
	// The run wraps from 'z' to 'A' inside one buffer.
	buf := make([]byte, 200)
	fillPattern(buf, 0)
	if !bytes.Contains(buf, []byte("xyzABC")) {
		t.Errorf("no wrap in %q", buf)
	}
	fillPattern(nil, 0) // must not panic
}
