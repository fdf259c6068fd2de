package iwarp

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The receive role: who reads a connection's socket.
//
// A connection's receive goroutine (readLoop) reads the socket, places
// payload and queues completions. A goroutine waiting for one of those
// completions (CQ.Wait, under package dat's EVD.Wait) would then be woken
// by the receive goroutine: one hand-off between goroutines, and a
// scheduler wake-up, per completion, on top of the network poller's wake-up
// of the receive goroutine. That hand-off doubled a small-message round
// trip. So a goroutine that waits on a CQ fed by one connection takes the
// receive role itself: it reads the socket (waiting in the network poller
// like a TCP reader), runs the receiver on the FPDUs as they arrive (see
// below), and finds its completion on the CQ without being woken by anyone.
// The receive goroutine reads only while nobody waits, so data placement,
// Read Responses, flow control and the peer's Terminate or close carry on
// without a waiter.
//
// The receiver's state (the read-ahead, the message in progress, the
// place in an FPDU's payload) lives in the connection, so the role
// can change hands between FPDUs, also with part of the next FPDU read
// ahead, and in the middle of an FPDU's payload. A waiter never waits
// for the peer mid-frame. It runs an FPDU that fits the 4 KiB read-ahead
// once it is all there. A larger Write, Send or Read Response segment
// (up to 64 KiB on loopback) it places as it comes, once its header is
// read ahead, reading what the socket has straight into registered
// memory (payloadRest): when it has to wait for more, or leaves, the
// segment's place is kept for the next holder of the role. Any other
// large FPDU can only be a protocol error (a Send with Invalidate, a
// Terminate with an oversized attachment), which its header shows: the
// waiter runs it once the header is read ahead, and fails it without
// reading further. A protocol error and the end of the stream go back to
// the receive goroutine, which alone tears the connection down.
//
// Placing segments as they come took, per 64 KiB FPDU, the two SIOCINQ
// looks and the 4 KiB read of its start out of the reading side of
// rdmanet's streams, whose reader waits for each chunk: between two
// processes on loopback (scripts/bench-loopback.sh, medians of 10
// interleaved runs) rdmanet moved 3405 against 3040 MiB/s with 1 MiB
// Writes (p=0.023) for 10% less CPU per GB (p=0.045), and 1321 against
// 1009 MiB/s with 4 KiB ones (p<0.001); 64 KiB Writes 3018 against 2812
// MiB/s (within the noise). Raw DAT streams, read by the receive
// goroutine, and small messages did not move.
//
// Running large FPDUs in the waiter is what makes a stream of them
// cheap when their reader waits for each chunk, as rdmanet's does
// (ring data, then the control message that announces it): the receive
// goroutine placing the data and waking the reader for each chunk cost
// the reader's wake-up on the other processor, which on two shared
// cores was the larger part of a stream's CPU time. Measured between two
// processes on loopback (scripts/bench-loopback.sh, 64 KiB Writes,
// medians of 6 interleaved runs): 2390 MiB/s through rdmanet against
// 1995 MiB/s before (p=0.065), and 0.69 against 0.84 CPU-seconds per GB
// (p=0.004); with 1 MiB Writes, 3282 against 2691 MiB/s (5 runs,
// p=0.15). With both processes limited to one processor, so that no
// hand-off crossed processors, rdmanet had moved 1.57× as much before.
// (Measured again after EVDs began to spin only once spins pay, the
// difference was within the noise until rdmanet's writers stopped
// spinning while flow control blocks them, which took a processor's
// worth of empty socket reads from the writing process; together they
// gave +13% at 1 MiB and +17% at 64 KiB, see rdmanet's documentation.)
//
// The role's states (rxCtl.role): rxLoop, the receive goroutine has it
// (busy, or waiting for the socket); rxParked, nobody has it and the
// receive goroutine sleeps until it is handed back; rxWaiter, a waiter has
// it; rxEnded, the receiver stopped. A waiter takes a parked role. One
// that finds the receive goroutine with it asks for it (rxCtl.want) and
// sleeps on the CQ's channel as before; the receive goroutine hands the
// role over at its next FPDU boundary, at once if it is waiting there for
// the socket (rxCtl.idle: the request cuts that read short with a past
// read deadline), by parking it and interrupting the CQ, so that the
// waiter's next Wait takes it. A waiter that is done parks the role: a
// request/response exchange whose waiter comes back soon never involves
// the receive goroutine. A role that stays parked for rxLinger goes back
// to the receive goroutine (rxSweep), and at once when the connection is
// closed or disconnected locally.
//
// A waiter that spins before it sleeps takes a parked role for a moment
// between its polls (progressRx): one read without waiting, the FPDUs
// that arrived whole, and the role is parked again.
//
// A stream of large FPDUs that nobody waits for (RDMA Writes whose
// completion comes at the end) is read more cheaply by the receive
// goroutine, which reads each FPDU as it comes with fewer system calls
// than a waiter checking that it has arrived: a waiter that placed
// rxWaiterBulk of them in a row hands the role back, and while the
// stream stays bulk (rxCtl.bulk, rxCtl.long) waiters do not ask for it.
//
// A connection whose receives complete on a CQ of their own starts with
// the role parked and no receive goroutine (rxStartParked); the goroutine
// is started the first time the role goes to it.
//
// A waiter reading the socket must still see completions that others
// queue (a Send finished by the sender goroutine, a connection event
// posted by package dat through Interrupt, a closed CQ): whoever queues
// one pokes it (pokeRx), which sets a flag its read checks before it
// waits and cuts a wait in progress short with a past read deadline.
// Those deadlines are set only under rxCtl.mu while their target reads,
// and the target clears its state under the same lock before it hands the
// role on, so no stale deadline reaches the next reader.
type rxCtl struct {
	mu   sync.Mutex
	role rxRole
	idle bool // the receive goroutine waits for the socket at an FPDU boundary
	// want: a waiter asked for the role. Written under mu; the receive
	// goroutine also looks at it without the lock after each FPDU.
	want atomic.Bool
	// bulk: one of the last rxBulkAfter FPDUs did not fit the
	// read-ahead, so a waiter would likely hand the next ones straight
	// back; waiters leave the role to the receive goroutine while it is
	// set (a stream of large messages, each followed by a small control
	// message, as rdmanet sends them).
	bulk bool
	// long: a waiter ran more than rxWaiterBulk large FPDUs in a row
	// without a completion to show for them, and handed the role back;
	// while the stream stays bulk, waiters leave it to the receive
	// goroutine (see runWhole).
	long     bool
	sockWait bool // the waiter holding the role waits for the socket
	// stale: a poke set a past read deadline; the next reader resets it.
	stale bool
	rdl   time.Time // the read deadline the waiters last set
	// poke is set by pokeRx; a waiter clears it (under the CQ's lock)
	// before it looks at the CQ, and its read stops when it is set.
	poke atomic.Bool
	// back wakes the parked receive goroutine (capacity 1).
	back chan struct{}
	// parks counts the times a waiter parked the role; seen is its value
	// at the sweeper's last look (rxSweep).
	parks, seen uint32
	swept       atomic.Bool // on the IA's sweep list
	// end is set with fatal when a waiter met the end of the stream or a
	// protocol error: the receive goroutine returns fatal as its verdict.
	end   bool
	fatal error
	// started: the receive goroutine was started (rxStartParked).
	started bool
}

