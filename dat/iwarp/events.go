package iwarp

import (
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// eventQueue serialises a QP's handler calls, as the driver contract
// requires, without ever calling the handler with a QP lock held or from
// the caller of PostRecv/PostSend/Disconnect/Close (package dat may hold its
// own locks around those only in ways we cannot see). Events are delivered
// in the order they were posted by one goroutine that exists only while the
// queue is non-empty, so an idle QP costs no goroutine.
//
// The data path posts events while holding the QP lock, so the order of
// posting is the order of the queues they complete (package dat pairs
// completions with posts in order). Events are stored by value: posting
// allocates nothing once the ring has grown to the working-set size.
type eventQueue struct {
	h driver.QPHandler

	mu      sync.Mutex
	q       ring[event]
	running bool

	// inline is the goroutine id of a provider goroutine (receiver or
	// sender) delivering events itself (deliver), 0 otherwise.
	inline atomic.Uint64
}

// event is one handler call: a Completion, or Disconnected when disc is set.
type event struct {
	disc bool
	c    driver.Completion
	err  error
}

func newEventQueue(h driver.QPHandler) *eventQueue { return &eventQueue{h: h} }

// push queues ev for delivery.
func (e *eventQueue) push(ev event) {
	if e.h == nil {
		return
	}
	e.mu.Lock()
	e.q.push(ev)
	if !e.running {
		e.running = true
		go e.run()
	}
	e.mu.Unlock()
}

// queue adds ev without starting a delivery goroutine. It reports whether
// no delivery is running, in which case the caller must see to one: a
// provider goroutine calls deliver once it holds no QP lock, PostSend
// wakes the sender goroutine. A running delivery takes the event.
func (e *eventQueue) queue(ev event) (orphan bool) {
	if e.h == nil {
		return false
	}
	e.mu.Lock()
	e.q.push(ev)
	orphan = !e.running
	e.mu.Unlock()
	return orphan
}

// deliver delivers the queued events on the calling provider goroutine,
// whose id is gid, unless a delivery is already running (which then takes
// them). This saves the hand-off to a delivery goroutine on the latency
// path. Handlers must not block for long (driver contract); one that
// calls Close, Disconnect or Reset of its own QP is recognised
// (inHandler) and not made to wait for the goroutine it runs on.
func (e *eventQueue) deliver(gid uint64) {
	if e.h == nil {
		return
	}
	e.mu.Lock()
	if e.running || e.q.len() == 0 {
		e.mu.Unlock()
		return
	}
	e.running = true
	e.mu.Unlock()
	e.inline.Store(gid)
	e.run()
	e.inline.Store(0)
}

// inHandler reports whether the caller is a handler that deliver runs on
// a provider goroutine.
func (e *eventQueue) inHandler() bool {
	g := e.inline.Load()
	return g != 0 && g == goid()
}

func (e *eventQueue) run() {
	e.mu.Lock()
	for e.q.len() > 0 {
		ev := e.q.pop()
		e.mu.Unlock()
		if ev.disc {
			e.h.Disconnected(ev.err)
		} else {
			e.h.Completion(ev.c)
		}
		e.mu.Lock()
	}
	e.running = false
	e.mu.Unlock()
}

// complete posts a Completion.
func (e *eventQueue) complete(c driver.Completion) { e.push(event{c: c}) }

// flushRecvs posts a flushed completion for every receive in wrs.
func (e *eventQueue) flushRecv(cookie uint64) {
	e.complete(driver.Completion{Cookie: cookie, Op: driver.OpRecv, Status: driver.StatusFlushed, Signaled: true})
}

// disconnected posts the Disconnected event.
func (e *eventQueue) disconnected(err error) { e.push(event{disc: true, err: err}) }
