// Package tcpdiag asks the kernel about one TCP connection: its state and
// what it last heard from the peer, from the tcp_info that sock_diag
// (netlink's NETLINK_SOCK_DIAG, the interface ss(8) uses) reports for a
// socket named by its four-tuple. It works for sockets the process has no
// descriptor for, such as the kernel sockets an iWARP device (siw) carries
// its connections on, which is what package verbs' keepalive needs it for.
//
// The codec (AppendRequest, ParseReply) is pure, apart from any socket,
// and ParseReply takes kernel input, so it is fuzzed (FuzzParseReply).
package tcpdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// Layout constants of the netlink and sock_diag ABI (linux/netlink.h,
// linux/sock_diag.h, linux/inet_diag.h, linux/tcp.h).
const (
	nlmsgHdrLen      = 16
	nlmsgError       = 2
	nlmsgDone        = 3
	nlmFRequest      = 0x1
	sockDiagByFamily = 20

	sockIDLen     = 48 // inet_diag_sockid
	reqLen        = 8 + sockIDLen
	diagMsgLen    = 4 + sockIDLen + 20 // inet_diag_msg
	inetDiagInfo  = 2                  // the attribute that carries struct tcp_info
	rtaHdrLen     = 4
	ipprotoTCP    = 6
	tcpInfoMinLen = 60 // through tcpi_last_ack_recv and tcpi_pmtu
)

// Info is what the kernel reports of one TCP connection.
type Info struct {
	// State is the TCP state (1 ESTABLISHED, ... as in linux/tcp_states.h).
	State uint8
	// Retransmits counts the retransmissions of the oldest unacknowledged
	// segment; Backoff is the retransmission timer's exponential backoff.
	Retransmits, Backoff uint8
	// Unacked is how many segments are sent and not yet acknowledged.
	Unacked uint32
	// LastDataRecv and LastAckRecv are how long ago the last data and the
	// last acknowledgement came from the peer (millisecond resolution).
	LastDataRecv, LastAckRecv time.Duration
}

// Established reports whether the connection is in TCP's ESTABLISHED state.
func (i Info) Established() bool { return i.State == 1 }

// ErrNotFound is returned when the kernel has no TCP socket with the
// four-tuple asked for.
var ErrNotFound = errors.New("tcpdiag: no such TCP connection")

// AppendRequest appends to b a netlink message that asks for the tcp_info
// of the TCP connection from local to remote (both of one address family),
// numbered seq.
func AppendRequest(b []byte, seq uint32, local, remote netip.AddrPort) ([]byte, error) {
	la, ra := local.Addr().Unmap(), remote.Addr().Unmap()
	if !la.IsValid() || !ra.IsValid() || la.Is4() != ra.Is4() {
		return b, fmt.Errorf("tcpdiag: addresses %v and %v are not of one family", local, remote)
	}
	family := uint8(syscall.AF_INET6)
	if la.Is4() {
		family = syscall.AF_INET
	}
	ne := binary.NativeEndian
	b = ne.AppendUint32(b, nlmsgHdrLen+reqLen)
	b = ne.AppendUint16(b, sockDiagByFamily)
	b = ne.AppendUint16(b, nlmFRequest)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0) // to the kernel
	// inet_diag_req_v2: family, protocol, extensions wanted, pad, states.
	b = append(b, family, ipprotoTCP, 1<<(inetDiagInfo-1), 0)
	b = ne.AppendUint32(b, ^uint32(0))
	return appendSockID(b, la, local.Port(), ra, remote.Port()), nil
}

// appendSockID appends an inet_diag_sockid: ports and addresses in network
// byte order, no interface, and the "no cookie" cookie, which makes the
// kernel look the socket up by its four-tuple alone.
func appendSockID(b []byte, la netip.Addr, lport uint16, ra netip.Addr, rport uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, lport)
	b = binary.BigEndian.AppendUint16(b, rport)
	b = appendAddr16(b, la)
	b = appendAddr16(b, ra)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = binary.NativeEndian.AppendUint32(b, ^uint32(0))
	return binary.NativeEndian.AppendUint32(b, ^uint32(0))
}

