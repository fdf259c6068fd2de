package rdmanet

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// applyQueued applies the events queued on c's EVD without waiting, as a
// Read or Write would on its way in: for tests that look at a Conn's state
// while no Read or Write drives it.
func (c *Conn) applyQueued() {
	if !c.pollMu.TryLock() {
		return
	}
	if c.drainEvents() > 0 {
		c.flushControl()
	}
	c.pollMu.Unlock()
}

// TestPollSeesEventsAppliedMeanwhile plays the race that stalled streams
// on rxe0: a Write finds the peer's ring full and, before its turn to
// poll, another goroutine applies the peer's message that frees the ring.
// The Write's poll then finds no event queued; it must look at the Conn
// again rather than sleep until an event that will never come (the peer,
// having read everything, waits for more data).
func TestPollSeesEventsAppliedMeanwhile(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		w, r, stop := pipe(t, ia, 0)
		defer stop()
		w.mu.Lock()
		size := w.dst.r.Size
		w.mu.Unlock()

		var fired atomic.Bool
		hookErr := make(chan error, 1)
		setHook(&testBeforePoll, func(c *Conn) {
			if c != w {
				return
			}
			c.mu.Lock()
			full := c.dst.free(c.sProd, c.sPeerCons) == 0 && c.sProd == c.sProdSent
			c.mu.Unlock()
			if !full || !fired.CompareAndSwap(false, true) {
				return
			}
			// The reader takes the whole ring, which sends its space
			// back; then another poller (this goroutine, outside poll)
			// applies that message before the Write polls.
			_, err := io.ReadFull(r, make([]byte, size))
			for end := time.Now().Add(10 * time.Second); err == nil; {
				w.pollQueued()
				w.mu.Lock()
				free := w.dst.free(w.sProd, w.sPeerCons)
				w.mu.Unlock()
				if free > 0 {
					break
				}
				if time.Now().After(end) {
					err = errors.New("the reader's message never reached the writer")
				}
				time.Sleep(time.Millisecond)
			}
			hookErr <- err
		})
		defer testBeforePoll.Store(nil)

		// One ring and a half: the Write blocks once, on a full ring,
		// and the rest fits once the reader has taken the first ring.
		w.SetWriteDeadline(time.Now().Add(10 * time.Second))
		n, err := w.Write(make([]byte, size+size/2))
		require.True(t, fired.Load(), "the Write never found the ring full")
		require.NoError(t, <-hookErr)
		require.NoError(t, err, "a Write whose space came back while it was not polling")
		require.Equal(t, int(size+size/2), n)
		_, err = io.ReadFull(r, make([]byte, size/2))
		require.NoError(t, err)
	})
}