// rxStartParked: a connection whose receives complete on a CQ of their
// own (the usual case: one rdmanet Conn, one EVD) starts with its role
// parked for the first waiter, with no receive goroutine, which is started
// the first time the role goes to it (toLoopLocked): the sweeper's, a
// waiter handing the role back (the end of the stream, a large FPDU), a
// local close or disconnect (wakeRx), or a Send the startup rule holds
// back (PostSend), for which the initiator's first FPDU must be read. A
// connection that comes up and is waited on at once, as a dialed or
// accepted connection is, thus costs no goroutine start and no hand-off
// of the role to its first waiter, each of which woke the scheduler's
// other processor on the way to the connection's first byte. Until then
// the connection is as one whose waiter has just parked its role: what
// arrives with nobody waiting is read within two rxLinger at the latest.
func (x *rxCtl) parkAtStart() {
	x.mu.Lock()
	x.role = rxParked
	x.parks = 1 // the sweeper's first look only notes it (see sweep)
	x.mu.Unlock()
}

// startNow gives the role of a connection that will not start parked to
// the receive goroutine its caller starts.
func (x *rxCtl) startNow() {
	x.mu.Lock()
	x.role = rxLoop
	x.started = true
	x.mu.Unlock()
}

// toLoopLocked gives the role to the receive goroutine, starting it if it
// was never started. Callers hold x.mu and have set the role to rxLoop.
func (c *connection) toLoopLocked() {
	x := &c.rxc
	if !x.started {
		x.started = true
		go c.readLoop(true)
		return
	}
	x.back <- struct{}{}
}

