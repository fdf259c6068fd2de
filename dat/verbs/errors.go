//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// ErrAborted reports that a connection attempt (Connect or Request.Accept)
// was cut short by a local Disconnect or Close of the QP.
var ErrAborted = errors.New("verbs: connection establishment aborted locally")

// errIAClosed is returned by every creation call after Close.
var errIAClosed = fmt.Errorf("verbs: IA closed: %w", net.ErrClosed)

// stateError wraps driver.ErrNotConnected (DAT_INVALID_STATE) with the
// offending state named.
type stateError struct {
	op    string
	state qpState
}

func (e *stateError) Error() string {
	return "verbs: " + e.op + ": QP is " + e.state.String() + ": " + driver.ErrNotConnected.Error()
}

func (e *stateError) Unwrap() error { return driver.ErrNotConnected }

func errInvalidState(op string, s qpState) error { return &stateError{op: op, state: s} }

// isUnreachable reports errnos that DAT calls UNREACHABLE.
func isUnreachable(err error) bool {
	return errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTDOWN) ||
		errors.Is(err, syscall.ENETDOWN) ||
		errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EADDRNOTAVAIL)
}

// postError maps an ibv_post_* failure.
func postError(op string, err error) error {
	if errors.Is(err, syscall.ENOMEM) {
		return fmt.Errorf("verbs: %s: %v: %w", op, err, driver.ErrQueueFull)
	}
	return fmt.Errorf("verbs: %s: %w", op, err)
}
