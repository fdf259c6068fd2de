package rdmanet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// freePort returns a TCP port of ip that was free a moment ago.
func freePort(t *testing.T, ip netip.Addr) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestDialLocalPort: the port of Dialer.LocalAddr is the connection's
// local port, which the server sees as the remote one; Dup, which cannot
// reuse the four-tuple, dials from another port.
func TestDialLocalPort(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		remotes := make(chan net.Addr, 2)
		serve(t, l, func(c net.Conn) { remotes <- c.RemoteAddr(); io.Copy(io.Discard, c); c.Close() })
		port := freePort(t, testIP(ia))
		d := Dialer{IA: ia, LocalAddr: &net.TCPAddr{IP: testIP(ia).AsSlice(), Port: int(port)}, Timeout: 10 * time.Second}
		c, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if a := c.LocalAddr().(*Addr); a.Port != port || a.IP != testIP(ia) {
			t.Errorf("local address %v, want %v", a, netip.AddrPortFrom(testIP(ia), port))
		}
		if r := (<-remotes).(*Addr); r.Port != port {
			t.Errorf("the server sees the client at %v, want port %d", r, port)
		}
		dup, err := c.(*Conn).Dup(context.Background())
		if err != nil {
			t.Fatalf("Dup of a connection from a fixed port: %v", err)
		}
		defer dup.Close()
		if a := dup.LocalAddr().(*Addr); a.Port == port || a.Port == 0 {
			t.Errorf("Dup's local address %v: want a port other than %d", a, port)
		}
	})
}

// TestFallbackLocalPort: the TCP fallback dials from Dialer.LocalAddr's
// port too, after the RDMA attempt from it was abandoned.
func TestFallbackLocalPort(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	remotes := make(chan net.Addr, 4)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			remotes <- c.RemoteAddr()
			io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\n") // not MPA: fall back at once
			c.Close()
		}
	}()
	port := freePort(t, netipLoopback)
	d := Dialer{IA: "iwarp", FallbackTCP: true, Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}}
	c, err := d.Dial("rdma", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fc, ok := c.(*FallbackConn)
	if !ok {
		t.Fatalf("got %T, want a *FallbackConn", c)
	}
	if got := fc.LocalAddr().(*net.TCPAddr).Port; got != int(port) {
		t.Errorf("fallback connection from port %d, want %d", got, port)
	}
	for range 2 { // the RDMA attempt and the fallback
		if r := (<-remotes).(*net.TCPAddr); r.Port != int(port) {
			t.Errorf("the server sees a connection from %v, want port %d", r, port)
		}
	}
}

