package rdmanet

import (
	"context"
	"net"
	"net/netip"
	"strconv"
)

// Addr is the address of an rdmanet endpoint: an IP address and a port
// (the DAT connection qualifier; on iWARP, the TCP port underneath).
type Addr struct {
	IP   netip.Addr
	Port uint16
}

// Network returns "rdma".
func (a *Addr) Network() string { return "rdma" }

// String returns "host:port" ("[v6]:port" for IPv6), or ":port" for an
// Addr with no IP (a local address that leaves the IP to the system).
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	if !a.IP.IsValid() {
		return ":" + strconv.Itoa(int(a.Port))
	}
	return netip.AddrPortFrom(a.IP, a.Port).String()
}

// AddrPort returns the address as a netip.AddrPort.
func (a *Addr) AddrPort() netip.AddrPort { return netip.AddrPortFrom(a.IP, a.Port) }

// ResolveAddr resolves "host:port" for network "rdma", "rdma4" or "rdma6"
// into its first address, as net.ResolveTCPAddr does for TCP.
func ResolveAddr(network, address string) (*Addr, error) {
	aps, err := resolve(context.Background(), network, address, false)
	if err != nil {
		return nil, err
	}
	return &Addr{IP: aps[0].Addr(), Port: aps[0].Port()}, nil
}

// addrFrom converts a net.Addr of any IP-carrying kind to an *Addr; nil if
// it has no IP.
func addrFrom(a net.Addr) *Addr {
	switch a := a.(type) {
	case *Addr:
		return a
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return nil
		}
		return &Addr{IP: ip.Unmap(), Port: uint16(a.Port)}
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return nil
		}
		return &Addr{IP: ip.Unmap(), Port: uint16(a.Port)}
	case *net.IPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return nil
		}
		return &Addr{IP: ip.Unmap()}
	}
	return nil
}

// checkNetwork accepts the rdma networks and returns the IP family filter
// ("ip", "ip4" or "ip6").
func checkNetwork(network string) (string, error) {
	switch network {
	case "rdma":
		return "ip", nil
	case "rdma4":
		return "ip4", nil
	case "rdma6":
		return "ip6", nil
	}
	return "", net.UnknownNetworkError(network)
}

// resolve turns "host:port" into candidate addresses of the network's
// family. An empty host means loopback when dialing and the unspecified
// address when listening (every local address), as with TCP.
func resolve(ctx context.Context, network, address string, listen bool) ([]netip.AddrPort, error) {
	family, err := checkNetwork(network)
	if err != nil {
		return nil, err
	}
	host, service, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "tcp", service)
	if err != nil {
		return nil, err
	}
	if host == "" {
		ip := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		switch {
		case listen && family == "ip6":
			ip = netip.IPv6Unspecified()
		case listen:
			ip = netip.IPv4Unspecified()
		case family == "ip6":
			ip = netip.IPv6Loopback()
		}
		return []netip.AddrPort{netip.AddrPortFrom(ip, uint16(port))}, nil
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip.Unmap()}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, family, host); err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		ip = ip.Unmap()
		if (family == "ip4" && !ip.Is4()) || (family == "ip6" && !ip.Is6()) {
			continue
		}
		out = append(out, netip.AddrPortFrom(ip, uint16(port)))
	}
	if len(out) == 0 {
		return nil, &net.AddrError{Err: "no suitable address found", Addr: host}
	}
	return out, nil
}

var netipLoopback = netip.AddrFrom4([4]byte{127, 0, 0, 1})
