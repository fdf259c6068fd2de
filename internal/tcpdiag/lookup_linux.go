//go:build linux

package tcpdiag

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// lastSeq numbers requests, so that a reply is matched to its request.
var lastSeq atomic.Uint32

// Lookup returns what the kernel reports of the TCP connection from local
// to remote, in the calling thread's network namespace. It fails with
// ErrNotFound if there is no such connection, and with the errno of the
// netlink socket where sock_diag is unavailable (for example a kernel
// without inet_diag).
func Lookup(local, remote netip.AddrPort) (Info, error) {
	seq := lastSeq.Add(1)
	req, err := AppendRequest(make([]byte, 0, nlmsgHdrLen+reqLen), seq, local, remote)
	if err != nil {
		return Info{}, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return Info{}, fmt.Errorf("tcpdiag: netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return Info{}, fmt.Errorf("tcpdiag: send: %w", err)
	}
	// One inet_diag_msg with tcp_info fits many times over; a reply that
	// does not fit comes back truncated (MSG_TRUNC), which ParseReply
	// then refuses as cut short.
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Info{}, fmt.Errorf("tcpdiag: receive: %w", err)
		}
		return ParseReply(buf[:n], seq)
	}
}
