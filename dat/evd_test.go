package dat_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Rules of dat_evd_wait, dat_evd_dequeue, dat_evd_post_se, dat_evd_query
// and dat_evd_free ([MAN12] dat_evd_wait: its events and return codes),
// and the overflow behaviour documented on dat.EVD.

// errEVDWaiter matches DAT_INVALID_STATE/DAT_INVALID_STATE_EVD_WAITER.
var errEVDWaiter = &dat.Error{Code: dat.ClassError | dat.InvalidState | dat.Return(dat.StateEVDWaiter)}

// waitResult is what one Wait returned.
type waitResult struct {
	ev    dat.Event
	nmore int
	err   error
}

// goWait runs wait in a goroutine and delivers its result. The waits given
// to it must end when the EVD's IA closes, which the fixtures' cleanups
// guarantee.
func goWait(wait func() (dat.Event, int, error)) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ev, n, err := wait()
		ch <- waitResult{ev, n, err}
	}()
	return ch
}

// awaitWaiter returns once a goroutine is blocked in a wait on evd, as
// dat_evd_query reports it.
func awaitWaiter(t *testing.T, evd *dat.EVD) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := evd.Query()
		return err == nil && p.Waiting
	}, eventWait, 100*time.Microsecond, "no waiter blocked on the EVD")
}

// result receives a wait result, bounded by eventWait.
func result(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(eventWait):
		t.Fatal("the wait did not return")
		return waitResult{}
	}
}

// swEVD is an EVD that takes software events, on a fresh IA.
func swEVD(t *testing.T, qlen int) (*dat.IA, *dat.EVD) {
	t.Helper()
	ia := openIA(t, "lo")
	evd, err := ia.CreateEVD(qlen, dat.EVDSoftware)
	require.NoError(t, err)
	return ia, evd
}

func queued(t *testing.T, evd *dat.EVD) int {
	t.Helper()
	p, err := evd.Query()
	require.NoError(t, err)
	return p.Queued
}

// dat_evd_wait: "DAT_TIMEOUT_EXPIRED: The timeout expired before the
// threshold was met"; no event is dequeued and nmore reports the number of
// events queued.
func TestEVDWaitTimeout(t *testing.T) {
	for _, n := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("%d queued, threshold %d", n, n+1), func(t *testing.T) {
			_, evd := swEVD(t, 4)
			for i := 0; i < n; i++ {
				require.NoError(t, evd.PostSE(i))
			}
			_, nmore, err := evd.Wait(dat.TimeoutOf(5*time.Millisecond), n+1)
			requireCode(t, err, dat.TimeoutExpired, dat.NoSubtype)
			require.True(t, errors.Is(err, dat.ErrTimeoutExpired))
			require.Equal(t, n, nmore, "nmore is the number of queued events")
			require.Equal(t, n, queued(t, evd), "nothing was dequeued")
		})
	}
}

// dat_evd_wait: the call returns when "at least threshold events" are on
// the EVD, dequeuing the first; nmore counts the rest.
func TestEVDWaitThreshold(t *testing.T) {
	_, evd := swEVD(t, 8)
	require.NoError(t, evd.PostSE(0))
	require.NoError(t, evd.PostSE(1))
	t.Run("2 queued, threshold 3: DAT_TIMEOUT_EXPIRED", func(t *testing.T) {
		_, nmore, err := evd.Wait(dat.TimeoutOf(5*time.Millisecond), 3)
		requireCode(t, err, dat.TimeoutExpired, dat.NoSubtype)
		require.Equal(t, 2, nmore)
	})
	t.Run("3 queued, threshold 3: the first event, nmore 2", func(t *testing.T) {
		require.NoError(t, evd.PostSE(2))
		ev, nmore, err := evd.Wait(dat.TimeoutOf(eventWait), 3)
		require.NoError(t, err)
		require.Equal(t, dat.SoftwareEvent, ev.Number)
		require.Equal(t, 0, ev.Software)
		require.Equal(t, 2, nmore)
	})
	t.Run("a blocked waiter wakes when the threshold is reached", func(t *testing.T) {
		// Two are queued (1, 2); the waiter needs 4.
		ch := goWait(func() (dat.Event, int, error) { return evd.Wait(dat.TimeoutInfinite, 4) })
		awaitWaiter(t, evd)
		require.NoError(t, evd.PostSE(3))
		select {
		case r := <-ch:
			t.Fatalf("woken below the threshold: %+v", r)
		default:
		}
		require.NoError(t, evd.PostSE(4))
		r := result(t, ch)
		require.NoError(t, r.err)
		require.Equal(t, 1, r.ev.Software)
		require.Equal(t, 3, r.nmore)
	})
}

