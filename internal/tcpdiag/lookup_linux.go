//go:build linux

package tcpdiag

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// replyTimeout bounds the wait for the kernel's answer. sock_diag answers
// a lookup within the request's sendto, so this only keeps a Socket's
// mutex from being held forever should an answer never come.
const replyTimeout = 5 * time.Second

// A Socket is a netlink sock_diag socket kept open for many lookups, so
// that a caller that asks often (a keeper per connection, every few
// seconds) does not pay a socket, a bind and a close per question. Its
// lookups are serialised by a mutex: one request is in flight at a time,
// so the next datagram on the socket is always its answer.
//
// The zero Socket is ready: it opens its netlink socket at the first
// Lookup, in the network namespace of the thread that calls it. Close
// releases it; a Socket is not used again after Close.
type Socket struct {
	mu     sync.Mutex
	fd     int // valid while open
	open   bool
	closed bool
	seq    uint32 // the last request's number
	req    []byte
	buf    []byte
}

// Lookup returns what the kernel reports of the TCP connection from local
// to remote. It fails with ErrNotFound if there is no such connection,
// with the errno of the netlink socket where sock_diag is unavailable (for
// example a kernel without inet_diag), and with an error wrapping
// net.ErrClosed after Close.
func (s *Socket) Lookup(local, remote netip.AddrPort) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Info{}, fmt.Errorf("tcpdiag: lookup: %w", net.ErrClosed)
	}
	s.seq++
	req, err := AppendRequest(s.req[:0], s.seq, local, remote)
	if err != nil {
		return Info{}, err
	}
	s.req = req
	if !s.open {
		if err := s.openLocked(); err != nil {
			return Info{}, err
		}
	}
	n, err := s.exchangeLocked(req)
	if err != nil {
		// What the socket holds is no longer known (an answer may
		// still come): start afresh at the next lookup.
		s.closeLocked()
		return Info{}, err
	}
	return ParseReply(s.buf[:n], s.seq)
}

// openLocked opens the netlink socket. Callers hold s.mu.
func (s *Socket) openLocked() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("tcpdiag: netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return fmt.Errorf("tcpdiag: netlink socket: receive timeout: %w", err)
	}
	if s.buf == nil {
		// One inet_diag_msg with tcp_info fits many times over; a
		// reply that does not fit comes back truncated (MSG_TRUNC),
		// which ParseReply then refuses as cut short.
		s.buf = make([]byte, 8192)
	}
	s.fd, s.open = fd, true
	return nil
}

// exchangeLocked sends req and receives the datagram that answers it,
// returning its length in s.buf. Callers hold s.mu.
func (s *Socket) exchangeLocked(req []byte) (int, error) {
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("tcpdiag: send: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("tcpdiag: receive: %w", err)
		}
		return n, nil
	}
}

// Close closes the netlink socket, if Lookup opened one, and makes later
// lookups fail. A lookup in progress finishes first.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.closeLocked()
}

// closeLocked closes the netlink socket if it is open. Callers hold s.mu.
func (s *Socket) closeLocked() error {
	if !s.open {
		return nil
	}
	s.open = false
	if err := unix.Close(s.fd); err != nil {
		return fmt.Errorf("tcpdiag: close: %w", err)
	}
	return nil
}

// Lookup is Socket.Lookup on a socket of its own, opened and closed for
// this one question: for callers that ask once, such as a probe of
// whether the kernel answers sock_diag at all.
func Lookup(local, remote netip.AddrPort) (Info, error) {
	var s Socket
	info, err := s.Lookup(local, remote)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return info, err
}
