package rdmanet

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteDirect: a Write of at least directMin goes zero-copy (the
// staging buffer is not used), arrives intact, and the caller may reuse
// the buffer as soon as Write returns.
func TestWriteDirect(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	min := c1.directMin()
	require.Positive(t, min, "the iwarp provider writes large buffers in place")
	sizes := []int{min, min + 1, 3*min + 12345, 8 << 20}
	var want bytes.Buffer
	got := make(chan []byte, 1)
	total := 0
	for _, n := range sizes {
		total += n
	}
	go func() {
		b, _ := io.ReadAll(io.LimitReader(c2, int64(total)))
		got <- b
	}()
	stage0 := c1.stProd
	b := make([]byte, 8<<20+3*min)
	for i, n := range sizes {
		for j := range b[:n] {
			b[j] = byte(i*7 + j*13)
		}
		want.Write(b[:n])
		w, err := c1.Write(b[:n])
		require.NoError(t, err)
		require.Equal(t, n, w)
		// Write returned: b is ours again. Scribbling on it must not
		// change what the peer reads.
		for j := range b[:n] {
			b[j] = 0xEE
		}
	}
	require.Equal(t, stage0, c1.stProd, "zero-copy Writes do not use the staging buffer")
	require.True(t, bytes.Equal(want.Bytes(), <-got), "the stream arrived changed")
}

// TestWriteDirectDeadline: a zero-copy Write that runs into its deadline
// (the reader does not read) returns the bytes it sent and a timeout, and
// those bytes, and no others, reach the reader intact.
func TestWriteDirectDeadline(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	b := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: far more than a ring
	c1.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c1.Write(b)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "err %v", err)
	require.Less(t, n, len(b))
	require.Positive(t, n)
	c1.Close()
	got, err := io.ReadAll(c2)
	require.NoError(t, err)
	require.Equal(t, n, len(got))
	require.True(t, bytes.Equal(b[:n], got))
}
