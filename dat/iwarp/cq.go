package iwarp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// CQ is a completion queue. It implements driver.CQ.
//
// The data path (receive goroutine, sender goroutine, PostSend writing
// inline) appends completions with push; the one goroutine package dat
// lets wait on the CQ takes them with Poll and sleeps in Wait. The queue
// is a ring that only grows, so it never loses a completion however long
// the consumer leaves it unpolled, and stops allocating once it has grown
// to the working set.
//
// Wake-ups go through a channel of capacity 1 that is only signalled when
// a waiter is (about to be) blocked on it, so a busy producer makes no
// channel operation per completion and a waiter does not find stale
// tokens from completions it already polled.
//
// On a CQ that receives complete on for one connection only, the waiter
// does not sleep on the channel: it takes the connection's receive role
// and reads the socket itself (rxrole.go), so that a receive completes in
// the goroutine waiting for it. Whoever queues a completion, interrupts
// or closes the CQ meanwhile pokes that reader instead of signalling.
type CQ struct {
	mu      sync.Mutex
	q       ring[cqEntry]
	waiting bool // a Wait is blocked (or about to block) on wake
	intr    bool // Interrupt came since the last Wait returned
	closed  bool
	wake    chan struct{} // capacity 1
	done    chan struct{} // closed by Close
	timer   *time.Timer   // Wait's deadline timer, reused (one waiter at a time)

	// rxConns counts the connections whose receives complete here;
	// rxConn is the only one while that is 1 and it has been the only
	// one since the count was 0 (a CQ once shared stays with the
	// channel until it is unused again).
	rxConns int
	rxConn  *connection
	// sockConn is the connection whose socket Wait reads right now.
	sockConn *connection
}

var (
	_ driver.CQ           = (*CQ)(nil)
	_ driver.CQProgresser = (*CQ)(nil)
)

func newCQ(size int) *CQ {
	cq := &CQ{
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if size > 0 {
		// A little room to start; the ring grows with the bursts that
		// need more (and keeps it). Presizing to size would cost every
		// idle connection its full queue.
		cq.q.buf = make([]cqEntry, min(size, 16))
	}
	return cq
}

// A cqEntry is a completion, and for the receive of an SRQ the count of
// its QP's SRQ receives that Poll brings down (see receiver.takeRecv).
type cqEntry struct {
	c    driver.Completion
	held *atomic.Int32
}

// push appends c and wakes a blocked waiter. After Close the completion
// is dropped: package dat closes a CQ only when no QP uses it.
func (cq *CQ) push(c driver.Completion) { cq.pushHeld(c, nil) }

// pushHeld is push for an SRQ receive taken by a QP that counts them in
// held.
func (cq *CQ) pushHeld(c driver.Completion, held *atomic.Int32) {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return
	}
	cq.q.push(cqEntry{c: c, held: held})
	w, sc := cq.waiting, cq.sockConn
	cq.mu.Unlock()
	if w {
		cq.signal()
	}
	if sc != nil {
		sc.pokeRx()
	}
}

// attach records that c's receives complete on the CQ, and reports
// whether they are the only ones (a waiter on the CQ may then take c's
// receive role).
func (cq *CQ) attach(c *connection) bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.rxConns++
	if cq.rxConns == 1 {
		cq.rxConn = c
	} else {
		cq.rxConn = nil
	}
	return cq.rxConn == c
}

// detach undoes attach once c's receiver has stopped.
func (cq *CQ) detach(c *connection) {
	cq.mu.Lock()
	cq.rxConns--
	if cq.rxConn == c || cq.rxConns == 0 {
		cq.rxConn = nil
	}
	cq.mu.Unlock()
}

// readyLocked reports whether Wait returns now, and with what: the CQ is
// closed, holds a completion, was interrupted, or the deadline passed.
// Callers hold cq.mu.
func (cq *CQ) readyLocked(deadline time.Time) (bool, error) {
	if cq.closed {
		return true, errCQClosed
	}
	if cq.q.len() > 0 || cq.intr {
		cq.intr = false
		return true, nil
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return true, nil
	}
	return false, nil
}

