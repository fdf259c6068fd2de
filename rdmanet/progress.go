package rdmanet

import (
	"context"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat"
)

// A Conn has no goroutine of its own. Whoever waits on it drives it: a
// blocked Read or Write, Close, and during the handshake the dialer or the
// listener. The first of them to need progress becomes the poller (it
// holds pollMu): it takes the Conn's events off its EVD, whose Wait polls
// the provider's completion queue itself (spin, then sleep), applies them
// (control messages, send completions, connection events), answers with
// at most one control message, and wakes the others, who look at the
// Conn's state again and one of whom polls next if it still has to wait.
// So a completion reaches the goroutine that waits for it with no hand-off
// when that goroutine is the poller, and one wake-up when it is not.
//
// An idle Conn costs no goroutine. Its events wait in the EVD until the
// application comes back: data and control messages the peer sends in the
// meantime land in the ring and the control slots, and the peer's credit,
// which we return only when we process them, bounds how much.
//
// A poller blocked in EVD.Wait sleeps until an event. What changes the
// Conn without an event (Close, CloseRead, CloseWrite, a deadline set or
// passing, a dial's context) kicks it: kicks counts those changes, and a
// kick while the poller sleeps posts a software event to the EVD, which
// wakes it. A waiter reads kicks before it checks the state it waits for
// and the poller sleeps only if kicks has not moved since: the poller
// stores blocked before it reads kicks and a kicker adds to kicks before
// it reads blocked, so one of them always sees the other.
//
// Events that another goroutine applied count as a change too, and the
// goroutine that applies them adds to kicks before it lets go of pollMu.
// Otherwise a waiter that checked the state just before they were
// applied, and took pollMu just after, would find the EVD empty and
// sleep, though the state it waits for is already there: with no further
// event coming (the peer waits for it), for good. Two goroutines poll in
// turn whenever a Conn has two waiters, a Read and a Write, or a Write
// and the goroutine that drives a pending control message (control.go).
type progress struct {
	kicks      atomic.Uint64
	blocked    atomic.Bool
	kickPosted atomic.Bool // a kick's software event is in the EVD
}

// kick makes a sleeping poller look at the Conn again.
func (c *Conn) kick() {
	c.pr.kicks.Add(1)
	if c.pr.blocked.Load() && c.pr.kickPosted.CompareAndSwap(false, true) {
		if c.evd.PostSE(nil) != nil {
			c.pr.kickPosted.Store(false)
		}
	}
}

// poll makes progress on c if no other goroutine is doing so: it applies
// the events queued, or sleeps until one arrives unless c was kicked
// since the caller read kicks, then wakes every waiter. It reports false
// when another goroutine polls; the caller then waits on its wake
// channel, which that goroutine signals.
func (c *Conn) poll(kicks uint64) bool {
	if h := testBeforePoll.Load(); h != nil {
		(*h)(c)
	}
	if !c.pollMu.TryLock() {
		return false
	}
	n := c.drainEvents()
	if n == 0 {
		c.setQuiet()
		c.pr.blocked.Store(true)
		if c.pr.kicks.Load() == kicks {
			ev, _, err := c.evd.Wait(dat.TimeoutInfinite, 1)
			c.pr.blocked.Store(false)
			if err != nil {
				c.pollMu.Unlock()
				c.fail(err) // the EVD or the IA went away under us
				return true
			}
			c.handle(&ev)
			n = 1 + c.drainEvents()
		} else {
			c.pr.blocked.Store(false)
		}
	}
	if n > 0 {
		// Regions the events retired, an offered ring to write into
		// (see resize.go); then answer the whole batch with at most one
		// control message.
		c.afterEvents()
		c.flushControl()
		c.pr.kicks.Add(1) // for the waiters that looked before (above)
	}
	c.pollMu.Unlock()
	// Every waiter looks again, so that if the one it waits for is not
	// this goroutine's, another goroutine takes over the polling.
	c.wakeAll()
	return true
}

// Streams do not spin. A waiter that spins before it sleeps (the
// adaptive policy) pays where the event it waits for comes within the
// spin: the peer's answer in a request/response exchange. A writer
// blocked on flow control (the peer's ring full, staging full, the send
// queue full) or on the completion of a zero-copy Write waits for a
// stream to drain; on iwarp each turn of its spin is a read of the socket
// that finds nothing (one system call), and the processor it holds is
// one the provider's sender, and on one host the peer, need. So such
// waits count themselves in Conn.quiet, and the poller sleeps at once
// while one is in progress, where the Conn's policy is adaptive; a busy
// policy, asked for, stays. Measured between two processes on loopback
// on two cores (scripts/bench-loopback.sh, 1 MiB Writes, 6 interleaved
// runs): the writing process made 9,000 reads instead of 200,000 per
// 2.2 GB and used 0.4-0.5 instead of 0.7-0.8 CPU-seconds, and rdmanet
// moved 2286 MiB/s where the version before it moved 1761 and the one
// before that 1852 (p=0.002), for 0.52 CPU-seconds per GB against 0.61
// and 0.67 (p=0.002); 4 KiB Writes +16% (p=0.026), 64 KiB ones within
// the noise.

// setQuiet sets the EVD's policy for the wait about to start: sleep at
// once while a stream's waiter waits, else the Conn's policy. Callers
// hold pollMu.
func (c *Conn) setQuiet() {
	q := c.quiet.Load() > 0 && c.cfg.poll.Mode == dat.PollAdaptive
	if q == c.quietSet {
		return
	}
	c.quietSet = q
	if q {
		c.evd.SetPollPolicy(dat.PollPolicy{Mode: dat.PollEvent})
	} else {
		c.evd.SetPollPolicy(c.cfg.poll)
	}
}

// testBeforePoll, nil outside tests, runs as poll begins: between a
// waiter's look at the Conn and its turn to poll, where another goroutine
// may apply events (see progress).
var testBeforePoll atomic.Pointer[func(*Conn)]

// pollQueued applies the events already queued on c's EVD, without
// waiting for more, unless another goroutine polls c.
func (c *Conn) pollQueued() {
	if !c.pollMu.TryLock() {
		return
	}
	if c.drainEvents() > 0 {
		c.afterEvents()
		c.flushControl()
		c.pr.kicks.Add(1)
	}
	c.pollMu.Unlock()
	c.wakeAll()
}

// drainEvents applies every event queued on the EVD and returns how many
// there were. Callers hold pollMu.
func (c *Conn) drainEvents() int {
	n := 0
	for {
		ev, err := c.evd.Dequeue()
		if err != nil {
			return n
		}
		c.handle(&ev)
		n++
	}
}

// awaitSetup drives the Conn until its handshake ends and returns the
// outcome, or stopErr() once ctx is done.
func (c *Conn) awaitSetup(ctx context.Context, stopErr func() error) error {
	// A poller asleep in the EVD must notice ctx. (AfterFunc starts a
	// goroutine only if ctx ends first: a handshake that completes costs
	// none.)
	defer context.AfterFunc(ctx, c.kick)()
	stop := ctx.Done()
	for {
		k := c.pr.kicks.Load()
		select {
		case err := <-c.setup:
			return err
		case <-stop:
			return stopErr()
		default:
		}
		if c.poll(k) {
			continue
		}
		select {
		case err := <-c.setup:
			return err
		case <-stop:
			return stopErr()
		case <-c.cwake:
		}
	}
}
