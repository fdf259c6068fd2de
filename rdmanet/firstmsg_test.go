package rdmanet

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// TestFirstMessageRidesFirstWrite: a dialed Conn's first control message
// is the one its first Write sends, with the data inline.
func TestFirstMessageRidesFirstWrite(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		setHook(&testFirstHold, time.Hour) // no timer may send it first
		defer testFirstHold.Store(nil)
		var mu sync.Mutex
		var sent []wire.Control
		var c1 *Conn
		setHook(&testControl, func(from *Conn, m *wire.Control) {
			mu.Lock()
			defer mu.Unlock()
			if from == c1 {
				sent = append(sent, *m)
			}
		})
		defer testControl.Store(nil)
		a, c2, stop := pipe(t, ia, 0)
		defer stop()
		mu.Lock()
		c1 = a
		mu.Unlock()
		_, err := c1.Write([]byte("x"))
		require.NoError(t, err)
		got := make([]byte, 1)
		_, err = io.ReadFull(c2, got)
		require.NoError(t, err)
		require.Equal(t, "x", string(got))
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, sent)
		require.Equal(t, uint32(0), sent[0].Seq)
		require.Equal(t, "x", string(sent[0].Inline), "the first message carries the first Write")
	})
}

// TestFirstMessageServerFirst: a client that reads first releases its
// held first message, so a server that speaks first is heard.
func TestFirstMessageServerFirst(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		setHook(&testFirstHold, time.Hour) // only the Read may send it
		defer testFirstHold.Store(nil)
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		_, err := c2.Write([]byte("hello"))
		require.NoError(t, err)
		got := make([]byte, 5)
		_, err = io.ReadFull(c1, got)
		require.NoError(t, err)
		require.Equal(t, "hello", string(got))
	})
}

// TestFirstMessageTimer: a client that does not call in at all gets its
// first message sent by the timer, so a server that writes and closes
// meanwhile drains gracefully: the client then reads its data and EOF,
// not a reset (the server's Close would otherwise give up on the drain
// and disconnect abruptly).
func TestFirstMessageTimer(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		_, err := c2.Write([]byte("hello"))
		require.NoError(t, err)
		require.NoError(t, c2.Close())
		got, err := io.ReadAll(c1)
		require.NoError(t, err)
		require.Equal(t, "hello", string(got))
	})
}
