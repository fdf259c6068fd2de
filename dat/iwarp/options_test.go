package iwarp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

var _ driver.OptionsConnector = (*iwarp.QP)(nil)

// sockopts are the keepalive settings of a connection's socket.
type sockopts struct {
	keepalive, idle, intvl, cnt int
	userTimeout                 int // ms; -1 where not Linux
}

func readSockopts(t *testing.T, q *iwarp.QP) sockopts {
	t.Helper()
	rc := iwarp.QPSocket(q)
	if rc == nil {
		t.Fatal("QP has no connection")
	}
	o, err := socketOpts(rc)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// socketOpts reads the keepalive settings of the socket rc.
func socketOpts(rc syscall.RawConn) (sockopts, error) {
	var o sockopts
	var errs []error
	get := func(fd uintptr, level, opt int) int {
		v, err := syscall.GetsockoptInt(int(fd), level, opt)
		errs = append(errs, err)
		return v
	}
	if err := rc.Control(func(fd uintptr) {
		o.keepalive = get(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		o.idle = get(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		o.intvl = get(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL)
		o.cnt = get(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
		o.userTimeout = -1
		if runtime.GOOS == "linux" {
			o.userTimeout = get(fd, syscall.IPPROTO_TCP, 0x12) // TCP_USER_TIMEOUT
		}
	}); err != nil {
		return o, err
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("getsockopt: %w", err)
	}
	return o, nil
}

// connectWith connects a fresh initiator QP with opts to a listener made
// with lcfg, both on fresh IAs on 127.0.0.1.
func connectWith(t *testing.T, opts driver.ConnectOptions, lcfg driver.ListenConfig) (pair, *iwarp.Request) {
	t.Helper()
	ctx := testCtx(t)
	ini, resp := openIA(t), openIA(t)
	l := listen(t, resp, lcfg)
	p := pair{iniRec: newSink(), respRec: newSink()}
	p.ini = newQP(t, ini, defaultQPConfig, p.iniRec)
	p.resp = newQP(t, resp, defaultQPConfig, p.respRec)
	ch := make(chan connectResult, 1)
	go func() {
		res, err := p.ini.ConnectWith(ctx, l.Addr(), nil, opts)
		ch <- connectResult{res, err}
	}()
	r := accept(t, ctx, l)
	if _, err := r.Accept(ctx, p.resp, nil); err != nil {
		t.Fatalf("accept request: %v", err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatalf("connect: %v", res.err)
	}
	return p, r
}

// keepAliveCase is a keepalive setting (KeepAlive and KeepAliveConfig,
// the same for a connect and a listener) and the socket options it
// should give.
type keepAliveCase struct {
	name     string
	ka       time.Duration
	cfg      net.KeepAliveConfig
	want     sockopts // userTimeout: what an MPA connection gets
	wantNoKA bool
}

// wantFor is what a socket should hold for tc, given what it holds (got):
// a count left to the system is the system's, and the user timeout
// counts it.
func (tc keepAliveCase) wantFor(got sockopts) sockopts {
	want := tc.want
	if want.cnt < 0 {
		want.cnt = got.cnt
		want.userTimeout = (want.idle + want.intvl*got.cnt) * 1000
	}
	if runtime.GOOS != "linux" {
		want.userTimeout = -1
	}
	return want
}

// keepAliveCases are the settings TestKeepAliveOptions and
// TestKeepAliveFallback try.
var keepAliveCases = func() []keepAliveCase {
	short := net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: 3}
	return []keepAliveCase{
		{name: "default", want: sockopts{1, 15, 15, 9, 150_000}},
		{name: "period", ka: 5 * time.Second, want: sockopts{1, 5, 15, 9, 140_000}},
		{name: "config", cfg: short, want: sockopts{1, 2, 1, 3, 5_000}},
		{name: "config wins over negative", ka: -1, cfg: short, want: sockopts{1, 2, 1, 3, 5_000}},
		// net rounds up to whole seconds; the user timeout follows what
		// the socket holds.
		{name: "rounded up", cfg: net.KeepAliveConfig{Enable: true, Idle: 1500 * time.Millisecond, Interval: 300 * time.Millisecond, Count: 2},
			want: sockopts{1, 2, 1, 2, 4_000}},
		// A negative field keeps the system's value (cnt -1: filled in
		// from the socket below), which the user timeout counts.
		{name: "system count", cfg: net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: -1},
			want: sockopts{1, 2, 1, -1, -1}},
		{name: "off", ka: -1, wantNoKA: true},
	}
}()

// TestKeepAliveOptions: both ends of a connection get TCP keepalive as
// net.Dialer and net.ListenConfig would set it, and a user timeout of
// Idle + Interval × Count.
func TestKeepAliveOptions(t *testing.T) {
	leakCheck(t)
	for _, tc := range keepAliveCases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := connectWith(t, driver.ConnectOptions{KeepAlive: tc.ka, KeepAliveConfig: tc.cfg},
				driver.ListenConfig{KeepAlive: tc.ka, KeepAliveConfig: tc.cfg})
			for _, q := range []*iwarp.QP{p.ini, p.resp} {
				got := readSockopts(t, q)
				if tc.wantNoKA {
					if got.keepalive != 0 || (got.userTimeout != -1 && got.userTimeout != 0) {
						t.Errorf("keepalive off: got %+v", got)
					}
					continue
				}
				if want := tc.wantFor(got); got != want {
					t.Errorf("got %+v, want %+v", got, want)
				}
			}
		})
	}
}

