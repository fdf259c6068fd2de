//go:build verbs && linux && cgo

package interop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// region is registered memory of one side.
type region struct {
	buf []byte
	p   dat.LMRParam
}

// register registers buf, already holding its initial contents, with the
// given privileges. Every transfer uses fresh memory, written before it is
// registered: the registration orders those writes before anything the
// provider does with the region (the race detector sees no other order
// between a test and a receive goroutine placing a peer's bytes). Bytes
// placed by the peer are read only after a completion of this side said
// they arrived, and never reused.
func (s *side) register(t *testing.T, buf []byte, priv dat.MemPriv) *region {
	t.Helper()
	lmr, err := s.ia.CreateLMR(s.pz, buf, priv)
	require.NoError(t, err)
	p, err := lmr.Query()
	require.NoError(t, err)
	return &region{buf: buf, p: p}
}

// remote is the RMR triplet the peer uses for bytes [off, off+n).
func (r *region) remote(off, n int) dat.RMRTriplet {
	return dat.RMRTriplet{Addr: r.p.Addr + uint64(off), Length: uint32(n), Context: r.p.RMRContext}
}

// gap is the number of bytes before, between and after the segments of a
// spread. Nobody may write them. It is odd so that segments start at
// unaligned addresses.
const gap = 13

// spread lays out segments of given lengths in one region, each preceded
// by a gap and the last one followed by one.
type spread struct {
	offs, lens []int
	size       int // region size
}

func newSpread(lens ...int) spread {
	s := spread{lens: lens, size: gap}
	for _, n := range lens {
		s.offs = append(s.offs, s.size)
		s.size += n + gap
	}
	return s
}

// total is the sum of the segment lengths.
func (s spread) total() int { return s.size - gap*(len(s.lens)+1) }

// iov is the local IOV naming the segments in r.
func (s spread) iov(r *region) []dat.LMRTriplet {
	iov := make([]dat.LMRTriplet, len(s.lens))
	for i, off := range s.offs {
		iov[i] = dat.LMRTriplet{Addr: r.p.Addr + uint64(off), Length: uint32(s.lens[i]), Context: r.p.Context}
	}
	return iov
}

// each calls fn with the index into b of every byte of the segments, in
// IOV order, for the first n of them.
func (s spread) each(n int, fn func(k, i int)) {
	k := 0
	for j, off := range s.offs {
		for i := off; i < off+s.lens[j] && k < n; i++ {
			fn(k, i)
			k++
		}
	}
}

// gather returns the bytes of b's segments, in IOV order: what a Send or
// Write of s.iov transfers.
func (s spread) gather(b []byte) []byte {
	out := make([]byte, s.total())
	s.each(len(out), func(k, i int) { out[k] = b[i] })
	return out
}

// sink returns a buffer laid out by s, ready to receive data into its
// segments, and what it must hold afterwards. The buffer holds a pattern,
// except that each byte data will land on is the complement of its data
// byte, so a byte that is never written shows up as surely as a wrong one.
func (s spread) sink(data []byte, seed uint32) (buf, want []byte) {
	buf = make([]byte, s.size)
	fill(buf, seed)
	s.each(len(data), func(k, i int) { buf[i] = ^data[k] })
	want = append([]byte(nil), buf...)
	s.each(len(data), func(k, i int) { want[i] = data[k] })
	return buf, want
}

// source returns a buffer laid out by s whose segments, and gaps, hold a
// pattern, and the bytes its segments carry in IOV order.
func (s spread) source(seed uint32) (buf, data []byte) {
	buf = make([]byte, s.size)
	fill(buf, seed)
	return buf, s.gather(buf)
}

// fill writes a pseudo-random sequence depending on seed (xorshift32), so
// two transfers never carry the same bytes and a byte from the wrong
// message or offset is caught.
func fill(b []byte, seed uint32) {
	x := seed*2654435761 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x >> 7)
	}
}

// requireBytes compares a whole region with what it must hold, reporting
// the first difference and how many bytes differ rather than dumping up
// to a quarter megabyte.
func requireBytes(t *testing.T, what string, want, got []byte) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: length", what)
	first, n := -1, 0
	for i := range want {
		if want[i] != got[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n > 0 {
		t.Fatalf("%s: %d of %d bytes differ, the first at offset %d (want %#02x, got %#02x)",
			what, n, len(want), first, want[first], got[first])
	}
}
