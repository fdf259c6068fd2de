package iwarp_test

import (
	"context"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/driver/drivertest"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// TestConformance holds the provider to the dat/driver contract with the
// shared conformance suite, on two IAs bound to the loopback address.
func TestConformance(t *testing.T) {
	open := func(ctx context.Context) (driver.IA, error) {
		return iwarp.Driver{}.Open(ctx, []string{"127.0.0.1"})
	}
	drivertest.Run(t, drivertest.Config{
		OpenPassive:    open,
		OpenActive:     open,
		RequireSRQ:     true,
		RequireWindows: true,
	})
}
