package rdmanet

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/dat/driver"
)

// A connection the provider could not set up on this side (its QP could
// not be created, say) fails the dial with that local error and its
// errno, not as a refusal by the peer; a provider's refusal that is not
// about local resources stays ECONNREFUSED.
func TestLocalSetupError(t *testing.T) {
	local := fmt.Errorf("verbs: connect 192.0.2.1:7: rdma_create_qp(65/32 send/receive WRs, 2/1 SGEs): %w: %w", syscall.ENOMEM, driver.ErrResources)
	err := connectError(&dat.Event{Number: dat.ConnectionEventNonPeerRejected, Conn: dat.ConnectionData{Err: local}})
	if !errors.Is(err, syscall.ENOMEM) || !errors.Is(err, driver.ErrResources) {
		t.Errorf("local failure: %v: the errno and ErrResources must be in the chain", err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || dialFallbackReason(err) == ReasonNoListener {
		t.Errorf("local failure: %v reads as a refusal", err)
	}

	refused := errors.New("iwarp: connection reset by peer")
	err = connectError(&dat.Event{Number: dat.ConnectionEventNonPeerRejected, Conn: dat.ConnectionData{Err: refused}})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("non-peer reject: %v, want ECONNREFUSED", err)
	}
}