// TestConnectBackground: a connection made in the background (Request
// after the connect) completes, with the socket options of any other.
func TestConnectBackground(t *testing.T) {
	leakCheck(t)
	tc := keepAliveCases[2] // "config"
	p, _ := connectWith(t, driver.ConnectOptions{KeepAliveConfig: tc.cfg, Background: true},
		driver.ListenConfig{KeepAliveConfig: tc.cfg})
	if got, want := readSockopts(t, p.ini), tc.wantFor(readSockopts(t, p.ini)); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestKeepAliveFallback: a connection handed to Fallback gets the
// listener's keepalive, as package net would have set it at accept
// (admission sets it only on the connections it hands on).
func TestKeepAliveFallback(t *testing.T) {
	leakCheck(t)
	for _, tc := range keepAliveCases {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				o   sockopts
				err error
			}
			got := make(chan result, 1)
			l := listen(t, openIA(t), driver.ListenConfig{KeepAlive: tc.ka, KeepAliveConfig: tc.cfg,
				Fallback: func(c net.Conn) {
					defer c.Close()
					rc := iwarp.FallbackSocket(c)
					if rc == nil {
						got <- result{err: fmt.Errorf("Fallback got a %T", c)}
						return
					}
					o, err := socketOpts(rc)
					got <- result{o, err}
				}})
			c := dialRaw(t, l.Addr())
			if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-got:
			case <-time.After(testTimeout):
				t.Fatal("nothing reached Fallback")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			// userTimeout not compared: only MPA connections get one.
			want := tc.wantFor(r.o)
			r.o.userTimeout, want.userTimeout = 0, 0
			if tc.wantNoKA {
				if r.o.keepalive != 0 {
					t.Errorf("keepalive off: got %+v", r.o)
				}
			} else if r.o != want {
				t.Errorf("got %+v, want %+v", r.o, want)
			}
		})
	}
}

// TestConnectLocalPort: the initiator's socket is bound to the local port
// asked for, which the responder sees as the remote port; an address
// other than the IA's is refused.
func TestConnectLocalPort(t *testing.T) {
	leakCheck(t)
	port := freePort(t)
	p, r := connectWith(t, driver.ConnectOptions{LocalAddr: &net.TCPAddr{Port: port}}, driver.ListenConfig{})
	if got := r.Info().Remote.(*net.TCPAddr).Port; got != port {
		t.Errorf("responder sees remote port %d, want %d", got, port)
	}
	if info, _ := p.ini.ConnInfo(); info.Local.(*net.TCPAddr).Port != port {
		t.Errorf("initiator's local address %v, want port %d", info.Local, port)
	}

	ia := openIA(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	_, err := q.ConnectWith(testCtx(t), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil,
		driver.ConnectOptions{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}})
	if !errors.Is(err, driver.ErrInvalidAddress) {
		t.Errorf("connect from an address not the IA's: %v, want ErrInvalidAddress", err)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestControl: the Control hooks of connect and listen run on the sockets
// with the network and address net's would get, and an error they return
// fails the call with that error.
func TestControl(t *testing.T) {
	leakCheck(t)
	type call struct{ network, address string }
	dialed := make(chan call, 1)
	listened := make(chan call, 1)
	opts := driver.ConnectOptions{Control: func(ctx context.Context, network, address string, c syscall.RawConn) error {
		dialed <- call{network, address}
		return nil
	}}
	lcfg := driver.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		listened <- call{network, address}
		return nil
	}}
	p, _ := connectWith(t, opts, lcfg)
	info, _ := p.resp.ConnInfo()
	if got := <-dialed; got.network != "tcp4" || got.address != info.Local.String() {
		t.Errorf("connect Control(%q, %q), want (tcp4, %v)", got.network, got.address, info.Local)
	}
	if got := <-listened; got.network != "tcp4" || got.address != net.JoinHostPort("127.0.0.1", "0") {
		t.Errorf("listen Control(%q, %q), want (tcp4, 127.0.0.1:0)", got.network, got.address)
	}

	boom := errors.New("boom")
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	q := newQP(t, ia, defaultQPConfig, nil)
	_, err := q.ConnectWith(testCtx(t), l.Addr(), nil, driver.ConnectOptions{
		Control: func(context.Context, string, string, syscall.RawConn) error { return boom }})
	if !errors.Is(err, boom) {
		t.Errorf("connect with a failing Control: %v, want boom", err)
	}
	if _, err := ia.Listen(driver.ListenConfig{Control: func(string, string, syscall.RawConn) error { return boom }}); !errors.Is(err, boom) {
		t.Errorf("listen with a failing Control: %v, want boom", err)
	}
}
