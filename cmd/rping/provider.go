package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"github.com/rdmanet/rdmanet/dat"
)

// defaultProvider is the IA used without --provider and $RPING_PROVIDER:
// the built-in pure-Go iWARP provider.
const defaultProvider = dat.DefaultIAName

// rping's queue sizes (RPING_SQ_DEPTH and the QP's receive depth); the CQ
// has room for both.
const (
	sqDepth = 16
	rqDepth = 2
	cqDepth = 2 * sqDepth
)

// iaName is the DAT IA name to open. A bare provider name (no ':' and no
// registry entry of that name needed) gets the local address as its
// instance argument: the server's -a (the address rdma_bind_addr binds,
// so the PSP listens there) and the client's -I (the source address of
// rdma_resolve_addr). A name with arguments, or a registry name, is used
// as given.
func iaName(cfg *config) string {
	name := cfg.provider
	if strings.Contains(name, ":") || !isProvider(name) {
		return name
	}
	local := cfg.src
	if cfg.server == 1 {
		local = cfg.addr
	} else if !local.IsValid() && name != defaultProvider {
		// rdma_resolve_addr without a source takes the address the
		// routing table picks for the destination. The iwarp provider
		// does the same when it dials; others (verbs) need to know the
		// address, and so the device, up front.
		local = routeSource(cfg.addr)
	}
	if local.IsValid() && !local.IsUnspecified() {
		return name + ":" + local.String()
	}
	return name
}

// routeSource is the local address the kernel would use to reach dst, or
// the zero Addr. (A UDP "connection" sends nothing.)
var routeSource = func(dst netip.Addr) netip.Addr {
	c, err := net.Dial("udp", netip.AddrPortFrom(dst, 9).String())
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

func isProvider(name string) bool { return dat.IsProvider(name) }

// openIA opens the IA for cfg.
func openIA(cfg *config) (*dat.IA, error) {
	return dat.OpenIA(context.Background(), iaName(cfg), nil)
}

// epAttr is rping's QP: RC, 16 send and 2 receive work requests of one
// segment each, and one RDMA Read in each direction (rping's
// responder_resources and initiator_depth), within the IA's limits.
func epAttr(ia *dat.IA) (dat.EPAttr, error) {
	a, _, err := ia.Query()
	if err != nil {
		return dat.EPAttr{}, err
	}
	return dat.EPAttr{
		ServiceType:            dat.ServiceTypeRC,
		MaxMessageSize:         a.MaxMessageSize,
		MaxRDMASize:            a.MaxRDMASize,
		QoS:                    dat.QoSBestEffort,
		RecvCompletionFlags:    dat.CompletionEVDThreshold,
		RequestCompletionFlags: dat.CompletionEVDThreshold,
		MaxRecvDTOs:            min(rqDepth, a.MaxDTOPerEP),
		MaxRequestDTOs:         min(sqDepth, a.MaxDTOPerEP),
		MaxRecvIOV:             1,
		MaxRequestIOV:          1,
		MaxRDMAReadIn:          min(1, a.MaxRDMAReadIn),
		MaxRDMAReadOut:         min(1, a.MaxRDMAReadOut),
		MaxRDMAReadIOV:         1,
		MaxRDMAWriteIOV:        1,
	}, nil
}

// transportIWARP reports whether ia is an iWARP adapter. rdma_cm fails a
// refused iWARP connection synchronously in rdma_connect (the kernel's TCP
// connect), but an InfiniBand or RoCE one with a REJECTED event, so rping
// prints different lines for the two.
func transportIWARP(ia *dat.IA) bool {
	a, _, err := ia.Query()
	return err != nil || strings.EqualFold(a.Transport, "iwarp")
}

// errnoOf finds the errno behind err: a wrapped syscall.Errno, else the
// closest errno for the DAT return type.
func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	switch dat.Code(err).Type() {
	case dat.InvalidParameter, dat.InvalidState, dat.InvalidHandle, dat.LengthError:
		return syscall.EINVAL
	case dat.InsufficientResources, dat.QueueFull:
		return syscall.ENOMEM
	case dat.ModelNotSupported, dat.NotImplemented:
		return syscall.EOPNOTSUPP
	case dat.InvalidAddress:
		return syscall.EADDRNOTAVAIL
	case dat.ConnQualInUse, dat.PortInUse:
		return syscall.EADDRINUSE
	case dat.TimeoutExpired:
		return syscall.ETIMEDOUT
	case dat.ProviderNotFound:
		return syscall.ENODEV
	case dat.PrivilegesViolation, dat.ProtectionViolation:
		return syscall.EACCES
	}
	return syscall.EIO
}

// strerror is glibc's strerror text for en ("Connection refused").
func strerror(en syscall.Errno) string {
	s := en.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// unspecified reports whether a is the zero address rping uses without -a.
func unspecified(a netip.Addr) bool { return !a.IsValid() || a.IsUnspecified() }
