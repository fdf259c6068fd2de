package rdmanet

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestSharePort: two listeners share one port with SharePort (the iwarp
// provider's SO_REUSEPORT); without it the second fails.
func TestSharePort(t *testing.T) {
	lc := ListenConfig{IA: "iwarp", SharePort: true}
	l1, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	l2, err := lc.Listen(context.Background(), "rdma", l1.Addr().String())
	if err != nil {
		t.Fatalf("second SharePort listener: %v", err)
	}
	defer l2.Close()
	if _, err := (&ListenConfig{IA: "iwarp"}).Listen(context.Background(), "rdma", l1.Addr().String()); err == nil {
		t.Error("a listener without SharePort took a shared port")
	}
	// Connections reach one of the two.
	accepted := make(chan net.Conn, 4)
	for _, l := range []net.Listener{l1, l2} {
		go func() {
			if c, err := l.Accept(); err == nil {
				accepted <- c
			}
		}()
	}
	d := &Dialer{IA: "iwarp", Timeout: 5 * time.Second, NoDup: true}
	c, err := d.Dial("rdma", l1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case s := <-accepted:
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no listener accepted")
	}
}

// TestFallbackTCP: with no usable IA, a FallbackTCP Dialer dials TCP.
func TestFallbackTCP(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go func() {
		if c, err := tl.Accept(); err == nil {
			io.WriteString(c, "tcp")
			c.Close()
		}
	}()
	d := Dialer{IA: "no-such-provider", FallbackTCP: true, Timeout: 5 * time.Second}
	c, err := d.Dial("rdma", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if fc, ok := c.(*FallbackConn); !ok || fc.Reason != ReasonNoDevice || fc.Err == nil {
		t.Fatalf("got %T %+v", c, c)
	}
	b, _ := io.ReadAll(c)
	if string(b) != "tcp" {
		t.Errorf("read %q", b)
	}
	d.FallbackTCP = false
	if _, err := d.Dial("rdma", tl.Addr().String()); err == nil {
		t.Error("dial without fallback succeeded")
	}
}

// TestLocalAddr: the Dialer's LocalAddr picks the source address (and an
// IA bound to it).
func TestLocalAddr(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		serve(t, l, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
		d := Dialer{IA: ia, LocalAddr: &Addr{IP: testIP(ia)}, Timeout: 5 * time.Second}
		c, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if a := c.LocalAddr().(*Addr); a.IP != testIP(ia) || a.Port == 0 {
			t.Errorf("local address %v", a)
		}
	})
}

func TestResolveAddr(t *testing.T) {
	for _, tc := range []struct{ network, addr, want string }{
		{"rdma", "127.0.0.1:7000", "127.0.0.1:7000"},
		{"rdma4", "localhost:7000", "127.0.0.1:7000"},
		{"rdma6", "[::1]:7", "[::1]:7"},
		{"rdma", ":http", "127.0.0.1:80"},
	} {
		a, err := ResolveAddr(tc.network, tc.addr)
		if err != nil || a.String() != tc.want || a.Network() != "rdma" {
			t.Errorf("ResolveAddr(%q, %q) = %v, %v; want %s", tc.network, tc.addr, a, err, tc.want)
		}
	}
	for _, tc := range []struct{ network, addr string }{
		{"tcp", "127.0.0.1:1"}, {"rdma4", "[::1]:1"}, {"rdma", "nope"},
	} {
		if _, err := ResolveAddr(tc.network, tc.addr); err == nil {
			t.Errorf("ResolveAddr(%q, %q) succeeded", tc.network, tc.addr)
		}
	}
}

// TestIPv6 dials and listens on ::1 with network rdma6.
func TestIPv6(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		if ia != "iwarp" {
			t.Skip("the in-process provider is IPv4 only")
		}
		if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
			t.Skip("no IPv6 loopback:", err)
		} else {
			ln.Close()
		}
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma6", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				io.Copy(c, c)
				c.Close()
			}
		}()
		d := Dialer{IA: ia, Timeout: 5 * time.Second}
		c, err := d.Dial("rdma6", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("six"))
		b := make([]byte, 3)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "six" {
			t.Fatalf("%q %v", b, err)
		}
		if !c.RemoteAddr().(*Addr).IP.Is6() {
			t.Errorf("remote %v", c.RemoteAddr())
		}
	})
}
