//go:build verbs && linux && cgo

package interop_test

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every goroutine either provider starts (connection goroutines, CM and
// completion channel readers, listeners) must be gone once the tests have
// closed their IAs.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// siwAddrEnv names the guest's soft-iWARP address; test/vm/run.sh sets it.
const siwAddrEnv = "RDMA_SIW_ADDR"

// eventWait bounds every wait for an event. The guest runs under TCG,
// five to ten times slower than the host, and kernel siw gives up on an
// MPA exchange only after 10 s, so a shorter bound would misreport a
// slow answer as a missing one.
const eventWait = 20 * time.Second

// siwAddr returns the address of the guest's siw0 interface, on which both
// IAs are opened, or skips the test outside the test VM.
func siwAddr(t testing.TB) netip.Addr {
	t.Helper()
	v := os.Getenv(siwAddrEnv)
	if v == "" {
		t.Skip(siwAddrEnv + " is not set: the interop tests need the kernel's soft-iWARP device siw0, " +
			"which only the test VM has (test/vm/run.sh or test/vm/suite.sh set it)")
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		t.Fatalf("%s=%q is not an IP address: %v", siwAddrEnv, v, err)
	}
	return a
}
