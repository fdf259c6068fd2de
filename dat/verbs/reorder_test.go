//go:build verbs && linux && cgo

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// These tests drive the completion pairing with work completions built
// here, in the order kernel siw produces them, so they need no device and
// run on any host that builds the package.

// postedSQ returns a QP whose send queue holds a Read, a Send and a
// Write, posted in that order as requests 1, 2 and 3 (cookies 11-13).
func postedSQ(t *testing.T) (*QP, *recorder) {
	t.Helper()
	rec := newRecorder()
	q := &QP{ia: &IA{}, events: newEventQueue(rec), state: qpConnected}
	for i, op := range []driver.Opcode{driver.OpRDMARead, driver.OpSend, driver.OpRDMAWrite} {
		seq := uint64(i + 1)
		q.sq.push(wrEntry{seq: seq, cookie: 10 + seq, op: op, signaled: true, length: 100 * uint32(seq), state: wrPosted})
	}
	return q, rec
}

// complete hands the QP a successful work completion of send-queue
// request seq, as pollLocked does.
func complete(q *QP, seq uint64) {
	wc := q.wcs[0] // a zeroed shim_wc: status IBV_WC_SUCCESS
	set(&wc.wr_id, wrID(wrKindSend, seq))
	q.mu.Lock()
	q.completeLocked(&wc)
	q.replayEarlyLocked()
	q.mu.Unlock()
}

// set stores v in a C integer field, whose type a test file cannot name.
func set[T ~uint64](p *T, v uint64) { *p = T(v) }

// requireCompletions checks the handler calls, in order.
func requireCompletions(t *testing.T, rec *recorder, want ...driver.Completion) {
	t.Helper()
	for _, w := range want {
		require.Equal(t, w, rec.next(t))
	}
	rec.none(t)
}

// siw completes a Send and a Write when they are transmitted, ahead of a
// Read posted before them, which completes when its Response arrives.
// The consumer must still get the completions in post order, each with
// its own cookie, and the queue must end idle.
func TestCompletionsSiwOrder(t *testing.T) {
	q, rec := postedSQ(t)
	complete(q, 2)
	complete(q, 3)
	rec.none(t) // held behind the Read
	require.Equal(t, 3, q.sq.posted, "held requests are not completed yet")
	complete(q, 1)
	q.events.wait()
	requireCompletions(t, rec,
		driver.Completion{Cookie: 11, Op: driver.OpRDMARead, Length: 100, Signaled: true},
		driver.Completion{Cookie: 12, Op: driver.OpSend, Length: 200, Signaled: true},
		driver.Completion{Cookie: 13, Op: driver.OpRDMAWrite, Length: 300, Signaled: true})
	require.Zero(t, q.sq.posted)
	require.Zero(t, q.sq.len())
	require.Empty(t, q.early)
}

// Completions in post order are paired at once, as before.
func TestCompletionsInOrder(t *testing.T) {
	q, rec := postedSQ(t)
	for seq := uint64(1); seq <= 3; seq++ {
		complete(q, seq)
	}
	q.events.wait()
	requireCompletions(t, rec,
		driver.Completion{Cookie: 11, Op: driver.OpRDMARead, Length: 100, Signaled: true},
		driver.Completion{Cookie: 12, Op: driver.OpSend, Length: 200, Signaled: true},
		driver.Completion{Cookie: 13, Op: driver.OpRDMAWrite, Length: 300, Signaled: true})
	require.Empty(t, q.early)
}

// A teardown while the Read is still outstanding flushes it, and the Send
// the device had already completed keeps its success; the Write, never
// completed, is flushed after it.
func TestCompletionsFlushKeepsEarly(t *testing.T) {
	q, rec := postedSQ(t)
	complete(q, 2)
	q.mu.Lock()
	q.flushAllLocked()
	q.mu.Unlock()
	q.events.wait()
	requireCompletions(t, rec,
		driver.Completion{Cookie: 11, Op: driver.OpRDMARead, Status: driver.StatusFlushed, Signaled: true},
		driver.Completion{Cookie: 12, Op: driver.OpSend, Length: 200, Signaled: true},
		driver.Completion{Cookie: 13, Op: driver.OpRDMAWrite, Status: driver.StatusFlushed, Signaled: true})
	require.Empty(t, q.early)
}

// A completion for no posted request is dropped, never paired with
// another request's cookie.
func TestCompletionsUnknownDropped(t *testing.T) {
	q, rec := postedSQ(t)
	complete(q, 7)
	q.events.wait()
	rec.none(t)
	require.Empty(t, q.early)
	require.Equal(t, 3, q.sq.posted)
}
