//go:build !linux

package iwarp

import "net"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available:
// keepalive alone watches an idle connection there.
func setUserTimeout(*net.TCPConn, net.KeepAliveConfig) {}
