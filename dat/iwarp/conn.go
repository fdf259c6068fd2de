package iwarp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// connection is one established MPA connection owned by a QP: the TCP
// stream after the Request/Reply exchange plus what the exchange
// negotiated. A QP gets a new connection per Connect/Accept; Reset drops
// the old one.
type connection struct {
	tc   *net.TCPConn
	info ConnInfo

	// canSend is closed once the startup rule allows this side to send
	// FPDUs: at once for the initiator (which must send first, right after
	// the Reply), and for the responder when the initiator's first bytes
	// arrive (RFC 5044 §7.1.2; siw fails a stream whose Reply is followed
	// by data it did not expect yet).
	canSend     chan struct{}
	canSendOnce sync.Once

	readerDone chan struct{} // closed when the reader goroutine exits
	closed     chan struct{} // closed when the socket is fully closed
	closeOnce  sync.Once

	// local is set (under QP.mu) when this side tears the connection
	// down; the reader then reports nothing.
	local bool
}

func newConnection(tc *net.TCPConn, info ConnInfo) *connection {
	info.Local, info.Remote = tc.LocalAddr(), tc.RemoteAddr()
	c := &connection{
		tc:         tc,
		info:       info,
		canSend:    make(chan struct{}),
		readerDone: make(chan struct{}),
		closed:     make(chan struct{}),
	}
	if info.Initiator {
		close(c.canSend)
	}
	return c
}

// peerStarted records that the initiator's first bytes arrived.
func (c *connection) peerStarted() {
	c.canSendOnce.Do(func() {
		if !c.info.Initiator {
			close(c.canSend)
		}
	})
}

// readLoop is the connection's receive goroutine. For now it only watches
// the stream: the first bytes release the responder's startup gate, EOF or
// an error ends the connection. The data path replaces the discard below
// with FPDU parsing (wire.ParseControl & co.), reading straight into
// registered memory.
func (c *connection) readLoop(q *QP) {
	defer close(c.readerDone)
	buf := make([]byte, 4096)
	for {
		n, err := c.tc.Read(buf)
		if n > 0 {
			c.peerStarted()
		}
		if err != nil {
			q.connLost(c, err)
			return
		}
	}
}

// shutdown closes the socket after a local Disconnect or Close. Graceful:
// send FIN (TCP half-close is iWARP's orderly teardown, RFC 5044 §7.2),
// keep reading until the peer's FIN or the timeout, then close. Abrupt:
// reset the stream (SO_LINGER 0) so the peer sees the failure at once. It
// returns when the reader has exited.
func (c *connection) shutdown(graceful bool, timeout time.Duration) {
	if graceful {
		_ = c.tc.CloseWrite()
		t := time.NewTimer(timeout)
		select {
		case <-c.readerDone:
		case <-t.C:
		}
		t.Stop()
		_ = c.tc.Close()
	} else {
		c.abort()
	}
	<-c.readerDone
	c.closeOnce.Do(func() { close(c.closed) })
}

// abort resets the stream. It is safe at any time and idempotent; it also
// cuts short a graceful shutdown that is waiting for the peer.
func (c *connection) abort() {
	_ = c.tc.SetLinger(0)
	_ = c.tc.Close()
}

// lostError turns the reader's error into the Disconnected argument: nil
// for the peer's orderly close, a description otherwise.
func lostError(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("iwarp: connection broken: %w", err)
}
