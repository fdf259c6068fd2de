//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// These run on any host that builds the package: no device needed.

// A shim result maps to the errno it carries, and the "no errno" result
// to ErrNoErrno, never to a number.
func TestRCError(t *testing.T) {
	if err := rcError(0); err != nil {
		t.Fatalf("rcError(0) = %v", err)
	}
	if err := rcError(-int(syscall.ENOMEM)); err != syscall.ENOMEM {
		t.Fatalf("rcError(-ENOMEM) = %v", err)
	}
	err := rcError(noErrnoRC)
	if !errors.Is(err, ErrNoErrno) {
		t.Fatalf("rcError(noErrnoRC) = %v, want ErrNoErrno", err)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		t.Fatalf("rcError(noErrnoRC) carries errno %d", errno)
	}
}

// A call that fails without setting errno is reported as such, not with
// the errno an earlier call on the thread left behind.
func TestSilentFailureIgnoresStaleErrno(t *testing.T) {
	err := silentFailure(syscall.EBUSY)
	if !errors.Is(err, ErrNoErrno) || errors.Is(err, syscall.EBUSY) {
		t.Fatalf("silent failure after EBUSY: %v, want ErrNoErrno", err)
	}
}

// A local failure keeps its errno in the chain and reads as a resource
// problem of this side, never as a refused connection.
func TestLocalError(t *testing.T) {
	for _, cause := range []error{syscall.ENOMEM, syscall.EINVAL, ErrNoErrno} {
		err := localError("rdma_create_qp", cause)
		if !errors.Is(err, cause) || !errors.Is(err, driver.ErrResources) {
			t.Errorf("localError(%v) = %v: want both the cause and ErrResources in the chain", cause, err)
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, driver.ErrUnreachable) {
			t.Errorf("localError(%v) = %v reads as the peer's or the network's", cause, err)
		}
	}
	if s := localError("ibv_create_cq(64)", ErrNoErrno).Error(); s != "ibv_create_cq(64): the provider failed without an errno: insufficient resources" {
		t.Errorf("message %q", s)
	}
}
