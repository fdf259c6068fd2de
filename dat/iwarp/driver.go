package iwarp

import (
	"context"
	"fmt"
	"net"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Driver is the iWARP provider. Its zero value is ready to use; the
// package registers it as "iwarp" (see IA's init), so importing the
// package, for its side effect if nothing else, makes it available.
type Driver struct{}

var _ driver.Driver = Driver{}

// Open opens an IA. args are described in the package documentation: an
// optional local address followed by key=value options.
func (Driver) Open(ctx context.Context, args []string) (driver.IA, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("iwarp: open: %w", err)
	}
	o, err := parseOptions(args)
	if err != nil {
		return nil, err
	}
	if o.ip != nil {
		// Probe the address now so a typo in dat.conf fails dat_ia_open
		// rather than every later listen and connect.
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.ip.String(), "0"))
		if err != nil {
			return nil, fmt.Errorf("iwarp: IA address %s is not usable: %v: %w", o.ip, err, driver.ErrInvalidAddress)
		}
		ln.Close()
	}
	return newIA(o), nil
}
