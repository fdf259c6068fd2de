package iwarp

import (
	"net"
	"syscall"
)

// Test-only views of internal state for the iwarp_test package.

// ListenerQueued reports requests parsed but not yet returned by Accept.
func ListenerQueued(l *Listener) int { return len(l.ready) }

// ListenerHandshakes reports TCP connections in admission.
func ListenerHandshakes(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.admitting.n
}

// AdmissionCounts is what a listener's admission did so far.
type AdmissionCounts struct {
	Refused  int // reset because the backlog was full
	Evicted  int // reset to make room for a newer connection
	Dropped  int // reset: silent, not MPA, or a bad Request
	Fallback int // handed to ListenConfig.Fallback
}

// FallbackSocket is the socket of a connection ListenConfig.Fallback
// got (nil if c is not one).
func FallbackSocket(c net.Conn) syscall.RawConn {
	fc, ok := c.(*fallbackConn)
	if !ok {
		return nil
	}
	rc, err := fc.tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// ListenerCounts reports l's admission counters.
func ListenerCounts(l *Listener) AdmissionCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts
	return AdmissionCounts{Refused: c.refused, Evicted: c.evicted, Dropped: c.dropped, Fallback: c.fallback}
}

// QPCanSend is the startup gate of q's connection (nil without one).
func QPCanSend(q *QP) <-chan struct{} { return q.canSend() }

// RxRole reports who holds the receive role of q's connection
// (rxrole.go): "loop", "parked", "waiter" or "ended"; "" without one.
func RxRole(q *QP) string {
	q.mu.Lock()
	c := q.conn
	q.mu.Unlock()
	if c == nil {
		return ""
	}
	c.rxc.mu.Lock()
	defer c.rxc.mu.Unlock()
	return [...]string{rxLoop: "loop", rxParked: "parked", rxWaiter: "waiter", rxEnded: "ended"}[c.rxc.role]
}

// RxMidFrame reports whether a waiter holding q's receive role waits for
// the socket in the middle of an FPDU whose payload it places as it
// comes. partOn changes only while its holder does not wait for the
// socket, which it starts and stops under the lock.
func RxMidFrame(q *QP) bool {
	q.mu.Lock()
	c := q.conn
	q.mu.Unlock()
	if c == nil {
		return false
	}
	c.rxc.mu.Lock()
	defer c.rxc.mu.Unlock()
	return c.rxc.role == rxWaiter && c.rxc.sockWait && c.rx.partOn
}
