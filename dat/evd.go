package dat

import (
	"context"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// EVD is an Event Dispatcher (DAT_EVD_HANDLE): a bounded queue of events
// fed by the streams its flags allow.
//
// An EVD that carries DTO completions owns a provider completion queue,
// and its completions are pulled: the goroutine that calls Wait (or
// Dequeue, or Query) polls the CQ itself, moves what it finds into the
// event queue through the EPs' work queues (which restore post order), and
// only when nothing is there spins for a while and then sleeps in the CQ's
// Wait. No goroutine stands between a completion and its waiter. Events
// that do not come through the CQ (connection events, software events,
// flushes made by dat) are queued directly and wake the waiter through
// CQ.Interrupt, or through the EVD's own channel when it has no CQ.
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
	cq    driver.CQ // nil unless the EVD carries DTO completions
	// prog is cq's CQProgresser, if it is one: a spinning waiter lets
	// it do the provider's work between polls.
	prog driver.CQProgresser

	// Queue state, guarded by mu. Lock order: ia.mu, then mu, then a work
	// queue's mu (wrQueue), then the async EVD's mu.
	mu      sync.Mutex
	ring    []Event // grows up to qlen (growLocked)
	qlen    int
	head, n int
	waiting bool          // a Wait is in progress
	wake    chan struct{} // capacity 1: wakes a waiter of an EVD without a CQ
	// notified counts the events queued that wake a waiter; a Wait that
	// found too few events returns only after it moves.
	notified   uint64
	overflowed bool
	dead       bool                // freed, or its IA closed
	wcs        []driver.Completion // poll scratch

	// policy overrides the IA's PollPolicy for this EVD's waiters (nil:
	// the IA's); guarded by mu.
	policy *PollPolicy

	// spinSkip and spinBackoff make PollAdaptive's spin adaptive: a spin
	// that ran out without its event makes the next spinBackoff waits (1,
	// 2, 4, ... up to maxSpinBackoff) sleep at once; a wait that ends
	// within activeSpans spins of its start, caught by the spin or not,
	// resets it. Only the waiter touches them, and successive waiters are
	// ordered by mu (the waiting flag).
	spinSkip, spinBackoff uint32
	// spun is set by the EVD's first spin. Until then its waits follow
	// the IA's back-off for fresh EVDs (IA.freshSpin), not its own, and
	// the outcome of that first spin is what the IA learns from.
	spun bool
	// quick counts the waits in a row, before the first spin, that ended
	// within activeSpans spin times of their start (see warmUp).
	quick uint8

	// oneOnly mirrors streams.thresholdOneOnly for Wait, which must not
	// take ia.mu.
	oneOnly atomic.Bool

	// Stream attachments, guarded by ia.mu.
	freed   bool
	isAsync bool
	refs    int // EPs and service points referencing the EVD
	streams evdStreams
}

// napEvery is how many yields a spinning waiter makes between short
// sleeps (see EVD.wait).
const napEvery = 64

// pollsPerCheck is how many times a spinning waiter polls a device's
// completion queue in a row before it reads the clock (for its deadline
// and the end of its spin) and yields the processor. Reading the clock
// and yielding on every poll cost more than the poll itself: measured on
// rxe0 in the TCG guest (64-byte DAT Send/Recv ping-pong, busy-poll,
// 10,000 round trips a run), the median half round trip went from 26-34
// µs to 25-29 µs with this batching, and the polls per wait from 50-70 to
// 14-27. A batch takes a few microseconds on a real machine, so neither
// the deadline nor the spin's end moves by more than that. Where the
// provider makes progress in the waiter's goroutine (a CQProgresser,
// iwarp), each poll is a system call that costs far more than the clock,
// and the waiter keeps checking after every poll.
const pollsPerCheck = 16

// maxSpinBackoff bounds how many waits in a row sleep at once after spins
// that did not pay; then a spin is tried again.
const maxSpinBackoff = 64

