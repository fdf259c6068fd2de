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

// ErrNoErrno is the cause reported for a verbs call that failed without
// setting errno. libsiw does that when it refuses a queue whose mmap key
// is the value it takes for invalid (see doc.go, "siw and the mmap key
// 0x90000"); reporting errno instead would name whatever an earlier call
// on the thread left there.
var ErrNoErrno = errors.New("the provider failed without an errno")

// localError reports a verbs call that failed on this host: the device,
// the kernel or the provider library would not create what was asked
// (QP, CQ, memory registration...). It wraps the cause (a syscall.Errno,
// or ErrNoErrno) and driver.ErrResources, so that both errors.Is(err,
// syscall.ENOMEM) and package dat's INSUFFICIENT_RESOURCES mapping work,
// and it never reads as something the peer did.
func localError(call string, cause error) error {
	return fmt.Errorf("%s: %w: %w", call, cause, driver.ErrResources)
}

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
