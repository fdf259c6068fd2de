package dat

import (
	"context"
	"sync"
	"time"
)

// EVD is an Event Dispatcher (DAT_EVD_HANDLE): a bounded queue of events
// fed by the streams its flags allow.
//
// Overflow: when an event arrives at a full EVD the event is discarded, the
// EVD is marked overflowed (Query reports it), and a
// DAT_ASYNC_ERROR_EVD_OVERFLOW event naming the EVD is posted to the IA's
// async EVD. Discarding the newest event keeps every event already queued,
// and their order, intact; the consumer learns of the loss from the async
// event. An overflow of the async EVD itself is only recorded.
type EVD struct {
	ia    *IA
	flags EVDFlags

	// Queue state, guarded by mu.
	mu         sync.Mutex
	ring       []Event
	head, n    int
	waiting    bool          // a Wait is in progress
	wake       chan struct{} // capacity 1: a token wakes the waiter
	threshold  int
	overflowed bool
	dead       bool // freed, or its IA closed

	// Stream attachments, guarded by ia.mu.
	freed   bool
	isAsync bool
	refs    int // EPs and service points referencing the EVD
	streams evdStreams
}

func newEVD(ia *IA, qlen int, flags EVDFlags) *EVD {
	return &EVD{ia: ia, flags: flags, ring: make([]Event, qlen), wake: make(chan struct{}, 1)}
}

// CreateEVD creates an event dispatcher holding at most qlen events
// (dat_evd_create). Flags say which streams may feed it. Asynchronous
// events go only to the IA's own async EVD (AsyncEVD), so EVDAsync in
// flags (as in EVDDefault) is accepted and has no further effect.
func (ia *IA) CreateEVD(qlen int, flags EVDFlags) (*EVD, error) {
	const op = "dat_evd_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	if qlen <= 0 {
		return nil, newError(op, InvalidParameter, Arg(2), "queue length %d must be positive", qlen)
	}
	if flags == 0 || flags&^(EVDDefault|EVDSoftware) != 0 {
		return nil, newError(op, InvalidParameter, Arg(4), "EVD flags %#x", flags)
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		return nil, err
	}
	e := newEVD(ia, qlen, flags)
	ia.evds[e] = struct{}{}
	return e, nil
}

// check returns an INVALID_HANDLE error with subtype sub unless e is a live
// EVD of ia whose flags include need. Callers hold ia.mu.
func (e *EVD) check(op string, ia *IA, need EVDFlags, sub Subtype) error {
	if e == nil || e.freed || e.ia != ia {
		return newError(op, InvalidHandle, sub, "EVD is nil, freed or of another IA")
	}
	if e.flags&need != need {
		return newError(op, InvalidHandle, sub, "EVD flags %#x lack %#x", e.flags, need)
	}
	return nil
}

// EVDParam is what dat_evd_query reports.
type EVDParam struct {
	IA    *IA
	QLen  int
	Flags EVDFlags
	// Queued is the number of events waiting to be dequeued.
	Queued int
	// Overflowed reports that an event was discarded because the EVD was
	// full.
	Overflowed bool
	// Waiting reports that a caller is blocked in Wait.
	Waiting bool
}

// Query reports the EVD's parameters (dat_evd_query).
func (e *EVD) Query() (EVDParam, error) {
	const op = "dat_evd_query"
	if e == nil {
		return EVDParam{}, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return EVDParam{}, newError(op, InvalidHandle, NoSubtype, "EVD is freed")
	}
	return EVDParam{IA: e.ia, QLen: len(e.ring), Flags: e.flags, Queued: e.n, Overflowed: e.overflowed, Waiting: e.waiting}, nil
}

// post enqueues ev and wakes a waiter whose threshold is met. It reports
// false if the event was discarded (dead or full EVD).
func (e *EVD) post(ev Event) bool { return e.postNotify(ev, true) }