// dat_evd_wait: "DAT_INVALID_PARAMETER: The threshold value is invalid"
// (threshold ≤ 0 or greater than the EVD's queue length).
func TestEVDWaitThresholdInvalid(t *testing.T) {
	_, evd := swEVD(t, 4)
	for _, th := range []int{-1, 0, 5, 1 << 20} {
		_, _, err := evd.Wait(dat.TimeoutOf(time.Millisecond), th)
		requireCode(t, err, dat.InvalidParameter, dat.Arg(3))
		_, _, err = evd.WaitContext(context.Background(), th)
		requireCode(t, err, dat.InvalidParameter, dat.Arg(3))
	}
	// The bounds themselves are valid.
	require.NoError(t, evd.PostSE("x"))
	_, _, err := evd.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err)
	_, _, err = evd.Wait(dat.TimeoutOf(time.Millisecond), 4)
	requireCode(t, err, dat.TimeoutExpired, dat.NoSubtype)
}

// dat_evd_wait: "DAT_INVALID_STATE: ... another thread is already waiting
// on the EVD"; dat_evd_free: the EVD cannot be freed while a waiter is
// blocked in it.
func TestEVDSecondWaiter(t *testing.T) {
	_, evd := swEVD(t, 4)
	ch := goWait(func() (dat.Event, int, error) { return evd.Wait(dat.TimeoutInfinite, 1) })
	awaitWaiter(t, evd)
	_, _, err := evd.Wait(dat.TimeoutInfinite, 1)
	requireCode(t, err, dat.InvalidState, dat.StateEVDWaiter)
	_, _, err = evd.WaitContext(context.Background(), 1)
	requireCode(t, err, dat.InvalidState, dat.StateEVDWaiter)
	requireCode(t, evd.Free(), dat.InvalidState, dat.StateEVDWaiter)

	// DAT_TIMEOUT_INFINITE: the first waiter is woken by a post.
	require.NoError(t, evd.PostSE("wake"))
	r := result(t, ch)
	require.NoError(t, r.err)
	require.Equal(t, "wake", r.ev.Software)
	require.Zero(t, r.nmore)
	require.NoError(t, evd.Free(), "no waiter any more")
}

// WaitContext: a cancelled context ends the wait with
// DAT_INTERRUPTED_CALL, a deadline with DAT_TIMEOUT_EXPIRED; both wrap the
// context's error and dequeue nothing.
func TestEVDWaitContext(t *testing.T) {
	t.Run("cancel: DAT_INTERRUPTED_CALL", func(t *testing.T) {
		_, evd := swEVD(t, 4)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := goWait(func() (dat.Event, int, error) { return evd.WaitContext(ctx, 1) })
		awaitWaiter(t, evd)
		cancel()
		r := result(t, ch)
		requireCode(t, r.err, dat.InterruptedCall, dat.NoSubtype)
		require.ErrorIs(t, r.err, context.Canceled)
		require.ErrorIs(t, r.err, dat.ErrInterruptedCall)
		// The EVD is usable again: the waiter slot was released.
		require.NoError(t, evd.PostSE(1))
		ev, _, err := evd.WaitContext(context.Background(), 1)
		require.NoError(t, err)
		require.Equal(t, 1, ev.Software)
	})
	t.Run("deadline: DAT_TIMEOUT_EXPIRED", func(t *testing.T) {
		_, evd := swEVD(t, 4)
		require.NoError(t, evd.PostSE(1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		_, nmore, err := evd.WaitContext(ctx, 2)
		requireCode(t, err, dat.TimeoutExpired, dat.NoSubtype)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 1, nmore)
		require.Equal(t, 1, queued(t, evd))
	})
	t.Run("an event already queued is returned at once", func(t *testing.T) {
		_, evd := swEVD(t, 4)
		require.NoError(t, evd.PostSE(7))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// Threshold met: the event is returned even though ctx is done.
		ev, _, err := evd.WaitContext(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, 7, ev.Software)
	})
}

// dat_evd_dequeue: "DAT_QUEUE_EMPTY: There are no entries on the Event
// Dispatcher queue."
func TestEVDDequeueEmpty(t *testing.T) {
	_, evd := swEVD(t, 2)
	_, err := evd.Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
	require.ErrorIs(t, err, dat.ErrQueueEmpty)
	require.NoError(t, evd.PostSE("a"))
	ev, err := evd.Dequeue()
	require.NoError(t, err)
	require.Equal(t, "a", ev.Software)
	_, err = evd.Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
}

// dat_evd_post_se: the EVD must have been created with
// DAT_EVD_SOFTWARE_FLAG (else DAT_INVALID_PARAMETER); the event is a
// DAT_SOFTWARE_EVENT carrying the consumer's pointer.
func TestEVDPostSE(t *testing.T) {
	ia := openIA(t, "lo")
	noSW, err := ia.CreateEVD(4, dat.EVDDefault)
	require.NoError(t, err)
	requireCode(t, noSW.PostSE("x"), dat.InvalidParameter, dat.NoSubtype)
	require.Zero(t, queued(t, noSW))

	sw, err := ia.CreateEVD(4, dat.EVDSoftware|dat.EVDConnection)
	require.NoError(t, err)
	payload := &struct{ n int }{42}
	require.NoError(t, sw.PostSE(payload))
	ev, nmore, err := sw.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err)
	require.Zero(t, nmore)
	require.Equal(t, dat.SoftwareEvent, ev.Number)
	require.Same(t, sw, ev.EVD)
	require.Same(t, payload, ev.Software, "the software event carries the pointer posted")
}

