package drivertest

import (
	"net"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// waitAsync runs cq.Wait(deadline) on a goroutine; the channel gets its
// result.
func waitAsync(cq driver.CQ, deadline time.Time) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- cq.Wait(deadline) }()
	return ch
}

// awaitWait expects a Wait started by waitAsync to return within d. If it
// does not, the CQ is closed to free the goroutine and the subtest fails.
func (r *cqReader) awaitWait(ch <-chan error, d time.Duration, what string) error {
	r.e.t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		_ = r.closeNow()
		select {
		case <-ch:
		case <-time.After(d):
		}
		r.e.t.Fatalf("%s: Wait did not return within %v: %s", r.name, d, what)
		return nil
	}
}

// testPollNonBlocking: Poll of an empty CQ, and Poll into an empty slice,
// return 0 at once.
func testPollNonBlocking(e *env) {
	r := e.newCQ(e.active, "CQ")
	for _, n := range []int{8, 0} {
		dst := make([]driver.Completion, n)
		ch := make(chan int, 1)
		go func() { ch <- r.cq.Poll(dst) }()
		select {
		case got := <-ch:
			require.Zero(e.t, got, "Poll of an empty CQ into %d slots", n)
		case <-time.After(e.quiet):
			e.t.Fatalf("Poll into %d slots of an empty CQ blocked", n)
		}
	}
}

// endedWithCompletions returns a connection whose active side has k
// successful signalled Write completions queued and unpolled: it ended
// with a local Disconnect, after which quiescence means every completion
// is in the CQ.
func (e *env) endedWithCompletions(k int) (*conn, []uint64) {
	e.t.Helper()
	c := e.pair()
	tgt := e.register(c.p.pd, 64*k, accessAll)
	src := e.register(c.a.pd, 64*k, driver.AccessLocalWrite)
	var ids []uint64
	for i := range k {
		src.fill(64*i, 64, byte(i))
		ids = append(ids, c.a.postSend(driver.OpRDMAWrite, driver.SendSignaled, tgt.remote(64*i, 64), src.sge(64*i, 64)))
	}
	// The peer's receive of a later Send means the Writes were carried
	// out; graceful lets the send side finish in any case.
	e.notifyNoPoll(c.a, c.p)
	c.a.disconnect(true)
	return c, ids
}

// notifyNoPoll is notify without taking the sender's completion.
func (e *env) notifyNoPoll(from, to *endpoint) {
	e.t.Helper()
	rid := to.postRecv(to.ctl.sge(3000, 16))
	from.ctl.fill(3500, 1, 78)
	from.postSend(driver.OpSend, 0, driver.RemoteSegment{}, from.ctl.sge(3500, 1))
	to.rcq.awaitOK(rid, 1)
}

// testPollParts: Poll never moves more than len(dst) and loses nothing:
// completions polled a few at a time all arrive once.
func testPollParts(e *env) {
	c, ids := e.endedWithCompletions(7)
	cq := c.a.scq.cq
	require.Zero(e.t, cq.Poll(nil), "Poll into no slots")
	got := map[uint64]bool{}
	var dst [2]driver.Completion
	for range 20 {
		n := cq.Poll(dst[:])
		require.LessOrEqual(e.t, n, len(dst), "Poll moved more than len(dst)")
		for _, comp := range dst[:n] {
			require.NoError(e.t, c.a.scq.check(comp))
			got[comp.WRID] = true
		}
	}
	for _, id := range ids {
		require.True(e.t, got[id], "Write %d: completion lost or not in the CQ after Disconnect returned", id)
	}
}

// testWaitQueued: Wait returns at once while the CQ holds a completion,
// as often as it is called without a Poll.
func testWaitQueued(e *env) {
	c, ids := e.endedWithCompletions(1)
	r := c.a.scq
	for i := range 2 {
		start := time.Now()
		err := r.awaitWait(waitAsync(r.cq, time.Now().Add(e.timeout)), e.timeout, "a completion is queued")
		require.NoError(e.t, err)
		require.Less(e.t, time.Since(start), e.quiet, "Wait %d with a completion queued took %v", i+1, time.Since(start))
	}
	r.await(ids...)
}

// testWaitDeadline: Wait on an empty CQ returns nil by its deadline, at
// once if the deadline has passed.
func testWaitDeadline(e *env) {
	r := e.newCQ(e.active, "CQ")
	start := time.Now()
	err := r.awaitWait(waitAsync(r.cq, start.Add(-time.Second)), e.quiet, "the deadline has passed")
	require.NoError(e.t, err, "Wait with a past deadline")
	deadline := time.Now().Add(e.quiet)
	err = r.awaitWait(waitAsync(r.cq, deadline), e.timeout, "deadline")
	require.NoError(e.t, err, "Wait until a deadline")
	late := time.Since(deadline)
	require.Less(e.t, late, e.quiet, "Wait returned %v after its deadline", late)
}

// testInterruptWakes: Interrupt wakes a Wait blocked without deadline.
func testInterruptWakes(e *env) {
	r := e.newCQ(e.active, "CQ")
	ch := waitAsync(r.cq, time.Time{})
	e.sleepQuiet() // let Wait block
	require.NoError(e.t, e.bounded("Interrupt", func() error { r.cq.Interrupt(); return nil }))
	require.NoError(e.t, r.awaitWait(ch, e.timeout, "Interrupt was called"))
}

// testPendingInterrupt: an Interrupt with no Wait in progress makes the
// next Wait return.
func testPendingInterrupt(e *env) {
	r := e.newCQ(e.active, "CQ")
	require.NoError(e.t, e.bounded("Interrupt", func() error { r.cq.Interrupt(); return nil }))
	require.NoError(e.t, r.awaitWait(waitAsync(r.cq, time.Time{}), e.timeout, "an Interrupt was pending"))
}

// testCQCloseUnblocks: Close ends a Wait in progress, and later Waits,
// with net.ErrClosed.
func testCQCloseUnblocks(e *env) {
	r := e.newCQ(e.active, "CQ")
	ch := waitAsync(r.cq, time.Time{})
	e.sleepQuiet()
	require.NoError(e.t, e.bounded("CQ Close", r.closeNow))
	select {
	case err := <-ch:
		require.ErrorIs(e.t, err, net.ErrClosed, "Wait ended by Close")
	case <-time.After(e.timeout):
		e.t.Fatal("Close did not unblock Wait")
	}
	err := e.bounded("Wait after Close", func() error { return r.cq.Wait(time.Time{}) })
	require.ErrorIs(e.t, err, net.ErrClosed, "Wait after Close")
}
