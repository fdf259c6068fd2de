package provkit

import "sync"

// Closer is a provider object an IA owns and must close when it closes.
type Closer interface {
	comparable
	Close() error
}

// Set holds an IA's live objects of one kind (listeners, QPs) so that
// closing the IA closes them all, and nothing is added once it has. The
// zero value is ready to use.
type Set[T Closer] struct {
	mu     sync.Mutex
	closed bool
	m      map[T]struct{}
}

// Add puts x in the set. It reports false, leaving x alone, once CloseAll
// has run: the caller then closes x itself.
func (s *Set[T]) Add(x T) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = make(map[T]struct{})
	}
	s.m[x] = struct{}{}
	return true
}

// Remove takes x out of the set; objects call it from their own Close.
func (s *Set[T]) Remove(x T) {
	s.mu.Lock()
	delete(s.m, x)
	s.mu.Unlock()
}

// Len is the number of live objects.
func (s *Set[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// CloseAll refuses further additions and closes every member, outside the
// set's lock (their Close calls Remove).
func (s *Set[T]) CloseAll() {
	s.mu.Lock()
	s.closed = true
	members := make([]T, 0, len(s.m))
	for x := range s.m {
		members = append(members, x)
	}
	s.mu.Unlock()
	for _, x := range members {
		x.Close()
	}
}
