package rdmanet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
)

// opError wraps err the way package net does: *net.OpError with Net
// "rdma". Nil addresses stay nil interfaces, so Error never calls String
// on a nil pointer.
func opError(op string, src, dst *Addr, err error) error {
	e := &net.OpError{Op: op, Net: "rdma", Err: err}
	if src != nil {
		e.Source = src
	}
	if dst != nil {
		e.Addr = dst
	}
	return e
}

// HandshakeError reports a failed rdmanet handshake: the peer rejected this
// side's Hello (PeerRejected), or answered with a Hello this side cannot
// use.
type HandshakeError struct {
	// PeerRejected is true when the peer refused our Hello.
	PeerRejected bool
	// Reason says what was wrong.
	Reason RejectReason
	// Offered is the version the refusing side was offered and Speaks the
	// version it speaks, for RejectVersion.
	Offered, Speaks int
	msg             string
}

// RejectReason is why a handshake was refused.
type RejectReason uint8

// Reject reasons (on the wire as the handshake reject payload's reason).
const (
	RejectBadMagic  RejectReason = RejectReason(handshake.ReasonBadMagic)
	RejectVersion   RejectReason = RejectReason(handshake.ReasonVersion)
	RejectMalformed RejectReason = RejectReason(handshake.ReasonMalformed)
	RejectResources RejectReason = RejectReason(handshake.ReasonResources)
)

// Error says who refused the handshake and why.
func (e *HandshakeError) Error() string {
	if e.PeerRejected {
		return "peer rejected the handshake: " + e.msg
	}
	return "bad handshake from peer: " + e.msg
}

func handshakeError(peerRejected bool, he *handshake.Error) *HandshakeError {
	return &HandshakeError{PeerRejected: peerRejected, Reason: RejectReason(he.Reason),
		Offered: int(he.Offered), Speaks: int(he.Speaks), msg: he.Error()}
}

// peerError is the error of a connection the peer, or the transport, ended:
// it matches syscall.ECONNRESET (the peer went away without closing) or
// syscall.EPIPE (writing after the peer closed), as the TCP errors do, and
// keeps the DAT-level cause.
type peerError struct {
	errno syscall.Errno
	cause error
}

func (e *peerError) Error() string {
	if e.cause == nil {
		return e.errno.Error()
	}
	return e.errno.Error() + " (" + e.cause.Error() + ")"
}

// Timeout reports whether the peer went silent (ETIMEDOUT), as the error
// of a TCP connection that keepalive gave up says, so that a
// *net.OpError wrapping it is a net.Error with Timeout() true there too.
func (e *peerError) Timeout() bool { return e.errno == syscall.ETIMEDOUT }

func (e *peerError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.errno}
	}
	return []error{e.errno, e.cause}
}

// brokenErrno is the errno of a connection the transport broke with
// cause: ETIMEDOUT when the peer went silent (keepalive gave it up, the
// transport's retries ran out), as a TCP connection reports it, and
// ECONNRESET otherwise.
func brokenErrno(cause error) syscall.Errno {
	if errors.Is(cause, syscall.ETIMEDOUT) {
		return syscall.ETIMEDOUT
	}
	return syscall.ECONNRESET
}

var (
	errReset        = &peerError{errno: syscall.ECONNRESET}
	errPeerClosed   = &peerError{errno: syscall.EPIPE}
	errWriteShut    = errors.New("write after CloseWrite")
	errNotConnected = errors.New("connection not established")
)

// ErrNotDialed is returned by Dup on a connection that was accepted rather
// than dialed: DAT's dup_connect reconnects to the peer's port, which only
// means something for the side that dialed.
var ErrNotDialed = errors.New("rdmanet: Dup needs a dialed connection")

// errProtocol reports a peer that broke the rdmanet protocol.
func errProtocol(format string, args ...any) error {
	return fmt.Errorf("rdmanet: protocol violation by peer: "+format, args...)
}

// contextError maps a context error to what a dial or listen reports:
// errTimeout for an expired deadline.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errTimeout
	}
	return err
}

// timeoutError is the error of a dial (or listen) whose time ran out. It
// is what package net's dial timeout is, a net.Error with Timeout() true
// that matches context.DeadlineExceeded, and it also matches
// os.ErrDeadlineExceeded, which rdmanet's Read and Write deadlines
// return, so that one errors.Is test catches every timeout of a Conn.
type timeoutError struct{}

func (*timeoutError) Error() string   { return "i/o timeout" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return true }

// Is makes errors.Is match context.DeadlineExceeded and
// os.ErrDeadlineExceeded.
func (*timeoutError) Is(target error) bool {
	return target == context.DeadlineExceeded || target == os.ErrDeadlineExceeded
}

var errTimeout error = &timeoutError{}

// connectError turns a failed-establishment event into the dial error.
func connectError(ev *dat.Event) error {
	switch ev.Number {
	case dat.ConnectionEventPeerRejected:
		if r, ok := handshake.ParseReject(ev.Conn.PrivateData); ok {
			return handshakeError(true, r.Err())
		}
		return &peerError{errno: syscall.ECONNREFUSED, cause: errors.New("rejected by the peer")}
	case dat.ConnectionEventNonPeerRejected:
		if errors.Is(ev.Conn.Err, driver.ErrResources) {
			// The provider could not set the connection up on this side
			// (a QP it could not create, say): a local failure, with the
			// provider's errno in the chain, not a refusal by the peer.
			return fmt.Errorf("rdmanet: setting up the connection on this side failed: %w", ev.Conn.Err)
		}
		var ce *controlError
		if errors.As(ev.Conn.Err, &ce) {
			// The Dialer's own Control refused the socket: the dial
			// fails with its error, as net.Dialer's does.
			return ce.err
		}
		return &peerError{errno: syscall.ECONNREFUSED, cause: ev.Conn.Err}
	case dat.ConnectionEventUnreachable:
		return &peerError{errno: syscall.EHOSTUNREACH, cause: ev.Conn.Err}
	case dat.ConnectionEventTimedOut:
		return errTimeout // the dial's time, given to Connect, ran out
	}
	if ev.Conn.Err != nil {
		return fmt.Errorf("%v: %w", ev.Number, ev.Conn.Err)
	}
	return fmt.Errorf("connection failed: %v", ev.Number)
}
