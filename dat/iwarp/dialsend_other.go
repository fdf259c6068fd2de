//go:build !linux

package iwarp

import (
	"context"
	"errors"
	"net"
)

// errNoQuickDial says that dialSending leaves a connection to net.Dialer.
var errNoQuickDial = errors.New("iwarp: no quick dial for this connection")

// dialSending is Linux's quick connect (see dialsend_linux.go); elsewhere
// every connection is dialed through net.Dialer.
func dialSending(context.Context, *net.TCPAddr, *net.TCPAddr, []byte, net.KeepAliveConfig) (*net.TCPConn, error) {
	return nil, errNoQuickDial
}
