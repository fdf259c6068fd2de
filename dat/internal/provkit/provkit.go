// Package provkit holds the small pieces every in-tree DAT provider needs
// the same way: naming the IA's address, normalising a remote address, and
// handing queued connection requests to Accept. Providers outside this
// module write their own; nothing here is part of the driver contract.
package provkit

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// InterfaceIP resolves an IA address given as an IP literal or a network
// interface name: the IP itself, or the interface's first IPv4 address,
// else its first global IPv6 one. An unspecified IP is returned as is, for
// the caller to accept or refuse. Errors wrap driver.ErrInvalidAddress.
func InterfaceIP(s string) (net.IP, error) {
	if ip := net.ParseIP(s); ip != nil {
		return ip, nil
	}
	ifi, err := net.InterfaceByName(s)
	if err != nil {
		return nil, fmt.Errorf("IA address %q is neither an IP nor an interface: %w", s, driver.ErrInvalidAddress)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("IA interface %q: %v: %w", s, err, driver.ErrInvalidAddress)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if v4 := ipn.IP.To4(); v4 != nil {
			return v4, nil
		}
		if v6 == nil && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("IA interface %q has no usable address: %w", s, driver.ErrInvalidAddress)
}

// RemoteTCPAddr normalises a connect target: a *net.TCPAddr, or any
// net.Addr whose String is ip:port. It must name an IP and a port.
func RemoteTCPAddr(a net.Addr) (*net.TCPAddr, error) {
	var ta *net.TCPAddr
	switch v := a.(type) {
	case *net.TCPAddr:
		ta = v
	case nil:
		return nil, fmt.Errorf("no remote address: %w", driver.ErrInvalidAddress)
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return nil, fmt.Errorf("remote address %q: %v: %w", a.String(), err, driver.ErrInvalidAddress)
		}
		ta = net.TCPAddrFromAddrPort(ap)
	}
	if ta.Port == 0 || ta.IP == nil || ta.IP.IsUnspecified() {
		return nil, fmt.Errorf("remote address %v: need an IP and a non-zero port: %w", ta, driver.ErrInvalidAddress)
	}
	return ta, nil
}

// LocalTCPAddr converts the local address of driver.ConnectOptions: a
// *net.TCPAddr, or any net.Addr whose String is "ip:port". The IP may be
// nil or unspecified and the port 0 (the provider picks them).
func LocalTCPAddr(a net.Addr) (*net.TCPAddr, error) {
	switch v := a.(type) {
	case *net.TCPAddr:
		if v.Port < 0 || v.Port > 0xFFFF {
			return nil, fmt.Errorf("local address %v: port out of range: %w", v, driver.ErrInvalidAddress)
		}
		return v, nil
	case nil:
		return &net.TCPAddr{}, nil
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil, fmt.Errorf("local address %q: %v: %w", a.String(), err, driver.ErrInvalidAddress)
	}
	return net.TCPAddrFromAddrPort(ap), nil
}

// AcceptQueued is a Listener's Accept over a queue of ready requests:
// the next request, or net.ErrClosed once done is closed, or ctx's error.
// closed reports whether the listener was closed meanwhile, in which case
// the request is aborted (a non-peer reject) instead of returned.
func AcceptQueued[R driver.Request](ctx context.Context, who string, ready <-chan R, done <-chan struct{}, closed func() bool) (driver.Request, error) {
	select {
	case r := <-ready:
		if closed() {
			_ = r.Abort()
			return nil, fmt.Errorf("%s: accept: %w", who, net.ErrClosed)
		}
		return r, nil
	case <-done:
		return nil, fmt.Errorf("%s: accept: %w", who, net.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: accept: %w", who, ctx.Err())
	}
}