// postNotify is post, except that with notify false the event is queued
// without waking a waiter (UNSIGNALLED and unsolicited completions); a
// later notifying event wakes the waiter for all of them.
func (e *EVD) postNotify(ev Event, notify bool) bool {
	ev.EVD = e
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return false
	}
	if e.n == len(e.ring) {
		e.overflowed = true
		e.mu.Unlock()
		if !e.isAsync {
			e.ia.async.post(Event{Number: AsyncErrorEVDOverflow, Async: AsyncData{Handle: e, Reason: EVDOverflowReason}})
		}
		return false
	}
	e.ring[(e.head+e.n)%len(e.ring)] = ev
	e.n++
	if notify && e.waiting && e.n >= e.threshold {
		e.signalLocked()
	}
	e.mu.Unlock()
	return true
}

// popLocked removes the oldest event. Callers hold e.mu and know n > 0.
func (e *EVD) popLocked() Event {
	ev := e.ring[e.head]
	e.ring[e.head] = Event{}
	e.head = (e.head + 1) % len(e.ring)
	e.n--
	return ev
}

// Dequeue removes the oldest event without waiting (dat_evd_dequeue). An
// empty EVD gives DAT_QUEUE_EMPTY.
func (e *EVD) Dequeue() (Event, error) {
	const op = "dat_evd_dequeue"
	if e == nil {
		return Event{}, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return Event{}, newError(op, InvalidHandle, NoSubtype, "EVD is freed")
	}
	if e.n == 0 {
		return Event{}, newError(op, QueueEmpty, NoSubtype, "")
	}
	return e.popLocked(), nil
}

