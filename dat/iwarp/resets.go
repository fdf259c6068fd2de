package iwarp

import (
	"net"
	"runtime"
	"sync"
)

// resetQueue hands the connections admission drops to one goroutine of
// the listener, which resets them. A reset is most of what a dropped
// connection costs (on loopback the kernel delivers the RST to the peer
// within the close), and under a flood it was paid by the accept loop,
// which a real initiator's connection waits for in the kernel's accept
// queue, and by a burst of admission goroutines whose req_timeout
// expired together, which the consumer's goroutines waited behind. The
// resetting goroutine lets the others run every few resets instead.
type resetQueue struct {
	mu      sync.Mutex
	pending []*net.TCPConn
	max     int // bound of pending
	stopped bool
	wake    chan struct{} // cap 1: pending grew, or stop
	exited  chan struct{} // closed when run returns
}

const (
	// maxQueuedResets bounds the descriptors waiting for their reset;
	// beyond it, whoever drops a connection resets it itself.
	maxQueuedResets = 1024
	// resetsPerTurn is how many resets run does before it lets other
	// goroutines run.
	resetsPerTurn = 16
)

// newResetQueue starts the goroutine of a queue of at most bound
// connections.
func newResetQueue(bound int) *resetQueue {
	q := &resetQueue{max: bound, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go q.run()
	return q
}

// add resets tc soon, or at once if the queue is full or stopped.
func (q *resetQueue) add(tc *net.TCPConn) {
	q.mu.Lock()
	if q.stopped || len(q.pending) >= q.max {
		q.mu.Unlock()
		resetClose(tc)
		return
	}
	q.pending = append(q.pending, tc)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// flush resets what is queued at once, in the caller's goroutine, and
// reports whether there was anything (the accept loop out of descriptors
// gets them back so).
func (q *resetQueue) flush() bool {
	q.mu.Lock()
	batch := q.pending
	q.pending = nil
	q.mu.Unlock()
	for _, tc := range batch {
		resetClose(tc)
	}
	return len(batch) > 0
}

// stop resets whatever is still queued and returns once run has.
func (q *resetQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.exited
}

func (q *resetQueue) run() {
	defer close(q.exited)
	var batch []*net.TCPConn
	for {
		q.mu.Lock()
		batch, q.pending = q.pending, batch[:0]
		stopped := q.stopped
		q.mu.Unlock()
		for i, tc := range batch {
			resetClose(tc)
			batch[i] = nil
			if i%resetsPerTurn == resetsPerTurn-1 {
				runtime.Gosched()
			}
		}
		if len(batch) == 0 {
			if stopped {
				return
			}
			<-q.wake
		}
	}
}
