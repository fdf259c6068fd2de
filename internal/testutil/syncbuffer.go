// Package testutil holds helpers that the tests of several packages
// share, so that each does not keep its own copy.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that goroutines may write while a test
// reads it: a logger writing from a provider's event loop, a command's
// output while it runs. The zero value is an empty buffer.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Len returns how many bytes the buffer holds.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// String returns what the buffer holds.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
