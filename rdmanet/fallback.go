package rdmanet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TCP fallback. As with SMC-R, a connection that could not be RDMA
// becomes a plain TCP connection that says why: Dial (Dialer.FallbackTCP)
// and Accept (ListenConfig.FallbackTCP) return it as a *FallbackConn
// whose Reason is one of the FallbackReasons, each fallback is counted by
// reason for the whole process (Listing.Fallbacks) and logged at Info.

// FallbackReason says why a connection is plain TCP rather than RDMA.
type FallbackReason uint8

// Fallback reasons.
const (
	// ReasonOther: the RDMA dial failed in a way none of the other
	// reasons describes (say an unreachable host, or a handshake the
	// server refused for lack of resources).
	ReasonOther FallbackReason = iota
	// ReasonNoListener: nothing listens for RDMA at the address (the
	// connection was refused).
	ReasonNoListener
	// ReasonNotRDMAPeer: the server answered the connection request with
	// something else: it speaks another protocol on that port.
	ReasonNotRDMAPeer
	// ReasonTimedOut: the server did not answer the connection request
	// within the time the dial gives RDMA (see Dialer.FallbackTCP).
	ReasonTimedOut
	// ReasonNoDevice: no usable interface adapter (the IA could not be
	// opened: no such provider or device).
	ReasonNoDevice
	// ReasonVersion: the server is an rdmanet listener that does not
	// speak this side's protocol version.
	ReasonVersion
	// ReasonPeerIsTCP: on a listener, the client is a plain TCP client.
	ReasonPeerIsTCP

	numReasons
)

var reasonNames = [numReasons]string{
	ReasonOther:       "other",
	ReasonNoListener:  "no-listener",
	ReasonNotRDMAPeer: "not-rdma-peer",
	ReasonTimedOut:    "timed-out",
	ReasonNoDevice:    "no-device",
	ReasonVersion:     "version",
	ReasonPeerIsTCP:   "peer-is-tcp",
}

// String names the reason in one word, as log records and
// Listing.Fallbacks do: "no-listener", "not-rdma-peer", "timed-out",
// "no-device", "version", "peer-is-tcp" or "other".
func (r FallbackReason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "other"
}

// fallbacks counts the process's fallback connections by reason.
var fallbacks [numReasons]atomic.Uint64

// fallbackCounts returns the counts by reason name, every reason
// included, so that a monitor sees the same keys whatever happened.
func fallbackCounts() map[string]uint64 {
	m := make(map[string]uint64, numReasons)
	for r := range numReasons {
		m[r.String()] = fallbacks[r].Load()
	}
	return m
}

// FallbackConn is a plain TCP connection returned where an rdmanet
// connection was asked for: by a Dialer with FallbackTCP whose RDMA dial
// failed, and by Accept on a listener with FallbackTCP for a TCP client.
// It is a net.Conn; Reason and Err say why it is not RDMA.
type FallbackConn struct {
	// Conn is the TCP connection (on a listener, a wrapper that replays
	// the bytes the provider read to tell TCP from RDMA).
	net.Conn
	// Reason is why the connection is TCP.
	Reason FallbackReason
	// Err is the RDMA dial's error on a dialed connection; nil on an
	// accepted one.
	Err error
}

// CloseWrite shuts down the writing side, as TCPConn.CloseWrite does.
func (c *FallbackConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return &net.OpError{Op: "close", Net: c.LocalAddr().Network(), Err: errors.ErrUnsupported}
}

// CloseRead shuts down the reading side, as TCPConn.CloseRead does.
func (c *FallbackConn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return &net.OpError{Op: "close", Net: c.LocalAddr().Network(), Err: errors.ErrUnsupported}
}

// ReadFrom keeps the TCP connection's fast path (splice, sendfile) for
// io.Copy into the connection, which the embedded interface would hide.
func (c *FallbackConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// WriteTo keeps the TCP connection's fast path for io.Copy out of the
// connection.
func (c *FallbackConn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{c.Conn})
}

// dialFallbackReason classifies the error of a failed RDMA dial. The
// provider's "not an RDMA peer" is a refusal too, so it is tested first.
func dialFallbackReason(err error) FallbackReason {
	var he *HandshakeError
	var nd *noDeviceError
	switch {
	case errors.As(err, &nd):
		return ReasonNoDevice
	case errors.Is(err, driver.ErrNotRDMAPeer):
		return ReasonNotRDMAPeer
	case errors.As(err, &he) && he.Reason == RejectVersion:
		return ReasonVersion
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimedOut
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonNoListener
	}
	return ReasonOther
}

// noDeviceError marks a dial that failed because its IA could not be
// opened; it reads as the IA's error.
type noDeviceError struct{ err error }

func (e *noDeviceError) Error() string { return e.err.Error() }
func (e *noDeviceError) Unwrap() error { return e.err }

// countFallback counts and logs a fallback connection.
func countFallback(log *slog.Logger, c *FallbackConn, attrs ...slog.Attr) {
	fallbacks[c.Reason].Add(1)
	logFallback(log, c, attrs...)
}

// logFallback writes the Info record of a fallback connection.
func logFallback(log *slog.Logger, c *FallbackConn, attrs ...slog.Attr) {
	a := append([]slog.Attr{slog.String("reason", c.Reason.String()),
		slog.String("local", c.LocalAddr().String()), slog.String("remote", c.RemoteAddr().String())}, attrs...)
	if c.Err != nil {
		a = append(a, slog.String("rdma_error", c.Err.Error()))
	}
	msg := "rdmanet: dial fell back to TCP"
	if c.Reason == ReasonPeerIsTCP {
		msg = "rdmanet: accepted a TCP client"
	}
	logger(log).LogAttrs(context.Background(), slog.LevelInfo, msg, a...)
}
