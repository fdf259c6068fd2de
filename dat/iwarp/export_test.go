package iwarp

// Test-only views of internal state for the iwarp_test package.

// ListenerQueued reports requests parsed but not yet returned by Accept.
func ListenerQueued(l *Listener) int { return len(l.ready) }

// ListenerHandshakes reports TCP connections whose MPA Request is being read.
func ListenerHandshakes(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handshakes)
}

// QPCanSend is the startup gate of q's connection (nil without one).
func QPCanSend(q *QP) <-chan struct{} { return q.canSend() }