// Events of one stream come out in the order they were posted (dat_evd_wait:
// "an event ... guarantees that every earlier event of that same stream
// was already returned"), whether taken by Wait or Dequeue, across ring
// wrap-around.
func TestEVDOrdering(t *testing.T) {
	_, evd := swEVD(t, 3)
	next := 0
	for round := 0; round < 4; round++ {
		for i := 0; i < 3; i++ {
			require.NoError(t, evd.PostSE(round*3+i))
		}
		for i := 0; i < 3; i++ {
			var ev dat.Event
			var err error
			if i%2 == 0 {
				ev, _, err = evd.Wait(dat.TimeoutOf(eventWait), 1)
			} else {
				ev, err = evd.Dequeue()
			}
			require.NoError(t, err)
			require.Equal(t, next, ev.Software)
			next++
		}
	}
}

// dat.EVD overflow: "when an event arrives at a full EVD the event is
// discarded, the EVD is marked overflowed (Query reports it), and a
// DAT_ASYNC_ERROR_EVD_OVERFLOW event naming the EVD is posted to the IA's
// async EVD ... every event already queued, and their order, intact".
func TestEVDOverflowPostSE(t *testing.T) {
	ia, evd := swEVD(t, 2)
	require.NoError(t, evd.PostSE(1))
	require.NoError(t, evd.PostSE(2))
	p, err := evd.Query()
	require.NoError(t, err)
	require.False(t, p.Overflowed)

	err = evd.PostSE(3)
	requireCode(t, err, dat.QueueFull, dat.NoSubtype)
	require.ErrorIs(t, err, dat.ErrQueueFull)

	p, err = evd.Query()
	require.NoError(t, err)
	require.True(t, p.Overflowed)
	require.Equal(t, 2, p.Queued)
	require.Equal(t, 2, p.QLen)

	ov := waitFor(t, ia.AsyncEVD(), dat.AsyncErrorEVDOverflow)
	h, ok := ov.Async.Handle.(*dat.EVD)
	require.True(t, ok, "async handle is %T", ov.Async.Handle)
	require.Same(t, evd, h)
	require.Equal(t, dat.EVDOverflowReason, ov.Async.Reason)

	for _, want := range []int{1, 2} {
		ev, err := evd.Dequeue()
		require.NoError(t, err)
		require.Equal(t, want, ev.Software)
	}
	_, err = evd.Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
}

