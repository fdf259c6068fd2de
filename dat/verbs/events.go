//go:build verbs && linux && cgo

package verbs

import (
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// qpEvent is one handler call.
type qpEvent struct {
	completion   driver.Completion
	disconnected bool
	err          error
	barrier      chan struct{} // not a handler call: closed when reached
}

// eventQueue serialises a QP's handler calls, as the driver contract
// requires, and keeps them off the goroutines that produce them (the CQ
// and CM loops, posters, Disconnect/Close): a handler may take package
// dat's locks, which those callers may hold or wait behind. Events are
// delivered in order by one goroutine that exists only while the queue is
// non-empty, so an idle QP costs no goroutine.
type eventQueue struct {
	h driver.QPHandler

	mu      sync.Mutex
	q       []qpEvent
	running bool
}

func newEventQueue(h driver.QPHandler) *eventQueue { return &eventQueue{h: h} }

func (e *eventQueue) post(ev qpEvent) {
	e.mu.Lock()
	e.q = append(e.q, ev)
	if !e.running {
		e.running = true
		go e.run()
	}
	e.mu.Unlock()
}

func (e *eventQueue) run() {
	e.mu.Lock()
	for len(e.q) > 0 {
		ev := e.q[0]
		e.q[0] = qpEvent{}
		e.q = e.q[1:]
		e.mu.Unlock()
		switch {
		case ev.barrier != nil:
			close(ev.barrier)
		case e.h == nil:
		case ev.disconnected:
			e.h.Disconnected(ev.err)
		default:
			e.h.Completion(ev.completion)
		}
		e.mu.Lock()
	}
	e.running = false
	e.q = nil
	e.mu.Unlock()
}

// completion queues a Completion call.
func (e *eventQueue) completion(c driver.Completion) { e.post(qpEvent{completion: c}) }

// disconnected queues a Disconnected call.
func (e *eventQueue) disconnected(err error) { e.post(qpEvent{disconnected: true, err: err}) }

// wait returns once every event queued before it has been delivered (and
// the delivering goroutine is about to exit if nothing else is queued).
// It must not be called from a handler.
func (e *eventQueue) wait() {
	done := make(chan struct{})
	e.post(qpEvent{barrier: done})
	<-done
}
