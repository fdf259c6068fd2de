package dat_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdmanet/dat"
)

// LMRs register Go heap memory (every other test) and page-aligned memory
// from unix.Mmap, which rdmanet's rings use; the peer RDMA-writes into the
// mapped region and reads it back.
func TestLMRMmapRegion(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	size := 4 * os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	lmr, err := x.s.ia.CreateLMR(x.s.pz, mem, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Deregistered first: its STag is gone before the pages are.
		require.NoError(t, lmr.Free())
		require.NoError(t, unix.Munmap(mem))
	})
	p, err := lmr.Query()
	require.NoError(t, err)
	require.Zero(t, p.Addr%uint64(os.Getpagesize()), "page aligned")
	require.Equal(t, uint64(size), p.Length)

	src := register(t, x.c, x.c.pz, 2*size, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	fill(src.buf[:size], 6)
	remote := dat.RMRTriplet{Addr: p.Addr, Length: uint32(size), Context: p.RMRContext}
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, size)}, 1, remote, dat.CompletionSuppress))
	require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{src.seg(size, size)}, 2, remote, dat.CompletionDefault))
	dto(t, x.cReq, 2, dat.DTORDMARead)
	require.True(t, bytes.Equal(src.buf[:size], src.buf[size:]))
}
