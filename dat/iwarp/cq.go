package iwarp

import (
	"fmt"
	"net"
	"sync"
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
type CQ struct {
	mu       sync.Mutex
	q        ring[driver.Completion]
	waiting  bool // a Wait is blocked (or about to block) on wake
	intr     bool // Interrupt came since the last Wait returned
	closed   bool
	wake     chan struct{} // capacity 1
	done     chan struct{} // closed by Close
	timer    *time.Timer   // Wait's deadline timer, reused (one waiter at a time)
	closeErr error
}

var _ driver.CQ = (*CQ)(nil)

func newCQ(size int) *CQ {
	cq := &CQ{
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if size > 0 {
		// A little room to start; the ring grows with the bursts that
		// need more (and keeps it). Presizing to size would cost every
		// idle connection its full queue.
		cq.q.buf = make([]driver.Completion, min(size, 16))
	}
	return cq
}

// push appends c and wakes a blocked waiter. After Close the completion
// is dropped: package dat closes a CQ only when no QP uses it.
func (cq *CQ) push(c driver.Completion) {
	cq.mu.Lock()
	if cq.closed {
		cq.mu.Unlock()
		return
	}
	cq.q.push(c)
	w := cq.waiting
	cq.mu.Unlock()
	if w {
		cq.signal()
	}
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
		dst[i] = cq.q.pop()
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
	if cq.closed {
		cq.mu.Unlock()
		return cq.closeErr
	}
	if cq.q.len() > 0 || cq.intr {
		cq.intr = false
		cq.mu.Unlock()
		return nil
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
		err = cq.closeErr
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

// Interrupt makes the current or next Wait return. It never blocks.
func (cq *CQ) Interrupt() {
	cq.mu.Lock()
	cq.intr = true
	w := cq.waiting
	cq.mu.Unlock()
	if w {
		cq.signal()
	}
}

// Close frees the CQ; a Wait in progress returns an error wrapping
// net.ErrClosed. It is idempotent.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return nil
	}
	cq.closed = true
	cq.closeErr = fmt.Errorf("iwarp: CQ closed: %w", net.ErrClosed)
	cq.q.clear()
	close(cq.done)
	return nil
}
