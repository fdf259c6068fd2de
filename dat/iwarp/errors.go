package iwarp

import (
	"errors"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// ErrAborted reports that a connection attempt (Connect or Request.Accept)
// was cut short by a local Disconnect or Close of the QP, or that a
// request was refused because its listener closed.
var ErrAborted = errors.New("iwarp: connection establishment aborted locally")

// errInvalidState is wrapped around driver.ErrNotConnected (which package
// dat maps to DAT_INVALID_STATE) with the offending state named.
func errInvalidState(op string, s qpState) error {
	return &stateError{op: op, state: s}
}

type stateError struct {
	op    string
	state qpState
}

func (e *stateError) Error() string {
	return "iwarp: " + e.op + ": QP is " + e.state.String() + ": " + driver.ErrNotConnected.Error()
}

func (e *stateError) Unwrap() error { return driver.ErrNotConnected }

// isUnreachable reports socket errors that DAT calls UNREACHABLE: no route,
// or no answer at all at the TCP level (ETIMEDOUT from connect is the
// kernel giving up on SYN retransmissions).
func isUnreachable(err error) bool {
	return errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTDOWN) ||
		errors.Is(err, syscall.ENETDOWN) ||
		errors.Is(err, syscall.ETIMEDOUT)
}
