//go:build !linux

package iwarp

import (
	"net"
	"syscall"
	"time"
)

// autoMULPDU assumes an Ethernet MSS (1448) where the connection's MSS
// cannot be queried portably.
func autoMULPDU(*net.TCPConn) int { return 1448&^7 - 6 }

type rawWriter struct{}

// writeNow cannot write without blocking here: everything is left to the
// sender goroutine.
func (s *sender) writeNow() (ok bool, err error) { return false, nil }

type rawReader struct{}

// readDirect reads into p.
func (rx *receiver) readDirect(p []byte) (int, error) { return rx.tc.Read(p) }

// peekNow reports no bytes where a non-blocking peek is not available:
// every connection goes through the admission goroutine.
func peekNow(*net.TCPConn, []byte) int { return 0 }

// idleReader: elsewhere a receiver keeps its buffer while it waits.
func idleReader(*net.TCPConn) syscall.RawConn { return nil }

func (rx *receiver) readIdle() error { return nil }

// readNow is never called: without idleReader no waiter takes the
// receive role.
func (rx *receiver) readNow() (bool, error) { return false, nil }

// partNow and waitPart are never called: without idleReader no waiter
// places a Write.
func (rx *receiver) partNow() (bool, error) { return false, nil }

func (rx *receiver) waitPart() error { return nil }

// readWaiting is never called: without idleReader a waiter leaves the
// socket to the receive goroutine.
func (rx *receiver) readWaiting() error { return nil }

// deferAccept: elsewhere silent connections are dropped by the listener's
// request timeout alone.
func deferAccept(net.Listener, time.Duration) {}
