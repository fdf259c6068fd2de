//go:build verbs && linux && cgo

package interop_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// writeCases are the RDMA Writes, by the segment lengths of their local
// source; each targets a window of the same size in the peer's memory.
var writeCases = []struct {
	name string
	src  []int
}{
	{"1B", []int{1}},
	{"4099B_2_segments", []int{1, 4098}},
	{"64KiB", []int{65536}},
	{"256KiB+5_3_segments", []int{5, 131072, 131072}},
}

// RDMA Write both ways over each connection: the data lands byte for byte
// in the target window, and the guard bytes around the window (and the
// rest of the target region) stay as they were.
func TestRDMAWrite(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		l := connect(t, a, p)
		t.Run(a.name+"_writes", func(t *testing.T) { writeAll(t, a, p, l.aep, l.pep, 300) })
		t.Run(p.name+"_writes", func(t *testing.T) { writeAll(t, p, a, l.pep, l.aep, 400) })
	})
}

// fenceCookie marks the Send that follows the Writes.
const fenceCookie = 0xfe9ce

// writeAll posts every Write from "from" into fresh regions of "to", then
// a Send. The target has no completion for a Write, so it learns that the
// Writes were placed from the Send's receive: RDMAP delivers a Send only
// after the messages before it (RFC 5040 ordering), and the race detector
// needs this side's completion before the bytes are read, too.
func writeAll(t *testing.T, from, to *side, fromEP, toEP *dat.EP, seed uint32) {
	type write struct {
		src, dst *region
		srcs     spread
		want     []byte
	}
	ws := make([]write, len(writeCases))
	for i, c := range writeCases {
		w := &ws[i]
		w.srcs = newSpread(c.src...)
		src, data := w.srcs.source(seed + uint32(i))
		w.src = from.register(t, src, dat.MemPrivLocalRead)
		// One window with a guard gap each side.
		window := newSpread(len(data))
		dst, want := window.sink(data, seed+uint32(i)+50)
		w.dst, w.want = to.register(t, dst, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite), want
		require.NoError(t, fromEP.PostRDMAWrite(w.srcs.iov(w.src), uint64(i), w.dst.remote(window.offs[0], len(data)), dat.CompletionDefault))
	}
	note := newSpread(8)
	out, _ := note.source(seed + 99)
	noteIn := to.register(t, make([]byte, note.size), dat.MemPrivLocalWrite)
	noteOut := from.register(t, out, dat.MemPrivLocalRead)
	require.NoError(t, toEP.PostRecv(note.iov(noteIn), fenceCookie, dat.CompletionDefault))
	require.NoError(t, fromEP.PostSend(note.iov(noteOut), fenceCookie, dat.CompletionDefault))
	for i := range ws {
		done(t, from.req, uint64(i), dat.DTORDMAWrite)
	}
	done(t, from.req, fenceCookie, dat.DTOSend)
	done(t, to.recv, fenceCookie, dat.DTOReceive)
	for i, w := range ws {
		requireBytes(t, fmt.Sprintf("%s: %s's target region", writeCases[i].name, to.name), w.want, w.dst.buf)
	}
}