// appendAddr16 appends a as the 16 bytes of an inet_diag_sockid address:
// an IPv4 address in the first 4, the rest zero.
func appendAddr16(b []byte, a netip.Addr) []byte {
	var raw [16]byte
	if a.Is4() {
		v4 := a.As4()
		copy(raw[:], v4[:])
	} else {
		raw = a.As16()
	}
	return append(b, raw[:]...)
}

// ParseReply parses the kernel's answer to the request numbered seq. A
// reply that says the socket does not exist is ErrNotFound; another
// netlink error is its errno; a reply of another sequence number, or one
// that is cut short or malformed, is an error that says so.
func ParseReply(b []byte, seq uint32) (Info, error) {
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return Info{}, fmt.Errorf("tcpdiag: %d bytes left, short of a netlink header", len(b))
		}
		n := ne.Uint32(b)
		if n < nlmsgHdrLen || uint64(n) > uint64(len(b)) {
			return Info{}, fmt.Errorf("tcpdiag: netlink message of length %d in %d bytes", n, len(b))
		}
		typ, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		body := b[nlmsgHdrLen:n]
		b = b[min(len(b), nlmAlign(int(n))):]
		if mseq != seq {
			continue // an answer to an earlier request
		}
		switch typ {
		case nlmsgError:
			if len(body) < 4 {
				return Info{}, errors.New("tcpdiag: netlink error message without its errno")
			}
			errno := -int32(ne.Uint32(body))
			switch {
			case errno == 0:
				continue // an acknowledgement
			case syscall.Errno(errno) == syscall.ENOENT:
				return Info{}, ErrNotFound
			case errno < 0:
				return Info{}, fmt.Errorf("tcpdiag: netlink error %d", -errno)
			}
			return Info{}, fmt.Errorf("tcpdiag: sock_diag: %w", syscall.Errno(errno))
		case nlmsgDone:
			return Info{}, ErrNotFound
		case sockDiagByFamily:
			return parseDiagMsg(body)
		}
	}
	return Info{}, errors.New("tcpdiag: no answer to the request in the reply")
}

// parseDiagMsg parses an inet_diag_msg and its attributes.
func parseDiagMsg(b []byte) (Info, error) {
	if len(b) < diagMsgLen {
		return Info{}, fmt.Errorf("tcpdiag: inet_diag_msg of %d bytes, want %d", len(b), diagMsgLen)
	}
	info := Info{State: b[1]}
	attrs := b[diagMsgLen:]
	for len(attrs) >= rtaHdrLen {
		n := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:])
		if n < rtaHdrLen || n > len(attrs) {
			return Info{}, fmt.Errorf("tcpdiag: attribute of length %d in %d bytes", n, len(attrs))
		}
		if typ == inetDiagInfo {
			return parseTCPInfo(info, attrs[rtaHdrLen:n])
		}
		attrs = attrs[min(len(attrs), nlmAlign(n)):]
	}
	return Info{}, errors.New("tcpdiag: the reply has no tcp_info")
}

// parseTCPInfo reads the fields of struct tcp_info that Info keeps.
func parseTCPInfo(info Info, t []byte) (Info, error) {
	if len(t) < tcpInfoMinLen {
		return Info{}, fmt.Errorf("tcpdiag: tcp_info of %d bytes, want at least %d", len(t), tcpInfoMinLen)
	}
	ne := binary.NativeEndian
	info.Retransmits, info.Backoff = t[2], t[4]
	info.Unacked = ne.Uint32(t[24:])
	info.LastDataRecv = time.Duration(ne.Uint32(t[52:])) * time.Millisecond
	info.LastAckRecv = time.Duration(ne.Uint32(t[56:])) * time.Millisecond
	return info, nil
}

// nlmAlign rounds n up to netlink's 4-byte alignment.
func nlmAlign(n int) int { return (n + 3) &^ 3 }