type rxRole uint8

const (
	rxLoop rxRole = iota
	rxParked
	rxWaiter
	rxEnded
)

// rxLinger is how long a role a waiter gave back stays parked for the
// next waiter, at least, before the receive goroutine takes it back (at
// most twice that). A request/response exchange waits again within
// microseconds; data that arrives with nobody waiting is read this much
// later.
const rxLinger = time.Millisecond

// rxSweep brings parked receive roles back to their receive goroutines.
// A timer per parked role, reset by every waiter that leaves, made each
// round trip slower than the hand-off this file removes (resetting a
// timer that fires sooner than the network poller's sleep wakes the
// poller's thread). Instead a waiter that parks a role puts its
// connection on its IA's list, once, and one goroutine per IA looks at
// the list every rxLinger while it is not empty: a role it finds parked
// twice in a row, with no waiter in between, goes back.
type rxSweep struct {
	mu      sync.Mutex
	conns   []*connection
	running bool
	closed  bool          // the IA is closing: no sweeper starts
	stop    chan struct{} // ends the running sweeper (IA.Close)
}

// rxSweepIdle is how many looks at an empty list the sweeper makes before
// it ends, so that a busy connection, whose role is mostly held by a
// waiter and off the list, does not start a goroutine every rxLinger.
const rxSweepIdle = 20

// watch puts c on the sweep list and starts the sweeper if needed.
func (ia *IA) watch(c *connection) {
	s := &ia.sweep
	s.mu.Lock()
	if !c.rxc.swept.Load() && !s.closed {
		c.rxc.swept.Store(true)
		s.conns = append(s.conns, c)
		if !s.running {
			// The connection's receive goroutine is alive (its role is
			// parked), so conns is not zero here and Close is not
			// past its Wait.
			s.running = true
			if s.stop == nil {
				s.stop = make(chan struct{}, 1)
			}
			ia.conns.Add(1)
			go ia.sweepLoop()
		}
	}
	s.mu.Unlock()
}

// stopSweep ends the sweeper for good; IA.Close calls it once every
// connection has ended.
func (ia *IA) stopSweep() {
	s := &ia.sweep
	s.mu.Lock()
	s.closed = true
	if s.running {
		s.stop <- struct{}{}
	}
	s.mu.Unlock()
}