// activeSpans is how many spin times a wait may last and still count as
// part of a busy exchange, whose next waits spin. The back-off alone has
// a trap in request/response traffic: once both ends sleep, each answers
// a wake-up later, so neither end's spin catches the other's answer,
// both keep backing off, and the pair stays slow for good. Measured on
// rxe0 in the TCG guest (64-byte ping-pong, 200 µs spin): runs settled
// either near 55 µs per half round trip, both ends spinning, or near
// 430 µs, both sleeping, with nothing in between; with this rule, eight
// runs interleaved with eight without it: median 58 µs against 343 µs
// (rdmanet, p=0.000), DAT Send/Receive unchanged. A wait that ends this
// soon after it began says the peer is answering, only not fast enough
// for a spin that the sleeping itself makes miss; spinning again costs
// at most a spin per such wait, and lets both ends meet in the fast
// state. An idle connection's waits are far longer and still back off.
// It applies only where the provider advises a spin (driver.IAAttr.Spin):
// its completions come from a device, which a spin cannot delay, or its
// CQ does the provider's work in the spin itself (driver.CQProgresser:
// iwarp, which then also advises a spin). Where completions come from
// goroutines of this process that a spin keeps from running, a spin that
// ran out may itself have held the completion back until just after it,
// and only the back-off breaks that; such a provider advises no spin.
const activeSpans = 4

// A fresh EVD (a new connection's) has no history of its own, and its
// first waits are where a spin is least likely to pay: the peer is still
// setting the connection up (accepting it, starting the goroutines that
// serve it), work that the spin takes a processor from. Measured in
// process on two shared cores (rdmanet's BenchmarkDial, a dial and one
// byte echoed): each new connection's waits spun 100 µs and ran out,
// and the peer's answer came just after each spin ended; with the spin
// off, a dial took 0.6× the time. So whether such waits spin is learnt
// across the IA: the first spin of each EVD counts for the IA's
// back-off (freshSpin), which the waits of EVDs that have not spun yet
// follow, as an EVD's own waits follow its own back-off. Where those
// spins pay (a peer already running, as in a ping-pong), fresh EVDs spin
// at once; where they run out, the next fresh waits sleep at once (1, 2,
// 4, ... up to maxSpinBackoff of them, across the IA), and then one
// spins again to find out. An EVD's own back-off, and the activeSpans
// rule, take over once it has spun.
//
// Nor does a fresh EVD spin before its waits show a busy exchange:
// warmUp waits in a row that each ended within activeSpans spin times of
// their start. A connection that carries one request and its answer
// (a dial and its first message each way) never spins then, and spins
// that could not pay cost it nothing; one that goes on exchanging spins
// from its third wait. Traced in BenchmarkDial with the IA's back-off
// alone, the server's wait for the first byte still caught it within
// the spin more often than not, so fresh spins kept being found to pay,
// and the dialer's wait for the echo then spun and ran out in two cases
// of three.
const warmUp = 2

// An EVD without a CQ (connection requests, connection events, software
// events) never spins under PollAdaptive: its events come from goroutines
// of this process (a provider's listener, a consumer's PostSE), which a
// spin does not see sooner and may keep from a processor, whatever the
// provider advises for completions. Traced in rdmanet's BenchmarkDial (2
// shared cores): a listener waiting for the next connection request spun
// every other wait (each ended within activeSpans of its start, dials
// coming every 350 µs) and ran out, yielding all the while, which woke
// another processor at each yield.

// pollBatch is how many completions one CQ poll takes.
const pollBatch = 16

// evdInitialRing is how many events an EVD's queue holds before it first
// grows. Most EVDs hold a few events at a time (completions are polled
// from the provider's CQ, not queued), so the queue starts small and
// doubles, up to the EVD's qlen, only when it fills: an idle connection's
// EVD then costs a few hundred bytes instead of qlen events.
const evdInitialRing = 4

func newEVD(ia *IA, qlen int, flags EVDFlags) *EVD {
	return &EVD{ia: ia, flags: flags, qlen: qlen, ring: getRing(min(qlen, evdInitialRing)), wake: make(chan struct{}, 1)}
}

// growLocked doubles the queue, up to qlen, keeping the events in order.
// Callers hold e.mu and found the queue full.
func (e *EVD) growLocked() bool {
	if len(e.ring) >= e.qlen {
		return false
	}
	r := getRing(min(2*len(e.ring), e.qlen))
	for i := 0; i < e.n; i++ {
		r[i] = e.ring[(e.head+i)%len(e.ring)]
	}
	putRing(e.ring)
	e.ring, e.head = r, 0
	return true
}

// Event queues are recycled. A connection's EVD typically grows when its
// connection ends, since every receive still posted is flushed into it at
// once (rdmanet keeps 32 posted), and is freed soon after: without reuse
// each connection allocated ~30 KB of event slots (an Event is ~250
// bytes) just to report that its receives were flushed, which made dat's
// event queues most of what a connection's setup and teardown allocate
// and the garbage collector's main work under connection churn. Queues of
// a power-of-two length up to maxPooledRing go back to a pool when they
// grow or their EVD is freed; others are left to the collector.
const maxPooledRing = 1 << 10

