//go:build verbs && linux && cgo

package verbs

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
)

// Driver is the verbs provider. Its zero value is ready to use. The
// package registers it as "verbs" when imported, so a program built with
// -tags verbs gets the provider by importing it (for the side effect if
// it uses nothing else of it).
type Driver struct{}

var (
	_ driver.Driver       = Driver{}
	_ driver.ConfigOpener = Driver{}
)

func init() { driver.Register("verbs", Driver{}) }

// Open opens an IA on the RDMA device that owns a local address. args[0]
// is an IP literal or a network interface name (its first IPv4 address,
// else its first global IPv6 one), as in DAPL's dat.conf "rxe_if0 0"; a
// following numeric argument (DAPL's port) is accepted and ignored, since
// the address already selects the device and port. It is OpenWith with
// only the arguments.
func (d Driver) Open(ctx context.Context, args []string) (driver.IA, error) {
	return d.OpenWith(ctx, driver.OpenConfig{Args: args})
}

// OpenWith opens an IA as Open does, with cfg.Args as its arguments; the
// IA's diagnostics go to cfg.Logger at Debug level (see log.go).
func (Driver) OpenWith(ctx context.Context, cfg driver.OpenConfig) (driver.IA, error) {
	args := cfg.Args
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("verbs: open: %w", err)
	}
	if len(args) == 0 || args[0] == "" {
		return nil, fmt.Errorf("verbs: open: need a local address or interface name: %w", driver.ErrInvalidAddress)
	}
	for _, a := range args[1:] {
		if _, err := strconv.Atoi(a); err != nil {
			return nil, fmt.Errorf("verbs: open: unknown argument %q (only a numeric port may follow the address)", a)
		}
	}
	ip, err := resolveIAAddr(args[0])
	if err != nil {
		return nil, err
	}
	ia, err := openIA(ip, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if ia.attr.MaxSRQWR > 0 {
		return srqIA{ia}, nil
	}
	return ia, nil
}

// resolveIAAddr turns an IP literal or interface name into the IA address.
func resolveIAAddr(s string) (net.IP, error) {
	ip, err := provkit.InterfaceIP(s)
	if err != nil {
		return nil, fmt.Errorf("verbs: open %s: %w", s, err)
	}
	if ip.IsUnspecified() {
		return nil, fmt.Errorf("verbs: open %s: an IA needs a specific address: %w", s, driver.ErrInvalidAddress)
	}
	return ip, nil
}
