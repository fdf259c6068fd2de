package iwarp

// ring is a FIFO queue over a circular buffer. The data path keeps its work
// queues in rings so that steady-state posting and completing allocate
// nothing: the buffer only grows, and popped slots are zeroed so they do not
// keep user memory reachable.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

// push appends v at the back.
func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// pushFront inserts v before the oldest element.
func (r *ring[T]) pushFront(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.head = (r.head + len(r.buf) - 1) % len(r.buf)
	r.buf[r.head] = v
	r.n++
}

// at returns a pointer to the i-th element from the front (0: oldest).
func (r *ring[T]) at(i int) *T { return &r.buf[(r.head+i)%len(r.buf)] }

// front returns a pointer to the oldest element; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// pop removes and returns the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

// clear empties the ring, keeping its buffer.
func (r *ring[T]) clear() {
	var zero T
	for i := 0; i < r.n; i++ {
		*r.at(i) = zero
	}
	r.head, r.n = 0, 0
}

// reserve makes room for n elements in an empty ring that has none yet, in
// one allocation instead of the doublings pushes would make.
func (r *ring[T]) reserve(n int) {
	if r.buf == nil && n > 0 {
		r.buf = make([]T, n)
	}
}

func (r *ring[T]) grow() {
	n := 2 * len(r.buf)
	if n == 0 {
		n = 8
	}
	buf := make([]T, n)
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	r.buf, r.head = buf, 0
}