var ringPools [11]sync.Pool // by log2 of the length, up to maxPooledRing

// ringPool returns the pool for queues of length n, or nil.
func ringPool(n int) *sync.Pool {
	if n <= 0 || n > maxPooledRing || n&(n-1) != 0 {
		return nil
	}
	return &ringPools[bits.TrailingZeros(uint(n))]
}

// getRing returns an empty event queue of length n.
func getRing(n int) []Event {
	if p := ringPool(n); p != nil {
		if r, ok := p.Get().(*[]Event); ok {
			return *r
		}
	}
	return make([]Event, n)
}

// putRing recycles r, which nothing may use afterwards. Its events are
// cleared first, so that a pooled queue keeps no EP or private data
// reachable.
func putRing(r []Event) {
	if p := ringPool(len(r)); p != nil {
		clear(r)
		p.Put(&r)
	}
}

// releaseRingLocked recycles the queue of an EVD that just died: nothing
// reads or writes the queue of a dead EVD. Callers hold e.mu.
func (e *EVD) releaseRingLocked() {
	putRing(e.ring)
	e.ring, e.head, e.n = nil, 0, 0
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
	if err := ia.live(op); err != nil {
		return nil, err
	}
	e := newEVD(ia, qlen, flags)
	if flags&EVDDTO != 0 {
		cq, err := ia.prov.CreateCQ(driver.CQConfig{Size: qlen})
		if err != nil {
			return nil, providerError(op, err)
		}
		e.cq = cq
		e.prog, _ = cq.(driver.CQProgresser)
		e.wcs = make([]driver.Completion, pollBatch)
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		if e.cq != nil {
			e.cq.Close()
		}
		return nil, err
	}
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

// Query reports the EVD's parameters (dat_evd_query). It polls the CQ
// first, so Queued counts the completions the provider has finished.
func (e *EVD) Query() (EVDParam, error) {
	const op = "dat_evd_query"
	if e == nil {
		return EVDParam{}, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return EVDParam{}, newError(op, InvalidHandle, NoSubtype, "EVD is freed")
	}
	lost := e.pollLocked()
	p := EVDParam{IA: e.ia, QLen: e.qlen, Flags: e.flags, Queued: e.n, Overflowed: e.overflowed, Waiting: e.waiting}
	e.mu.Unlock()
	e.reportLost(lost)
	return p, nil
}

// post queues ev and wakes a waiter. It reports false if the event was
// discarded (dead or full EVD).
func (e *EVD) post(ev Event) bool {
	e.mu.Lock()
	ok := e.enqueueLocked(ev, true)
	e.mu.Unlock()
	if !ok {
		e.reportLost(1)
	}
	return ok
}

// enqueueLocked adds ev to the queue. With notify false (UNSIGNALLED and
// unsolicited completions) it is queued without waking a waiter; a later
// notifying event wakes the waiter for all of them. It reports false if
// the event was discarded; the caller then reports the loss (reportLost)
// once it holds no EVD lock. Callers hold e.mu.
func (e *EVD) enqueueLocked(ev Event, notify bool) bool {
	if e.dead {
		return false
	}
	if e.n == len(e.ring) && !e.growLocked() {
		e.overflowed = true
		return false
	}
	ev.EVD = e
	e.ring[(e.head+e.n)%len(e.ring)] = ev
	e.n++
	if notify {
		e.notified++
		if e.waiting {
			e.wakeLocked()
		}
	}
	return true
}

// wakeLocked makes a blocked waiter look at the queue again. Callers hold
// e.mu.
func (e *EVD) wakeLocked() {
	if e.cq != nil {
		e.cq.Interrupt()
		return
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// reportLost posts DAT_ASYNC_ERROR_EVD_OVERFLOW for events discarded
// because the EVD was full. Callers hold no EVD lock.
func (e *EVD) reportLost(lost int) {
	if lost == 0 || e.isAsync {
		return
	}
	a := e.ia.async
	a.mu.Lock()
	ok := a.enqueueLocked(Event{Number: AsyncErrorEVDOverflow, Async: AsyncData{Handle: e, Reason: EVDOverflowReason}}, true)
	a.mu.Unlock()
	_ = ok // an overflow of the async EVD is only recorded
}

// pollLocked moves every completion the CQ holds into the queue, through
// the work queues of the EPs they belong to, and returns the number of
// events lost to overflow. Callers hold e.mu.
func (e *EVD) pollLocked() (lost int) {
	if e.cq == nil || e.dead {
		return 0
	}
	for {
		n := e.cq.Poll(e.wcs)
		if n == 0 {
			return lost
		}
		lost += e.absorbLocked(e.wcs[:n])
		if n < len(e.wcs) {
			return lost
		}
	}
}

// absorbLocked applies polled completions. Callers hold e.mu.
func (e *EVD) absorbLocked(cs []driver.Completion) (lost int) {
	var ep *EP
	var tag uint32
	for i := range cs {
		c := &cs[i]
		if ep == nil || c.QPTag != tag {
			tag = c.QPTag
			ep = e.ia.epByTag(tag)
		}
		if c.WRID&srqWRIDBit != 0 {
			lost += e.srqCompletionLocked(ep, c)
			continue
		}
		if ep == nil {
			continue // a QP already destroyed: its EP is gone
		}
		q := &ep.sendQ
		if c.WRID&recvWRIDBit != 0 {
			q = &ep.recvQ
		}
		q.mu.Lock()
		if q.evd == e {
			q.complete(c)
			lost += q.deliverLocked()
		}
		q.mu.Unlock()
	}
	return lost
}

// popLocked removes the oldest event. Callers hold e.mu and know n > 0.
func (e *EVD) popLocked() Event {
	ev := e.ring[e.head]
	e.ring[e.head] = Event{}
	e.head = (e.head + 1) % len(e.ring)
	e.n--
	if ev.Number == DTOCompletionEvent && ev.DTO.Op == DTOReceive {
		ev.DTO.EP.srqEventTaken()
	}
	return ev
}

// errQueueEmpty is Dequeue's answer on an empty EVD, shared so that a
// consumer draining its EVD in a loop allocates nothing.
var errQueueEmpty = newError("dat_evd_dequeue", QueueEmpty, NoSubtype, "")

// Dequeue removes the oldest event without waiting (dat_evd_dequeue). An
// empty EVD gives DAT_QUEUE_EMPTY. It polls the CQ when the queue is
// empty.
func (e *EVD) Dequeue() (Event, error) {
	const op = "dat_evd_dequeue"
	if e == nil {
		return Event{}, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return Event{}, newError(op, InvalidHandle, NoSubtype, "EVD is freed")
	}
	lost := 0
	if e.n == 0 {
		lost = e.pollLocked()
	}
	if e.n == 0 {
		e.mu.Unlock()
		e.reportLost(lost)
		return Event{}, errQueueEmpty
	}
	ev := e.popLocked()
	e.mu.Unlock()
	e.reportLost(lost)
	return ev, nil
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
//
// How it waits is the IA's PollPolicy: by default it polls the CQ for a
// short spin, then sleeps until the provider signals a completion.
func (e *EVD) Wait(timeout Timeout, threshold int) (ev Event, nmore int, err error) {
	var deadline time.Time
	if d, finite := timeout.Duration(); finite {
		deadline = time.Now().Add(d)
	}
	return e.wait(nil, deadline, threshold)
}

// WaitContext is Wait with a context instead of a timeout: it gives up
// with ctx's error (wrapped in DAT_TIMEOUT_EXPIRED for a deadline and
// DAT_INTERRUPTED_CALL for a cancellation) when ctx is done.
func (e *EVD) WaitContext(ctx context.Context, threshold int) (ev Event, nmore int, err error) {
	deadline, _ := ctx.Deadline()
	return e.wait(ctx, deadline, threshold)
}

func (e *EVD) wait(ctx context.Context, deadline time.Time, threshold int) (Event, int, error) {
	const op = "dat_evd_wait"
	if e == nil {
		return Event{}, 0, newError(op, InvalidHandle, NoSubtype, "EVD is nil")
	}
	if threshold <= 0 || threshold > e.qlen {
		return Event{}, 0, newError(op, InvalidParameter, Arg(3), "threshold %d not in 1..%d", threshold, e.qlen)
	}
	if threshold > 1 && e.oneOnly.Load() {
		return Event{}, 0, newError(op, InvalidState, StateEVDConfigThresh,
			"threshold %d on an EVD fed by UNSIGNALLED or SOLICITED_WAIT streams", threshold)
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
	e.waiting = true
	// Events already queued satisfy the wait at once; after that only a
	// notifying event does (an UNSIGNALLED completion does not wake).
	seen := e.notified
	first := true
	policy := e.ia.poll
	if e.policy != nil {
		policy = *e.policy
	}
	var spinUntil, begun time.Time
	var spin time.Duration // PollAdaptive's, once this wait has looked
	spinning := false      // in the spin phase of this wait
	probe := false         // this wait's spin is the EVD's first (see freshSpin)
	spins := 0
	var now time.Time // read every perCheck polls while spinning
	perCheck := 1
	if e.cq != nil && e.prog == nil {
		perCheck = pollsPerCheck // a device's queue (see pollsPerCheck)
	}
	var timer *time.Timer
	var stopCtx func() bool
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if stopCtx != nil {
			stopCtx()
		}
	}()
	for {
		if e.dead {
			e.waiting = false
			e.mu.Unlock()
			return Event{}, 0, newError(op, Abort, NoSubtype, "EVD freed while waiting")
		}
		lost := e.pollLocked()
		if e.n >= threshold && (first || e.notified != seen) {
			if spinning || e.spun && e.ia.attr.Spin > 0 && spin > 0 && time.Since(begun) <= activeSpans*spin {
				// The spin paid, or would in a busy exchange (see
				// activeSpans).
				e.spinBackoff, e.spinSkip = 0, 0
			}
			if spinning && probe {
				e.ia.freshSpin.paid()
			}
			if !e.spun && spin > 0 {
				if time.Since(begun) <= activeSpans*spin {
					e.quick = min(e.quick+1, warmUp)
				} else {
					e.quick = 0
				}
			}
			ev := e.popLocked()
			n := e.n
			e.waiting = false
			e.mu.Unlock()
			e.reportLost(lost)
			return ev, n, nil
		}
		e.mu.Unlock()
		e.reportLost(lost)
		if first {
			first = false
			if d := policy.spin(e.ia.attr.Spin); policy.Mode == PollAdaptive && d > 0 && e.cq != nil {
				spin, begun = d, time.Now()
				switch {
				case !e.spun:
					if e.quick >= warmUp && !e.ia.freshSpin.skip() {
						spinUntil, spinning = begun.Add(spin), true
						probe, e.spun = true, true
					}
				case e.spinSkip > 0:
					e.spinSkip--
				default:
					spinUntil, spinning = begun.Add(spin), true
				}
			}
		}
		if done != nil {
			select {
			case <-done:
				return e.giveUp(ctxError(op, ctx))
			default:
			}
		}
		if !(policy.Mode == PollBusy || spinning) || spins%perCheck == 0 {
			now = time.Now()
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			err := newError(op, TimeoutExpired, NoSubtype, "")
			if ctx != nil {
				err.Err = context.DeadlineExceeded // the context's deadline
			}
			return e.giveUp(err)
		}
		if spinning && !now.Before(spinUntil) {
			// The spin ran out: the event comes from somewhere a spin
			// does not see sooner (or keeps from running). Sleep at
			// once for the next few waits.
			spinning = false
			e.spinBackoff = nextBackoff(e.spinBackoff)
			e.spinSkip = e.spinBackoff
			if probe {
				e.ia.freshSpin.missed()
			}
		}
		switch {
		case policy.Mode == PollBusy || spinning:
			if e.prog != nil {
				found, stop := e.prog.Progress()
				if stop && spinning {
					// The work is the provider's goroutines' now: spinning
					// would keep them from the processor. Sleep, without
					// counting the spin as one that missed.
					spinning = false
					break
				}
				if found {
					// The provider found work for the CQ: poll again
					// before giving the processor away.
					break
				}
			}
			spins++
			if spins%perCheck != 0 {
				break // poll again at once (see pollsPerCheck)
			}
			if spins%(napEvery*perCheck) == 0 && (policy.Mode == PollBusy || e.ia.attr.Spin == 0) {
				// A goroutine that only yields keeps its processor: the
				// scheduler polls the network only when it runs out of
				// work, and steals from other processors' queues only
				// then too. A provider whose completions come from
				// goroutines woken by the network poller (iwarp) would
				// starve: measured, two busy-polling processes on 2 cores
				// stalled for seconds. A short sleep now and then lets
				// the scheduler do both. (Short only in name: a sleep
				// under a millisecond can last up to one, the network
				// poller's resolution; measured in process on 2 cores,
				// 0.4 ms on average. So an adaptive spin does not nap
				// where the provider advises one (a device's completions,
				// or a CQProgresser doing its own work between polls):
				// its waiter does not depend on the poller, and the spin
				// is bounded anyway. On a NIC, 64 polls take a few
				// microseconds, and a nap would turn a round trip just
				// longer than that into a millisecond.)
				time.Sleep(time.Microsecond)
			} else {
				runtime.Gosched()
			}
		case e.cq != nil:
			if done != nil && stopCtx == nil {
				stopCtx = context.AfterFunc(ctx, e.cq.Interrupt)
			}
			if err := e.cq.Wait(deadline); err != nil {
				// The CQ is closed: the EVD is being freed; the next
				// round sees it dead.
				runtime.Gosched()
			}
		default:
			var tc <-chan time.Time
			if !deadline.IsZero() {
				if timer == nil {
					timer = time.NewTimer(time.Until(deadline))
				}
				tc = timer.C
			}
			select {
			case <-e.wake:
			case <-tc:
			case <-done:
			}
		}
		e.mu.Lock()
	}
}

// ctxError is the error of a wait ended by its context.
func ctxError(op string, ctx context.Context) *Error {
	err := &Error{Code: ClassError | InterruptedCall, Op: op, Err: ctx.Err()}
	if ctx.Err() == context.DeadlineExceeded {
		err.Code = ClassError | TimeoutExpired
	}
	return err
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

// SetPollPolicy makes the EVD's waiters wait as p says instead of as the
// IA's IAOptions.Poll does. It is not part of DAT: it lets a consumer that
// shares one IA between workloads (rdmanet's Dialer and ListenConfig) pick
// per connection. It takes effect from the next Wait.
func (e *EVD) SetPollPolicy(p PollPolicy) {
	e.mu.Lock()
	e.policy = &p
	e.mu.Unlock()
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
	e.mu.Lock()
	ok := e.enqueueLocked(Event{Number: SoftwareEvent, Software: data}, true)
	e.mu.Unlock()
	if !ok {
		e.reportLost(1)
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
	if err := e.check(op, ia, 0, NoSubtype); err != nil {
		ia.mu.Unlock()
		return err
	}
	if e.isAsync {
		ia.mu.Unlock()
		return newError(op, InvalidState, StateEVDInUse, "the async EVD lives as long as its IA")
	}
	if e.refs > 0 {
		ia.mu.Unlock()
		return newError(op, InvalidState, StateEVDInUse, "%d objects still use the EVD", e.refs)
	}
	e.mu.Lock()
	if e.waiting {
		e.mu.Unlock()
		ia.mu.Unlock()
		return newError(op, InvalidState, StateEVDWaiter, "a caller is waiting on the EVD")
	}
	e.dead = true
	e.releaseRingLocked()
	e.mu.Unlock()
	e.freed = true
	delete(ia.evds, e)
	ia.mu.Unlock()
	if e.cq != nil {
		e.cq.Close()
	}
	return nil
}

// kill marks the EVD dead and wakes its waiter, which returns DAT_ABORT.
// Used when the IA closes. Callers hold ia.mu; the caller closes the CQ
// afterwards.
func (e *EVD) kill() {
	e.freed = true
	e.mu.Lock()
	e.dead = true
	if e.waiting {
		e.wakeLocked()
	}
	e.mu.Unlock()
}

// nextBackoff is the back-off after a spin that ran out, when it was b:
// it doubles, from 1 up to maxSpinBackoff.
func nextBackoff(b uint32) uint32 { return min(max(2*b, 1), maxSpinBackoff) }

// sharedBackoff is PollAdaptive's back-off for the waits of an IA's EVDs
// that have not spun yet (see freshSpin in EVD.wait): the same doubling
// an EVD's own back-off does, shared by the IA's EVDs, so it is atomic.
// Concurrent updates may lose one another; it is a heuristic, and any
// value it holds is a valid one.
type sharedBackoff struct {
	skips   atomic.Uint32 // waits left that sleep at once
	backoff atomic.Uint32 // the current back-off (0: spins pay)
}

// skip reports whether a fresh EVD's wait sleeps at once, and counts it.
func (b *sharedBackoff) skip() bool {
	for {
		n := b.skips.Load()
		if n == 0 {
			return false
		}
		if b.skips.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// missed records a fresh EVD's spin that ran out.
func (b *sharedBackoff) missed() {
	n := nextBackoff(b.backoff.Load())
	b.backoff.Store(n)
	b.skips.Store(n)
}

// paid records a fresh EVD's spin that caught its event.
func (b *sharedBackoff) paid() {
	if b.backoff.Load() != 0 {
		b.backoff.Store(0)
		b.skips.Store(0)
	}
}
