//go:build !linux

package iwarp

import "net"

// A quickDial is Linux's quick connect (see dialsend_linux.go).
type quickDial struct {
	d    net.Dialer
	sent int
}

// newQuickDial is Linux's; elsewhere a dial waits for the connect, and
// the Request is written after it.
func newQuickDial(*net.Dialer, *net.TCPAddr, []byte) *quickDial { return nil }

func (q *quickDial) free() {}