func (cq *CQ) signal() {
	select {
	case cq.wake <- struct{}{}:
	default:
	}
}

// Poll moves up to len(dst) completions, oldest first, into dst.
func (cq *CQ) Poll(dst []driver.Completion) int {
	cq.mu.Lock()
	n := min(len(dst), cq.q.len())
	for i := range n {
		e := cq.q.pop()
		dst[i] = e.c
		if e.held != nil {
			e.held.Add(-1)
		}
	}
	cq.mu.Unlock()
	return n
}

// Len reports how many completions the CQ holds.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.q.len()
}

// Wait blocks until the CQ holds a completion, Interrupt is called, the
// deadline passes (zero: none) or the CQ is closed; see driver.CQ.
func (cq *CQ) Wait(deadline time.Time) error {
	cq.mu.Lock()
	if ret, err := cq.readyLocked(deadline); ret {
		cq.mu.Unlock()
		return err
	}
	if c := cq.rxConn; c != nil {
		cq.mu.Unlock()
		if handled, err := c.waitRx(cq, deadline); handled {
			return err
		}
		cq.mu.Lock()
		if ret, err := cq.readyLocked(deadline); ret {
			cq.mu.Unlock()
			return err
		}
	}
	var tc <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			cq.mu.Unlock()
			return nil
		}
		if cq.timer == nil {
			cq.timer = time.NewTimer(d)
		} else {
			cq.timer.Reset(d)
		}
		tc = cq.timer.C
	}
	// Drop a token left by a push that raced with the previous Wait's
	// return, so it does not end this Wait spuriously.
	select {
	case <-cq.wake:
	default:
	}
	cq.waiting = true
	cq.mu.Unlock()

	var err error
	select {
	case <-cq.wake:
	case <-tc:
	case <-cq.done:
		err = errCQClosed
	}
	if tc != nil {
		// Since Go 1.23 Stop leaves no stale value in the channel, so
		// the timer can be reset by the next Wait.
		cq.timer.Stop()
	}
	cq.mu.Lock()
	cq.waiting = false
	cq.intr = false
	cq.mu.Unlock()
	return err
}

// Progress is driver.CQProgresser's: on a CQ that one connection's
// receives complete on, a spinning waiter reads that connection's socket
// itself, without waiting (rxrole.go). It does nothing while the CQ holds
// completions, which the waiter polls first. On any other CQ, one that
// is closed, or while the connection's receive goroutine has the socket
// for large FPDUs, it says stop: the completions come from goroutines a
// spin would keep from running.
func (cq *CQ) Progress() (found, stop bool) {
	cq.mu.Lock()
	c, closed, n := cq.rxConn, cq.closed, cq.q.len()
	cq.mu.Unlock()
	switch {
	case n > 0:
		return true, false
	case c == nil || closed:
		return false, true
	}
	return c.progressRx()
}

// Interrupt makes the current or next Wait return. It never blocks.
func (cq *CQ) Interrupt() {
	cq.mu.Lock()
	cq.intr = true
	w, sc := cq.waiting, cq.sockConn
	cq.mu.Unlock()
	if w {
		cq.signal()
	}
	if sc != nil {
		sc.pokeRx()
	}
}

// errCQClosed is what a Wait on a closed CQ returns: one value for every
// CQ, as it says nothing of its own, rather than two allocations in each
// connection's teardown (which closes two CQs).
var errCQClosed = fmt.Errorf("iwarp: CQ closed: %w", net.ErrClosed)

// Close frees the CQ; a Wait in progress returns an error wrapping
// net.ErrClosed. It is idempotent.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return nil
	}
	cq.closed = true
	cq.q.clear()
	close(cq.done)
	sc := cq.sockConn
	cq.mu.Unlock()
	if sc != nil {
		sc.pokeRx() // a waiter reading a socket does not watch done
	}
	return nil
}
