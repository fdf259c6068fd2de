//go:build verbs && linux && cgo

package verbs_test

import (
	"context"
	"os"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/driver/drivertest"
	"github.com/rdmanet/rdmanet/dat/verbs"
)

// TestConformance holds the provider to the dat/driver contract with the
// shared conformance suite, on each kernel RDMA device of the test VM
// (test/vm): soft-RoCE rxe0 and soft-iWARP siw0. Both IAs of a run open
// the same device address. Outside the VM there is no device: it skips.
func TestConformance(t *testing.T) {
	if os.Getenv("IN_RDMA_VM") != "1" {
		t.Skip("needs the RDMA test VM with rxe0 and siw0: build with `go test -c -tags verbs` and run the binary via test/vm/run.sh (IN_RDMA_VM=1)")
	}
	// What soft-iWARP cannot pass, and why.
	siwKnown := map[string]string{
		"Connect/RejectWithPrivateData": "the kernel's iWARP CM delivers a reject without private data exactly like a TCP reset, so an empty peer reject is reported as a non-peer reject",
	}
	for _, d := range []struct {
		name, addr string
		padded     bool
		known      map[string]string
	}{
		// The InfiniBand CM, which RoCE uses, delivers private data
		// zero-padded to the message's fixed size.
		{"rxe", os.Getenv("RDMA_RXE_ADDR"), true, nil},
		{"siw", os.Getenv("RDMA_SIW_ADDR"), false, siwKnown},
	} {
		t.Run(d.name, func(t *testing.T) {
			if d.addr == "" {
				t.Fatalf("the VM set no address for %s", d.name)
			}
			open := func(ctx context.Context) (driver.IA, error) {
				return verbs.Driver{}.Open(ctx, []string{d.addr})
			}
			drivertest.Run(t, drivertest.Config{
				OpenPassive:       open,
				OpenActive:        open,
				PaddedPrivateData: d.padded,
				Known:             d.known,
				// The guest runs under TCG emulation: doubled timeouts
				// and quiet periods keep the run inside the package's
				// time limit while leaving room for slow devices.
				Slowdown: 2,
			})
		})
	}
}
