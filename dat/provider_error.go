package dat

import (
	"context"
	"errors"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// providerError turns an error from a provider into a DAT error, keeping
// the provider's error as the cause.
func providerError(op string, err error) error {
	var de *Error
	if errors.As(err, &de) {
		return err
	}
	code := ClassError | InternalError
	switch {
	case errors.Is(err, driver.ErrPortInUse):
		code = ClassError | ConnQualInUse
	case errors.Is(err, driver.ErrNotSupported):
		code = ClassError | ModelNotSupported
	case errors.Is(err, driver.ErrResources), errors.Is(err, driver.ErrQueueFull):
		code = ClassError | InsufficientResources
	case errors.Is(err, driver.ErrNotConnected):
		code = ClassError | InvalidState
	case errors.Is(err, driver.ErrInvalidAddress):
		code = ClassError | InvalidAddress
	case errors.Is(err, driver.ErrAccessRefused):
		code = ClassError | PrivilegesViolation
	case errors.Is(err, driver.ErrUnreachable):
		code = ClassError | InvalidAddress | Return(AddressUnreachable)
	case errors.Is(err, context.DeadlineExceeded):
		code = ClassError | TimeoutExpired
	case errors.Is(err, context.Canceled):
		code = ClassError | InterruptedCall
	}
	return &Error{Code: code, Op: op, Err: err}
}
