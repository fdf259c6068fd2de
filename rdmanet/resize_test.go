package rdmanet

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// stream writes n pseudo-random bytes from c1 to c2 in writes of size w and
// checks that c2 reads exactly them.
func stream(t *testing.T, c1, c2 *Conn, n, w int) {
	t.Helper()
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), uint64(w)))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	done := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		io.CopyN(h, c2, int64(n))
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		done <- sum
	}()
	for off := 0; off < n; off += w {
		_, err := c1.Write(src[off:min(off+w, n)])
		require.NoError(t, err)
	}
	require.Equal(t, sha256.Sum256(src), <-done, "the stream arrived changed")
}

// TestRingGrows: a bulk stream between adaptive Conns grows the reader's
// ring and the writer's staging buffer, and not a byte is lost or
// reordered across the switches.
func TestRingGrows(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	require.Equal(t, DefaultBufferSize, c2.Stats().Params.RecvRing)
	stream(t, c1, c2, 64<<20, 1<<20)
	s1, s2 := c1.Stats(), c2.Stats()
	t.Logf("writer: send ring %d, staging %d; reader: ring %d after %d resizes", s1.Params.SendRing, c1.stage.size(), s2.Params.RecvRing, s2.Resizes)
	require.Greater(t, s2.Params.RecvRing, DefaultBufferSize, "the reader's ring grew")
	require.LessOrEqual(t, s2.Params.RecvRing, MaxBufferSize)
	require.Equal(t, s2.Params.RecvRing, s1.Params.SendRing, "the writer adopted it")
	require.Positive(t, s2.Resizes)
	c2.mu.Lock()
	require.Nil(t, c2.recv.prev, "the old ring was freed")
	c2.mu.Unlock()
}

// TestFixedBufferDoesNotGrow: a BufferSize fixes the ring.
func TestFixedBufferDoesNotGrow(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 64<<10)
	defer stop()
	stream(t, c1, c2, 16<<20, 1<<20)
	require.Equal(t, 64<<10, c2.Stats().Params.RecvRing)
	require.Equal(t, 64<<10, c1.Stats().Params.SendRing)
	require.Zero(t, c2.Stats().Resizes)
}
