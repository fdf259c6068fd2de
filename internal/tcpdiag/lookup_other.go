//go:build !linux

package tcpdiag

import (
	"errors"
	"net/netip"
)

// A Socket asks Linux's sock_diag about TCP connections; elsewhere its
// lookups fail with errors.ErrUnsupported. The zero Socket is ready.
type Socket struct{}

// Lookup fails with errors.ErrUnsupported: sock_diag is Linux's.
func (s *Socket) Lookup(local, remote netip.AddrPort) (Info, error) {
	return Info{}, errors.ErrUnsupported
}

// Close does nothing: there is no socket to close.
func (s *Socket) Close() error { return nil }

// Lookup needs Linux's sock_diag; elsewhere it fails with
// errors.ErrUnsupported.
func Lookup(local, remote netip.AddrPort) (Info, error) {
	return Info{}, errors.ErrUnsupported
}
