//go:build !linux

package tcpdiag

import (
	"errors"
	"net/netip"
)

// Lookup needs Linux's sock_diag; elsewhere it fails with
// errors.ErrUnsupported.
func Lookup(local, remote netip.AddrPort) (Info, error) {
	return Info{}, errors.ErrUnsupported
}
