package dat

// deliveryMode says what a successful completion of one posted DTO turns
// into. The provider reports completions of a queue in the order the work
// was posted (reliable-connected semantics, flushes included), so a FIFO of
// modes per queue pairs each completion with its post without widening the
// provider contract.
type deliveryMode uint8

const (
	deliverNotify   deliveryMode = iota // queue the event and wake a waiter
	deliverQuiet                        // UNSIGNALLED: queue without waking
	deliverSuppress                     // SUPPRESS: no event on success
)

// modeFIFO is a fixed-capacity ring of delivery modes, sized by the EP's
// max DTOs so posting never allocates.
type modeFIFO struct {
	buf     []deliveryMode
	head, n int
}

// resize sets the capacity, keeping the queued modes (an EP may be
// modified while receives are posted, before it connects).
func (f *modeFIFO) resize(capacity int) {
	capacity = max(capacity, f.n)
	if capacity == len(f.buf) {
		return
	}
	buf := make([]deliveryMode, capacity)
	for i := 0; i < f.n; i++ {
		buf[i] = f.buf[(f.head+i)%len(f.buf)]
	}
	f.buf, f.head = buf, 0
}

func (f *modeFIFO) full() bool { return f.n >= len(f.buf) }

// dropNewest removes the newest mode, for a post the provider refused.
func (f *modeFIFO) dropNewest() {
	if f.n > 0 {
		f.n--
	}
}

func (f *modeFIFO) push(m deliveryMode) {
	f.buf[(f.head+f.n)%len(f.buf)] = m
	f.n++
}

// pop returns the oldest mode; an unmatched completion (none posted)
// notifies.
func (f *modeFIFO) pop() deliveryMode {
	if f.n == 0 {
		return deliverNotify
	}
	m := f.buf[f.head]
	f.head = (f.head + 1) % len(f.buf)
	f.n--
	return m
}
