//go:build linux

package iwarp

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT (linux/tcp.h), which package syscall
// does not name.
const tcpUserTimeout = 0x12

// setUserTimeout bounds how long data may stay unacknowledged on tc by
// the time TCP keepalive takes to give up a silent peer: Idle + Interval ×
// Count of the socket's keepalive, as package net set it from ka (fields
// ka leaves to the system are read back from the socket, so that they
// count as the system's). TCP sends no
// keepalive probe while data is in flight, and without it a peer that
// vanished under a blocked writer would be retransmitted to for the
// system's tcp_retries2 (about 15 minutes). With keepalive on, Linux also
// uses this bound for the keepalive verdict itself, which it equals.
func setUserTimeout(tc *net.TCPConn, ka net.KeepAliveConfig) {
	if !ka.Enable {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		// The socket holds what package net set from ka, in whole
		// seconds rounded up; only a field ka left to the system
		// (negative) has to be read back, which saves a connection's
		// setup three system calls in the usual case.
		idle, err1 := keepAliveSecs(fd, ka.Idle, syscall.TCP_KEEPIDLE)
		intvl, err2 := keepAliveSecs(fd, ka.Interval, syscall.TCP_KEEPINTVL)
		cnt, err3 := ka.Count, error(nil)
		if cnt < 0 {
			cnt, err3 = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
		}
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		d := time.Duration(idle+intvl*cnt) * time.Second
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d/time.Millisecond))
	})
}

// keepAliveSecs is the socket's value of the keepalive option opt that
// package net set from d: d in seconds, rounded up as net rounds it, or
// the system's value read back from fd when d is negative.
func keepAliveSecs(fd uintptr, d time.Duration, opt int) (int, error) {
	if d < 0 {
		return syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, opt)
	}
	return ceilSecs(d), nil
}

// ceilSecs is d in whole seconds, rounded up as package net rounds the
// keepalive times it sets.
func ceilSecs(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// inheritKeepAlive gives the listening socket of l the keepalive ka
// (resolved, enabled), as package net would set it on each accepted
// connection, and reports whether it did. Linux copies a listening
// socket's keepalive settings to the connections accepted from it, so
// admission then need not set them (four system calls) on the
// connections it hands on, each of them on the way to answering an MPA
// Request; and the connections it drops cost nothing more for having
// them. A field of ka left to the system (negative) is left as the
// system has it on the listener, which is what a connection gets.
func inheritKeepAlive(l net.Listener, ka net.KeepAliveConfig) bool {
	tl, ok := l.(*net.TCPListener)
	if !ok {
		return false
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	set := func(fd uintptr, level, opt int, v int) {
		if serr == nil {
			serr = syscall.SetsockoptInt(int(fd), level, opt, v)
		}
	}
	if err := rc.Control(func(fd uintptr) {
		set(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1)
		if ka.Idle >= 0 {
			set(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, ceilSecs(ka.Idle))
		}
		if ka.Interval >= 0 {
			set(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, ceilSecs(ka.Interval))
		}
		if ka.Count >= 0 {
			set(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, ka.Count)
		}
	}); err != nil || serr != nil {
		return false
	}
	return true
}
