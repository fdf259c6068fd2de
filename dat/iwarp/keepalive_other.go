//go:build !linux

package iwarp

import "net"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available:
// keepalive alone watches an idle connection there.
func setUserTimeout(*net.TCPConn, net.KeepAliveConfig) {}

// inheritKeepAlive reports false: whether accepted connections inherit a
// listening socket's keepalive settings is not known here, so admission
// sets them on each connection it hands on.
func inheritKeepAlive(net.Listener, net.KeepAliveConfig) bool { return false }