// sweepLoop is the sweeper; it ends after rxSweepIdle looks at an empty
// list, or when the IA closes.
func (ia *IA) sweepLoop() {
	defer ia.conns.Done()
	s := &ia.sweep
	t := time.NewTicker(rxLinger)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		kept := s.conns[:0]
		for _, c := range s.conns {
			if c.sweep() {
				kept = append(kept, c)
			} else {
				c.rxc.swept.Store(false)
			}
		}
		clear(s.conns[len(kept):])
		s.conns = kept
		if len(kept) > 0 {
			idle = 0
		} else if idle++; idle >= rxSweepIdle {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// sweep gives c's role back to its receive goroutine if it stayed parked
// since the last look, and reports whether the sweeper should look at c
// again. A role held by a waiter leaves the list, so that a long wait
// costs no sweeping; the waiter puts it back when it parks the role.
func (c *connection) sweep() bool {
	x := &c.rxc
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.role != rxParked {
		return false
	}
	if x.parks == x.seen {
		x.role = rxLoop
		c.toLoopLocked()
		return false
	}
	x.seen = x.parks
	return true
}

// rxWaiterBulk is how many large FPDUs in a row, with no small one in
// between and no wait ending, a waiter places; beyond that the stream
// goes back to the receive goroutine (rxCtl.long). A stream with a
// small message every few hundred KiB (rdmanet's control message after
// each chunk of ring data) stays with its waiter, a long run of RDMA
// Writes nobody waits for does not.
const rxWaiterBulk = 64

// rxBulkAfter is how many FPDUs that fit the read-ahead must follow one
// that did not before waiters take the receive role again.
const rxBulkAfter = 8

// errPoked ends a waiter's read when pokeRx was called.
var errPoked = errors.New("iwarp: receive wait poked")

// pokeRx makes the waiter that reads c's socket, if any, look at its CQ
// again. Callers hold no CQ lock.
func (c *connection) pokeRx() {
	x := &c.rxc
	x.mu.Lock()
	x.poke.Store(true)
	if x.sockWait {
		x.stale = true
		_ = c.tc.SetReadDeadline(aLongTimeAgo)
	}
	x.mu.Unlock()
}

// awaitFrame is the receive goroutine's wait at an FPDU boundary: it
// returns once the first 4 bytes of the next FPDU are read ahead, with
// end set when the stream ended or a waiter met the end. A waiter that
// asks for the role gets it here.
func (rx *receiver) awaitFrame() (err error, end bool) {
	c := rx.c
	x := &c.rxc
	for {
		if x.end {
			return x.fatal, true
		}
		if rx.w-rx.r >= 4 && !x.want.Load() {
			return nil, false
		}
		x.mu.Lock()
		if x.want.Load() {
			// A waiter asked for the role: park, and let it know
			// (Interrupt makes its Wait return, and the next Wait
			// takes the role).
			x.want.Store(false)
			x.role = rxParked
			x.parks++
			x.mu.Unlock()
			if !x.swept.Load() {
				c.q.ia.watch(c)
			}
			c.rcq.Interrupt()
			<-x.back
			// The role came back; a waiter may have left its deadline.
			rx.clearDeadline()
			continue
		}
		x.idle, x.bulk = true, rx.small < rxBulkAfter
		if !x.bulk {
			x.long = false
		}
		x.mu.Unlock()
		ferr := rx.fill(4)
		x.mu.Lock()
		x.idle = false
		kicked := x.want.Load()
		x.mu.Unlock()
		if kicked {
			rx.clearDeadline()
			if ferr == nil || errors.Is(ferr, os.ErrDeadlineExceeded) {
				continue
			}
		}
		if ferr != nil {
			return rx.readErr(ferr, rx.r == rx.w), true
		}
	}
}

// clearDeadline removes the read deadline a waiter or a kick left.
// Only the holder of the role calls it.
func (rx *receiver) clearDeadline() {
	_ = rx.tc.SetReadDeadline(time.Time{})
	x := &rx.c.rxc
	x.mu.Lock()
	x.rdl, x.stale = time.Time{}, false
	x.mu.Unlock()
}

// unpark gives a parked role back to the receive goroutine at once.
func (c *connection) unpark() {
	x := &c.rxc
	x.mu.Lock()
	if x.role == rxParked {
		x.role = rxLoop
		c.toLoopLocked()
	}
	x.mu.Unlock()
}

// rxStop records that the receive goroutine stopped reading for good.
// It holds the role then.
func (c *connection) rxStop() {
	x := &c.rxc
	x.mu.Lock()
	x.role = rxEnded
	x.mu.Unlock()
	if cq := c.rcq; cq != nil {
		cq.detach(c)
	}
}

// takeRole makes the calling waiter the holder of the receive role if
// it is parked, and reports whether it did. A role the receive goroutine
// holds is asked for: it hands it over at its next FPDU boundary, at once
// if it waits there for the socket, so that a later call takes it.
// futile reports that no later call will take it soon: the receive
// goroutine keeps it for large FPDUs (bulk), or the receiver stopped.
func (c *connection) takeRole() (took, futile bool) {
	x := &c.rxc
	if c.rx.idle == nil {
		return false, true // the system has no netpoller step for a waiter
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	switch x.role {
	case rxParked:
		x.role = rxWaiter
		return true, false
	case rxLoop:
		if x.bulk && x.long {
			return false, true
		}
		if !x.want.Load() {
			x.want.Store(true)
			if x.idle {
				_ = c.tc.SetReadDeadline(aLongTimeAgo)
			}
		}
		return false, false
	}
	return false, true
}

// runWhole runs, for the waiter holding the role, every FPDU that has
// arrived whole in the read-ahead, and one larger than the read-ahead as
// far as it has come (see headerMissing). It reports false, having handed
// the role back to the receive goroutine, on a protocol error (which it
// turns into the connection's end) or one FPDU too many of a bulk stream
// (rxWaiterBulk).
func (c *connection) runWhole() bool {
	rx := c.rx
	x := &c.rxc
	for {
		if need := rx.frameNeed(); rx.partOn {
			// The rest of a Write some holder of the role began.
		} else if need == 0 || need > rx.w-rx.r {
			if need <= rxBufSize {
				return true
			}
			// A large FPDU runs once its header is read ahead (see
			// headerMissing).
			if rx.headerMissing() > 0 {
				return true
			}
			// A waiter that places a stream for long without being
			// done (a bulk transfer whose completion comes at its end)
			// leaves it to the receive goroutine, which reads it with
			// fewer system calls.
			if rx.bulkRun++; rx.bulkRun > rxWaiterBulk {
				x.mu.Lock()
				x.long = true
				x.mu.Unlock()
				c.handBack()
				return false
			}
		} else {
			rx.bulkRun = 0 // a small FPDU between large ones: a message's end, say
		}
		rx.nowait = true
		err := rx.step()
		rx.nowait = false
		if err == errPartial {
			return true
		}
		if err != nil {
			x.end, x.fatal = true, err
			c.handBack()
			return false
		}
	}
}

// progressRx is CQ.Progress for the CQ that only c's receives complete
// on: if the receive role is free, it reads what the socket has, without
// waiting, and runs every FPDU that arrived whole, so that a spinning
// waiter finds its completion without a goroutine hand-off (see the top
// of this file). It reports whether bytes arrived, and stop (as
// CQ.Progress) once the receive goroutine has, or keeps, the socket.
func (c *connection) progressRx() (found, stop bool) {
	rx := c.rx
	x := &c.rxc
	if took, futile := c.takeRole(); !took {
		return false, futile
	}
	if !c.runWhole() {
		return true, true
	}
	x.mu.Lock()
	reset := x.stale || !x.rdl.IsZero()
	x.stale = false
	x.mu.Unlock()
	if reset {
		// A waiter with a deadline, or a poke, left one.
		_ = c.tc.SetReadDeadline(time.Time{})
		x.rdl = time.Time{}
	}
	if rx.partOn {
		// A large FPDU still arriving: runWhole placed what there was
		// of it, and the rest goes straight into its place, not into
		// the read-ahead.
		c.release()
		return false, false
	}
	got, rerr := rx.readNow()
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
		// As in waitRx: the receive goroutine ends the connection.
		x.end, x.fatal = true, rx.readErr(rerr, rx.r == rx.w)
		c.handBack()
		return true, true
	}
	if got && !c.runWhole() {
		return true, true
	}
	c.release()
	return got, false
}

// release parks the role a waiter is done with.
func (c *connection) release() {
	x := &c.rxc
	x.mu.Lock()
	x.role = rxParked
	x.parks++
	x.mu.Unlock()
	if !x.swept.Load() {
		c.q.ia.watch(c)
	}
}

// handBack gives the role straight back to the receive goroutine.
func (c *connection) handBack() {
	x := &c.rxc
	x.mu.Lock()
	x.role = rxLoop
	c.toLoopLocked()
	x.mu.Unlock()
}

// waitRx is CQ.Wait for a CQ that only c's receives complete on, called
// with nothing queued and cq.mu not held. It takes the receive role and
// reads the socket until cq holds a completion, is interrupted or closed,
// or the deadline passes. It reports false (and the caller waits on the
// CQ's channel) when it could not take the role, or had to give it back
// to the receive goroutine.
func (c *connection) waitRx(cq *CQ, deadline time.Time) (handled bool, err error) {
	rx := c.rx
	x := &c.rxc
	if took, _ := c.takeRole(); !took {
		return false, nil
	}
	for {
		if !c.runWhole() {
			return false, nil
		}
		cq.mu.Lock()
		if ret, err := cq.readyLocked(deadline); ret {
			cq.mu.Unlock()
			rx.bulkRun = 0
			c.release()
			return true, err
		}
		x.poke.Store(false)
		cq.sockConn = c
		cq.mu.Unlock()

		x.mu.Lock()
		x.sockWait = true
		reset := x.stale || !x.rdl.Equal(deadline)
		x.stale = false
		x.mu.Unlock()
		if reset {
			_ = c.tc.SetReadDeadline(deadline)
			x.rdl = deadline
		}
		var rerr error
		if rx.partOn {
			rerr = rx.waitPart()
		} else {
			rerr = rx.readWaiting()
		}
		x.mu.Lock()
		x.sockWait = false
		x.mu.Unlock()
		cq.mu.Lock()
		cq.sockConn = nil
		cq.mu.Unlock()
		if rerr != nil && rerr != errPoked && !errors.Is(rerr, os.ErrDeadlineExceeded) {
			// The end of the stream, a reset, a local close: the
			// receive goroutine ends the connection.
			x.end, x.fatal = true, rx.readErr(rerr, rx.r == rx.w)
			c.handBack()
			return false, nil
		}
	}
}
