package rdmanet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
)

// Logging. Dialer.Logger and ListenConfig.Logger receive the life-cycle
// records of the connections they make: dialed, accepted and closed at
// Debug; failures at Info, each with a short "reason" attribute (see
// failureReason) besides the error, so that a handler can filter on it.
// Nothing is logged on the data path: a record is written when a
// connection is made, fails or ends, never per Read, Write or message.

// logger returns l, or slog.Default() when l is nil. It is looked up at
// each record, so that slog.SetDefault after the dial still applies.
func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

func (c *Conn) logger() *slog.Logger { return logger(c.log) }

// logAttrs are the attributes that identify c in a record, then extra.
func (c *Conn) logAttrs(extra ...slog.Attr) []slog.Attr {
	a := make([]slog.Attr, 0, 4+len(extra))
	a = append(a, slog.Uint64("conn", c.id), slog.String("local", c.laddr.String()),
		slog.String("remote", c.raddr.String()), slog.String("ia", c.ia.name))
	return append(a, extra...)
}

// logInfo and logDebug write a record about c with its identifying
// attributes.
func (c *Conn) logInfo(msg string, extra ...slog.Attr) {
	c.logger().LogAttrs(context.Background(), slog.LevelInfo, msg, c.logAttrs(extra...)...)
}

func (c *Conn) logDebug(msg string, extra ...slog.Attr) {
	l := c.logger()
	if l.Enabled(context.Background(), slog.LevelDebug) {
		l.LogAttrs(context.Background(), slog.LevelDebug, msg, c.logAttrs(extra...)...)
	}
}

// failureReason classifies a failure for the "reason" attribute of a log
// record: "handshake rejected" (the peer refused our Hello), "bad
// handshake" (we could not use the peer's), "timeout", "refused",
// "unreachable", "peer reset", "canceled", "closed", or "error".
func failureReason(err error) string {
	var he *HandshakeError
	var ne net.Error
	switch {
	case errors.As(err, &he) && he.PeerRejected:
		return "handshake rejected"
	case errors.As(err, &he):
		return "bad handshake"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "peer reset"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	return "error"
}
