package iwarp

import (
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// eventQueue serialises a QP's handler calls, as the driver contract
// requires, without ever calling the handler with a QP lock held or from
// the caller of PostRecv/Disconnect/Close (package dat may hold its own
// locks around those only in ways we cannot see). Events are delivered in
// order by one goroutine that exists only while the queue is non-empty, so
// an idle QP costs no goroutine.
type eventQueue struct {
	h driver.QPHandler

	mu      sync.Mutex
	q       []func(driver.QPHandler)
	running bool
}

func newEventQueue(h driver.QPHandler) *eventQueue { return &eventQueue{h: h} }

// post queues fn for delivery.
func (e *eventQueue) post(fn func(driver.QPHandler)) {
	if e.h == nil {
		return
	}
	e.mu.Lock()
	e.q = append(e.q, fn)
	if !e.running {
		e.running = true
		go e.run()
	}
	e.mu.Unlock()
}

func (e *eventQueue) run() {
	e.mu.Lock()
	for len(e.q) > 0 {
		fn := e.q[0]
		e.q[0] = nil
		e.q = e.q[1:]
		e.mu.Unlock()
		fn(e.h)
		e.mu.Lock()
	}
	e.running = false
	e.q = nil
	e.mu.Unlock()
}

// flushRecvs posts a flushed completion for every receive in wrs.
func (e *eventQueue) flushRecvs(wrs []driver.RecvWR) {
	for _, wr := range wrs {
		c := driver.Completion{Cookie: wr.Cookie, Op: driver.OpRecv, Status: driver.StatusFlushed, Signaled: true}
		e.post(func(h driver.QPHandler) { h.Completion(c) })
	}
}

// disconnected posts the Disconnected event.
func (e *eventQueue) disconnected(err error) {
	e.post(func(h driver.QPHandler) { h.Disconnected(err) })
}
