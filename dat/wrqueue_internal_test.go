package dat

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// queueUnderTest is one EP work queue feeding an EVD, with no provider:
// what a provider would report is fed to complete by hand.
func queueUnderTest(recv bool, depth int) (*wrQueue, *EVD) {
	ia := &IA{}
	ia.async = newEVD(ia, 4, EVDAsync)
	ia.async.isAsync = true
	evd := newEVD(ia, 64, EVDDTO)
	ep := &EP{ia: ia}
	q := &wrQueue{ep: ep, recv: recv, evd: evd}
	q.resize(depth)
	return q, evd
}

func (q *wrQueue) postForTest(cookie uint64, op driver.Opcode, mode deliveryMode) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.push(wrEntry{cookie: cookie, op: op, mode: mode, signaled: mode != deliverSuppress || op == driver.OpRDMARead})
}

func (q *wrQueue) completeForTest(seq uint64, st driver.Status) {
	q.evd.mu.Lock()
	q.mu.Lock()
	q.complete(&driver.Completion{WRID: seq, Op: driver.OpSend, Status: st, Length: 7})
	q.deliverLocked()
	q.mu.Unlock()
	q.evd.mu.Unlock()
}

// cookies dequeues every event of e and returns the cookies and statuses.
func cookies(t *testing.T, e *EVD) (cs []uint64, sts []DTOStatus) {
	t.Helper()
	for {
		ev, err := e.Dequeue()
		if err != nil {
			return cs, sts
		}
		require.Equal(t, DTOCompletionEvent, ev.Number)
		cs = append(cs, ev.DTO.Cookie)
		sts = append(sts, ev.DTO.Status)
	}
}

// A provider may complete a queue out of order (siw completes a Send
// posted behind an RDMA Read first): events still come in post order.
func TestWRQueueRestoresPostOrder(t *testing.T) {
	q, evd := queueUnderTest(false, 8)
	read := q.postForTest(10, driver.OpRDMARead, deliverNotify)
	send := q.postForTest(11, driver.OpSend, deliverNotify)
	write := q.postForTest(12, driver.OpRDMAWrite, deliverNotify)
	q.completeForTest(send, driver.StatusSuccess)
	q.completeForTest(write, driver.StatusSuccess)
	cs, _ := cookies(t, evd)
	require.Empty(t, cs, "nothing may overtake the Read")
	q.completeForTest(read, driver.StatusSuccess)
	cs, _ = cookies(t, evd)
	require.Equal(t, []uint64{10, 11, 12}, cs)
	require.Zero(t, q.outstanding())
}

// A completion implies the success of the unsignalled requests before it,
// which produce no event (SUPPRESS); a duplicate or stale completion is
// ignored.
func TestWRQueueImpliedAndStale(t *testing.T) {
	q, evd := queueUnderTest(false, 8)
	a := q.postForTest(1, driver.OpRDMAWrite, deliverSuppress)
	q.postForTest(2, driver.OpRDMAWrite, deliverSuppress)
	c := q.postForTest(3, driver.OpSend, deliverNotify)
	q.completeForTest(c, driver.StatusSuccess)
	cs, sts := cookies(t, evd)
	require.Equal(t, []uint64{3}, cs)
	require.Equal(t, []DTOStatus{DTOSuccess}, sts)
	q.completeForTest(a, driver.StatusSuccess)     // stale: already implied
	q.completeForTest(c, driver.StatusSuccess)     // duplicate
	q.completeForTest(c+100, driver.StatusSuccess) // never posted
	cs, _ = cookies(t, evd)
	require.Empty(t, cs)
	require.Zero(t, q.outstanding())
}

// A Read is never implied: a later completion does not release it.
func TestWRQueueReadNotImplied(t *testing.T) {
	q, evd := queueUnderTest(false, 8)
	r := q.postForTest(1, driver.OpRDMARead, deliverSuppress)
	s := q.postForTest(2, driver.OpSend, deliverNotify)
	q.completeForTest(s, driver.StatusSuccess)
	cs, _ := cookies(t, evd)
	require.Empty(t, cs)
	q.completeForTest(r, driver.StatusSuccess)
	cs, _ = cookies(t, evd)
	require.Equal(t, []uint64{2}, cs, "the suppressed Read makes no event")
}

// Flushing completes what is outstanding, in post order, keeps what the
// provider did complete, and makes later posts complete flushed behind it.
func TestWRQueueFlush(t *testing.T) {
	q, evd := queueUnderTest(true, 8)
	a := q.postForTest(1, driver.OpRecv, deliverNotify)
	b := q.postForTest(2, driver.OpRecv, deliverNotify)
	q.postForTest(3, driver.OpRecv, deliverNotify)
	q.completeForTest(b, driver.StatusSuccess) // held behind a
	evd.mu.Lock()
	q.mu.Lock()
	q.flush()
	q.deliverLocked()
	q.mu.Unlock()
	evd.mu.Unlock()
	cs, sts := cookies(t, evd)
	require.Equal(t, []uint64{1, 2, 3}, cs)
	require.Equal(t, []DTOStatus{DTOErrFlushed, DTOSuccess, DTOErrFlushed}, sts)
	q.completeForTest(a, driver.StatusSuccess) // after the flush: ignored
	cs, _ = cookies(t, evd)
	require.Empty(t, cs)
	require.True(t, q.dead)
}

// A queue of SUPPRESSed requests asks for a completion every half queue,
// so that it cannot fill up with requests that nothing ever releases.
func TestWRQueueSignalsSuppressedRuns(t *testing.T) {
	q, _ := queueUnderTest(false, 8)
	signalled := 0
	for range 16 {
		q.mu.Lock()
		if q.signalDue() {
			signalled++
		}
		q.mu.Unlock()
	}
	require.Equal(t, 4, signalled)
}

// A queue allocates its entries as posts need them: it grows to its
// capacity, and no further, with completions out of order across the
// growth still delivered in post order.
func TestWRQueueGrowsToCapacity(t *testing.T) {
	const depth = 50
	q, evd := queueUnderTest(false, depth)
	require.Less(t, len(q.ents), depth, "an idle queue holds few entries")
	var seqs []uint64
	for i := range depth {
		require.False(t, q.full())
		seqs = append(seqs, q.postForTest(uint64(100+i), driver.OpSend, deliverNotify))
	}
	require.True(t, q.full(), "the capacity is the EP's max DTOs")
	require.Equal(t, depth, len(q.ents))
	// Complete newest first: nothing is delivered until the oldest is.
	for i := depth - 1; i >= 1; i-- {
		q.completeForTest(seqs[i], driver.StatusSuccess)
	}
	cs, _ := cookies(t, evd)
	require.Empty(t, cs)
	q.completeForTest(seqs[0], driver.StatusSuccess)
	cs, _ = cookies(t, evd)
	require.Len(t, cs, depth)
	for i, c := range cs {
		require.Equal(t, uint64(100+i), c)
	}
}