// The same overflow rule for a provider stream: a connection event that
// finds its connect EVD full is discarded and reported on the async EVD.
func TestEVDOverflowConnectionEvent(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	small, err := c.ia.CreateEVD(1, dat.EVDSoftware|dat.EVDConnection|dat.EVDDTO)
	require.NoError(t, err)
	require.NoError(t, small.PostSE("filler"))
	ep, err := c.ia.CreateEP(c.pz, small, small, small, nil)
	require.NoError(t, err)

	psp := s.psp(t)
	require.NoError(t, ep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
	req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, req.CR.CR.Accept(s.ep(t), nil))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)

	ov := waitFor(t, c.ia.AsyncEVD(), dat.AsyncErrorEVDOverflow)
	h, ok := ov.Async.Handle.(*dat.EVD)
	require.True(t, ok, "async handle is %T", ov.Async.Handle)
	require.Same(t, small, h)
	p, err := small.Query()
	require.NoError(t, err)
	require.True(t, p.Overflowed)
	ev, err := small.Dequeue()
	require.NoError(t, err)
	require.Equal(t, "filler", ev.Software, "the queued event survives the overflow")
	_, err = small.Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
	require.Equal(t, dat.EPConnected, state(t, ep), "the lost event does not undo the transition")
}

// dat.EVD: "An overflow of the async EVD itself is only recorded."
func TestEVDOverflowOfAsyncEVD(t *testing.T) {
	ia, err := dat.OpenIA(context.Background(), "lo", &dat.IAOptions{AsyncEVDQLen: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ia.Close(dat.CloseAbrupt)) })
	evd, err := ia.CreateEVD(1, dat.EVDSoftware)
	require.NoError(t, err)
	require.NoError(t, evd.PostSE(1))
	requireCode(t, evd.PostSE(2), dat.QueueFull, dat.NoSubtype) // async EVD now full
	requireCode(t, evd.PostSE(3), dat.QueueFull, dat.NoSubtype) // its report is lost
	p, err := ia.AsyncEVD().Query()
	require.NoError(t, err)
	require.Equal(t, 1, p.Queued)
	require.True(t, p.Overflowed)
	ev, err := ia.AsyncEVD().Dequeue()
	require.NoError(t, err)
	require.Equal(t, dat.AsyncErrorEVDOverflow, ev.Number)
	_, err = ia.AsyncEVD().Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
}

// dat_evd_wait: "DAT_ABORT: The operation was aborted because IA was
// closed or EVD was destroyed."
func TestEVDWaitAbortedByIAClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(evd *dat.EVD) (dat.Event, int, error)
	}{
		{"Wait(DAT_TIMEOUT_INFINITE)", func(evd *dat.EVD) (dat.Event, int, error) { return evd.Wait(dat.TimeoutInfinite, 1) }},
		{"Wait(finite timeout)", func(evd *dat.EVD) (dat.Event, int, error) { return evd.Wait(dat.TimeoutOf(time.Hour), 2) }},
		{"WaitContext", func(evd *dat.EVD) (dat.Event, int, error) { return evd.WaitContext(context.Background(), 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ia := openClosable(t, "lo")
			evd, err := ia.CreateEVD(4, dat.EVDSoftware)
			require.NoError(t, err)
			ch := goWait(func() (dat.Event, int, error) { return tc.wait(evd) })
			awaitWaiter(t, evd)
			require.NoError(t, ia.Close(dat.CloseAbrupt))
			r := result(t, ch)
			requireCode(t, r.err, dat.Abort, dat.NoSubtype)
			require.ErrorIs(t, r.err, dat.ErrAbort)
		})
	}
}

// An EVD's queue starts small and grows as events arrive, so its capacity
// is still exactly its qlen, with order kept across growth (including a
// queue whose head has wrapped), and overflow past it.
func TestEVDQueueGrowsToQLen(t *testing.T) {
	const qlen = 37
	_, evd := swEVD(t, qlen)
	// Wrap the head first: the growth must unwrap it in order.
	for i := 0; i < 3; i++ {
		require.NoError(t, evd.PostSE(-1))
		_, err := evd.Dequeue()
		require.NoError(t, err)
	}
	for i := 0; i < qlen; i++ {
		require.NoError(t, evd.PostSE(i))
	}
	err := evd.PostSE(qlen)
	require.Error(t, err, "the queue holds qlen events, no more")
	p, qerr := evd.Query()
	require.NoError(t, qerr)
	require.Equal(t, qlen, p.QLen)
	for i := 0; i < qlen; i++ {
		ev, err := evd.Dequeue()
		require.NoError(t, err)
		require.Equal(t, i, ev.Software)
	}
}
