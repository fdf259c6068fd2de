package dat

import (
	"errors"
	"fmt"
)

// Error is a failed DAT call. It carries the DAT_RETURN code, the operation
// that failed and, when a lower layer caused it, that layer's error.
//
// errors.Is matches an *Error against the exported sentinels by type, and
// also by subtype when the sentinel has one:
//
//	errors.Is(err, dat.ErrInvalidState)  // any DAT_INVALID_STATE
//	errors.Is(err, dat.ErrPZInUse)       // only DAT_INVALID_STATE/PZ_IN_USE
type Error struct {
	// Code is the DAT_RETURN value.
	Code Return
	// Op names the DAT call, e.g. "dat_ep_connect".
	Op string
	// Detail says what was wrong, in words.
	Detail string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	s := e.Code.String()
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a DAT error of the same type and, if the
// target names a subtype, the same subtype.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Code.Type() != e.Code.Type() {
		return false
	}
	return t.Code.Subtype() == NoSubtype || t.Code.Subtype() == e.Code.Subtype()
}

// Code returns the DAT_RETURN carried by err: Success for nil, and
// InternalError for an error that is not a DAT error.
func Code(err error) Return {
	if err == nil {
		return Success
	}
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	return ClassError | InternalError
}

// newError builds an *Error with class ERROR set.
func newError(op string, t Return, sub Subtype, format string, args ...any) *Error {
	return &Error{Code: ClassError | t | Return(sub), Op: op, Detail: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is. Each matches every subtype of its type.
var (
	ErrAbort                 = &Error{Code: ClassError | Abort}
	ErrConnQualInUse         = &Error{Code: ClassError | ConnQualInUse}
	ErrInsufficientResources = &Error{Code: ClassError | InsufficientResources}
	ErrInternal              = &Error{Code: ClassError | InternalError}
	ErrInvalidHandle         = &Error{Code: ClassError | InvalidHandle}
	ErrInvalidParameter      = &Error{Code: ClassError | InvalidParameter}
	ErrInvalidState          = &Error{Code: ClassError | InvalidState}
	ErrLengthError           = &Error{Code: ClassError | LengthError}
	ErrModelNotSupported     = &Error{Code: ClassError | ModelNotSupported}
	ErrProviderNotFound      = &Error{Code: ClassError | ProviderNotFound}
	ErrPrivilegesViolation   = &Error{Code: ClassError | PrivilegesViolation}
	ErrProtectionViolation   = &Error{Code: ClassError | ProtectionViolation}
	ErrQueueEmpty            = &Error{Code: ClassError | QueueEmpty}
	ErrQueueFull             = &Error{Code: ClassError | QueueFull}
	ErrTimeoutExpired        = &Error{Code: ClassError | TimeoutExpired}
	ErrInvalidAddress        = &Error{Code: ClassError | InvalidAddress}
	ErrInterruptedCall       = &Error{Code: ClassError | InterruptedCall}
	ErrNotImplemented        = &Error{Code: ClassError | NotImplemented}
)

// Sentinels that also name a subtype.
var (
	ErrPZInUse    = &Error{Code: ClassError | InvalidState | Return(StatePZInUse)}
	ErrEVDInUse   = &Error{Code: ClassError | InvalidState | Return(StateEVDInUse)}
	ErrSRQInUse   = &Error{Code: ClassError | InvalidState | Return(StateSRQInUse)}
	ErrLMRInUse   = &Error{Code: ClassError | InvalidState | Return(StateLMRInUse)}
	ErrIAInUse    = &Error{Code: ClassError | InvalidState | Return(StateIAInUse)}
	ErrEPNotReady = &Error{Code: ClassError | InvalidState | Return(StateEPNotReady)}
)
