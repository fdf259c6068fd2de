//go:build verbs && linux && cgo

package interop_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// readSizes are the RDMA Reads, posted all at once: four, the EPs' Read
// depth (max_rdma_read_out and max_rdma_read_in), so the Read Requests
// are outstanding together and their Responses, several FPDUs for the
// larger ones, come back in order.
var readSizes = []int{1, 4099, 65536, 262147}

// RDMA Read both ways over each connection: the reader gets the peer's
// window byte for byte, in one local segment (siw reads into one), and
// nothing around its sink changes.
func TestRDMARead(t *testing.T) {
	require.LessOrEqual(t, len(readSizes), epAttr.MaxRDMAReadOut)
	bothDirections(t, func(t *testing.T, a, p *side) {
		l := connect(t, a, p)
		t.Run(a.name+"_reads", func(t *testing.T) { readAll(t, a, p, l.aep, 500) })
		t.Run(p.name+"_reads", func(t *testing.T) { readAll(t, p, a, l.pep, 600) })
	})
}

// readAll has "by" read a fresh window of "of"'s memory per size, then
// checks each sink once its own Read completed.
func readAll(t *testing.T, by, of *side, ep *dat.EP, seed uint32) {
	type read struct {
		sink *region
		want []byte
	}
	rs := make([]read, len(readSizes))
	for i, n := range readSizes {
		window := newSpread(n)
		src, data := window.source(seed + uint32(i))
		source := of.register(t, src, dat.MemPrivRemoteRead)
		buf, want := window.sink(data, seed+uint32(i)+50)
		rs[i] = read{sink: by.register(t, buf, dat.MemPrivLocalWrite), want: want}
		require.NoError(t, ep.PostRDMARead(window.iov(rs[i].sink), uint64(i), source.remote(window.offs[0], n), dat.CompletionDefault))
	}
	for i, r := range rs {
		c := done(t, by.req, uint64(i), dat.DTORDMARead)
		require.Equal(t, uint32(readSizes[i]), c.Length)
		requireBytes(t, fmt.Sprintf("%dB read by %s", readSizes[i], by.name), r.want, r.sink.buf)
	}
}