// TestDialControl: Control and ControlContext run on the provider's
// socket with the network and address net.Dialer gives them, ControlContext
// winning; an error of theirs fails the dial as itself in a *net.OpError.
// The TCP fallback runs them too.
func TestDialControl(t *testing.T) {
	l, err := (&ListenConfig{IA: "iwarp"}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	type call struct{ network, address string }
	calls := make(chan call, 4)
	d := Dialer{IA: "iwarp", Timeout: 5 * time.Second, NoDup: true,
		Control: func(string, string, syscall.RawConn) error {
			t.Error("Control called although ControlContext is set")
			return nil
		},
		ControlContext: func(ctx context.Context, network, address string, c syscall.RawConn) error {
			if ctx == nil {
				t.Error("ControlContext got no context")
			}
			calls <- call{network, address}
			return nil
		}}
	c, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-calls; got.network != "tcp4" || got.address != l.Addr().String() {
		t.Errorf("ControlContext(%q, %q), want (tcp4, %v)", got.network, got.address, l.Addr())
	}

	d.ControlContext = nil
	d.Control = func(network, address string, c syscall.RawConn) error { calls <- call{network, address}; return nil }
	if c, err = d.Dial("rdma", l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-calls; got.network != "tcp4" {
		t.Errorf("Control(%q, %q), want tcp4", got.network, got.address)
	}

	boom := errors.New("boom")
	d.Control = func(string, string, syscall.RawConn) error { return boom }
	_, err = d.Dial("rdma", l.Addr().String())
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, boom) || oe.Err != boom {
		t.Fatalf("dial with a failing Control: %#v, want *net.OpError dial with boom", err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a failing Control reads as a refused connection: %v", err)
	}

	// The TCP fallback: no usable IA, so only the TCP socket is made.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go func() {
		if c, err := tl.Accept(); err == nil {
			c.Close()
		}
	}()
	d = Dialer{IA: "no-such-provider", FallbackTCP: true, Timeout: 5 * time.Second,
		Control: func(network, address string, c syscall.RawConn) error { calls <- call{network, address}; return nil }}
	if c, err = d.Dial("rdma", tl.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-calls; got.network != "tcp4" || got.address != tl.Addr().String() {
		t.Errorf("fallback Control(%q, %q), want (tcp4, %v)", got.network, got.address, tl.Addr())
	}
}

// TestListenControl: ListenConfig.Control runs on the listening socket; its
// error fails Listen in a *net.OpError.
func TestListenControl(t *testing.T) {
	var got []string
	lc := ListenConfig{IA: "iwarp", Control: func(network, address string, c syscall.RawConn) error {
		got = append(got, network, address)
		return nil
	}}
	l, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(got) != 2 || got[0] != "tcp4" || got[1] != "127.0.0.1:0" {
		t.Errorf("Control calls %q, want [tcp4 127.0.0.1:0]", got)
	}
	boom := errors.New("boom")
	lc.Control = func(string, string, syscall.RawConn) error { return boom }
	_, err = lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "listen" || !errors.Is(err, boom) {
		t.Errorf("listen with a failing Control: %v, want *net.OpError listen wrapping boom", err)
	}
}

// TestKeepAliveSocket: a dialed connection's socket gets keepalive as
// net.Dialer would set it: on with 15 s by default, off with a negative
// KeepAlive, as configured with KeepAliveConfig. (The socket is reached
// through the RawConn Control saw, which stays the socket's.)
func TestKeepAliveSocket(t *testing.T) {
	l, err := (&ListenConfig{IA: "iwarp"}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	for _, tc := range []struct {
		name          string
		ka            time.Duration
		cfg           net.KeepAliveConfig
		on, idle, cnt int
	}{
		{"default", 0, net.KeepAliveConfig{}, 1, 15, 9},
		{"KeepAlive", 7 * time.Second, net.KeepAliveConfig{}, 1, 7, 9},
		{"off", -1, net.KeepAliveConfig{}, 0, 0, 0},
		{"KeepAliveConfig", -1, net.KeepAliveConfig{Enable: true, Idle: 3 * time.Second, Interval: time.Second, Count: 4}, 1, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw syscall.RawConn
			d := Dialer{IA: "iwarp", Timeout: 5 * time.Second, NoDup: true, KeepAlive: tc.ka, KeepAliveConfig: tc.cfg,
				Control: func(_, _ string, c syscall.RawConn) error { raw = c; return nil }}
			c, err := d.Dial("rdma", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var on, idle, cnt int
			var errs [3]error
			if err := raw.Control(func(fd uintptr) {
				on, errs[0] = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
				idle, errs[1] = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
				cnt, errs[2] = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
			}); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(errs[:]...); err != nil {
				t.Fatal(err)
			}
			if on != tc.on || (tc.on == 1 && (idle != tc.idle || cnt != tc.cnt)) {
				t.Errorf("SO_KEEPALIVE %d, TCP_KEEPIDLE %d, TCP_KEEPCNT %d; want %d, %d, %d", on, idle, cnt, tc.on, tc.idle, tc.cnt)
			}
		})
	}
}

// TestConnectOptionsOf: what a Dialer and a ListenConfig hand package dat.
func TestConnectOptionsOf(t *testing.T) {
	cfg := net.KeepAliveConfig{Enable: true, Idle: time.Second}
	d := Dialer{KeepAlive: -1, KeepAliveConfig: cfg}
	local := &Addr{IP: netipLoopback, Port: 4242}
	o := d.connectOptions(local, false)
	if o.LocalAddr != netip.AddrPortFrom(netipLoopback, 4242) || o.KeepAlive != -1 || o.KeepAliveConfig != cfg || o.Control != nil {
		t.Errorf("connect options %+v", o)
	}
	if o := d.connectOptions(local, true); o.LocalAddr.Port() != 0 || o.LocalAddr.Addr() != netipLoopback {
		t.Errorf("dup options keep the port: %v", o.LocalAddr)
	}
	if o := d.connectOptions(nil, false); o.LocalAddr.IsValid() {
		t.Errorf("no LocalAddr gives %v", o.LocalAddr)
	}
	if a := localFrom(&net.TCPAddr{Port: 99}); a == nil || a.Port != 99 || a.IP.IsValid() || a.String() != ":99" {
		t.Errorf("localFrom(:99) = %v", a)
	}
	lc := ListenConfig{SharePort: true, KeepAlive: 5 * time.Second, KeepAliveConfig: cfg}
	want := dat.PSPOptions{SharePort: true, KeepAlive: 5 * time.Second, KeepAliveConfig: cfg}
	if p := lc.pspOptions(); p.SharePort != want.SharePort || p.KeepAlive != want.KeepAlive || p.KeepAliveConfig != want.KeepAliveConfig {
		t.Errorf("PSP options %+v", p)
	}
}