// Wait blocks until at least threshold events are queued, then dequeues the
// oldest (dat_evd_wait). nmore is the number of events still queued. If
// timeout expires first it returns DAT_TIMEOUT_EXPIRED with nothing
// dequeued and nmore the number queued.
//
// Threshold must be between 1 and the queue length (DAT_INVALID_PARAMETER),
// and must be 1 on an EVD fed by UNSIGNALLED or SOLICITED_WAIT DTO streams
// (DAT_INVALID_STATE). Only one caller may wait at a time
// (DAT_INVALID_STATE/EVD_WAITER). Freeing the EVD's IA ends the wait with
// DAT_ABORT.
func (e *EVD) Wait(timeout Timeout, threshold int) (ev Event, nmore int, err error) {
	var timer <-chan time.Time
	if d, finite := timeout.Duration(); finite {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	return e.wait(nil, timer, threshold)
}

// WaitContext is Wait with a context instead of a timeout: it gives up
// with ctx's error (wrapped in DAT_TIMEOUT_EXPIRED for a deadline and
// DAT_INTERRUPTED_CALL for a cancellation) when ctx is done.
func (e *EVD) WaitContext(ctx context.Context, threshold int) (ev Event, nmore int, err error) {
	return e.wait(ctx, nil, threshold)
}

func (e *EVD) wait(ctx context.Context, timer <-chan time.Time, threshold int) (Event, int, error) {
	const op = "dat_evd_wait"
	if e == nil {
		return Event{}, 0, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	if threshold <= 0 || threshold > len(e.ring) {
		return Event{}, 0, newError(op, InvalidParameter, Arg(3), "threshold %d not in 1..%d", threshold, len(e.ring))
	}
	if threshold > 1 {
		e.ia.mu.Lock()
		restricted := e.streams.thresholdOneOnly()
		e.ia.mu.Unlock()
		if restricted {
			return Event{}, 0, newError(op, InvalidState, StateEVDConfigThresh,
				"threshold %d on an EVD fed by UNSIGNALLED or SOLICITED_WAIT streams", threshold)
		}
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return Event{}, 0, newError(op, InvalidHandle, NoSubtype, "EVD is freed")
	}
	if e.waiting {
		e.mu.Unlock()
		return Event{}, 0, newError(op, InvalidState, StateEVDWaiter, "another caller is waiting on the EVD")
	}
	e.waiting, e.threshold = true, threshold
	for {
		// The token channel is reused across waits, so a token may be
		// stale (left by a wake-up that raced a timeout); the condition is
		// always re-checked under the lock before anything is returned.
		if e.dead {
			e.waiting = false
			e.mu.Unlock()
			return Event{}, 0, newError(op, Abort, NoSubtype, "EVD freed while waiting")
		}
		if e.n >= threshold {
			ev := e.popLocked()
			n := e.n
			e.waiting = false
			e.mu.Unlock()
			return ev, n, nil
		}
		e.mu.Unlock()
		select {
		case <-e.wake:
			e.mu.Lock()
		case <-timer:
			return e.giveUp(newError(op, TimeoutExpired, NoSubtype, ""))
		case <-done:
			err := &Error{Code: ClassError | InterruptedCall, Op: op, Err: ctx.Err()}
			if ctx.Err() == context.DeadlineExceeded {
				err.Code = ClassError | TimeoutExpired
			}
			return e.giveUp(err)
		}
	}
}

// signalLocked wakes the waiter without blocking: one pending token is
// enough, since the waiter re-checks the queue. Callers hold e.mu.
func (e *EVD) signalLocked() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// giveUp withdraws the waiter after a timeout or cancellation. If an event
// met the threshold in the meantime the wait still fails (the caller asked
// to stop), but the event stays queued.
func (e *EVD) giveUp(err *Error) (Event, int, error) {
	e.mu.Lock()
	e.waiting = false
	n := e.n
	e.mu.Unlock()
	return Event{}, n, err
}

// PostSE posts a software event carrying data (dat_evd_post_se). The EVD
// must have been created with EVDSoftware (DAT_INVALID_PARAMETER
// otherwise).
//
// An EVD created with EVDSoftware counts as fed by a software event stream
// from its creation, not from its first PostSE. So dat_ep_create,
// dat_ep_create_with_srq and dat_ep_modify refuse to attach EP completion
// streams to it with flags other than DAT_COMPLETION_EVD_THRESHOLD_FLAG
// (DAT_INVALID_PARAMETER), as they do for any EVD fed by non-DTO streams.
// PostSE therefore never finds UNSIGNALLED or SOLICITED_WAIT streams on the
// EVD and needs no check of its own: the combination cannot arise.
func (e *EVD) PostSE(data any) error {
	const op = "dat_evd_post_se"
	if e == nil {
		return newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	e.ia.mu.Lock()
	err := e.check(op, e.ia, 0, NoSubtype)
	e.ia.mu.Unlock()
	if err != nil {
		return err
	}
	if e.flags&EVDSoftware == 0 {
		return newError(op, InvalidParameter, Arg(2), "EVD was not created with the software flag")
	}
	if !e.post(Event{Number: SoftwareEvent, Software: data}) {
		return newError(op, QueueFull, NoSubtype, "EVD is full")
	}
	return nil
}

// Free frees the EVD (dat_evd_free). It fails with
// DAT_INVALID_STATE/EVD_IN_USE while an EP or service point references it,
// and with DAT_INVALID_STATE/EVD_WAITER while a caller waits on it.
func (e *EVD) Free() error {
	const op = "dat_evd_free"
	if e == nil {
		return newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	ia := e.ia
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := e.check(op, ia, 0, NoSubtype); err != nil {
		return err
	}
	if e.isAsync {
		return newError(op, InvalidState, StateEVDInUse, "the async EVD lives as long as its IA")
	}
	if e.refs > 0 {
		return newError(op, InvalidState, StateEVDInUse, "%d objects still use the EVD", e.refs)
	}
	e.mu.Lock()
	if e.waiting {
		e.mu.Unlock()
		return newError(op, InvalidState, StateEVDWaiter, "a caller is waiting on the EVD")
	}
	e.dead = true
	e.mu.Unlock()
	e.freed = true
	delete(ia.evds, e)
	return nil
}

// kill marks the EVD dead and wakes its waiter, which returns DAT_ABORT.
// Used when the IA closes. Callers hold ia.mu.
func (e *EVD) kill() {
	e.freed = true
	e.mu.Lock()
	e.dead = true
	if e.waiting {
		e.signalLocked()
	}
	e.mu.Unlock()
}
