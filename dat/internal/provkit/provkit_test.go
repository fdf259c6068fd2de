package provkit

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestInterfaceIP(t *testing.T) {
	for _, c := range []struct {
		in, want string
		bad      bool
	}{
		{in: "127.0.0.1", want: "127.0.0.1"},
		{in: "::1", want: "::1"},
		{in: "0.0.0.0", want: "0.0.0.0"},
		{in: "lo", want: "127.0.0.1"},
		{in: "no-such-interface0", bad: true},
		{in: "300.1.1.1", bad: true},
	} {
		ip, err := InterfaceIP(c.in)
		if c.bad {
			if !errors.Is(err, driver.ErrInvalidAddress) {
				t.Errorf("%s: err %v, want ErrInvalidAddress", c.in, err)
			}
			continue
		}
		if err != nil || !ip.Equal(net.ParseIP(c.want)) {
			t.Errorf("%s: %v, %v; want %s", c.in, ip, err, c.want)
		}
	}
}

func TestRemoteTCPAddr(t *testing.T) {
	good := []net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}}
	for _, a := range good {
		ta, err := RemoteTCPAddr(a)
		if err != nil || ta.Port != 9 || !ta.IP.Equal(net.IPv4(127, 0, 0, 1)) {
			t.Errorf("%v: %v, %v", a, ta, err)
		}
	}
	bad := []net.Addr{nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.TCPAddr{Port: 9}, &net.IPAddr{IP: net.IPv4(1, 2, 3, 4)}}
	for _, a := range bad {
		if _, err := RemoteTCPAddr(a); !errors.Is(err, driver.ErrInvalidAddress) {
			t.Errorf("%v: err %v, want ErrInvalidAddress", a, err)
		}
	}
}

// fakeReq is a driver.Request that records Abort; only Abort is called.
type fakeReq struct {
	driver.Request
	aborted bool
}

func (r *fakeReq) Abort() error { r.aborted = true; return nil }

func TestAcceptQueued(t *testing.T) {
	ready, done := make(chan *fakeReq, 1), make(chan struct{})
	r := &fakeReq{}
	ready <- r
	got, err := AcceptQueued(context.Background(), "x", ready, done, func() bool { return false })
	if err != nil || got != driver.Request(r) {
		t.Fatalf("got %v, %v", got, err)
	}
	ready <- r
	if _, err := AcceptQueued(context.Background(), "x", ready, done, func() bool { return true }); !errors.Is(err, net.ErrClosed) || !r.aborted {
		t.Fatalf("closed listener: %v, aborted %v", err, r.aborted)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := AcceptQueued(ctx, "x", ready, done, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	close(done)
	if _, err := AcceptQueued(context.Background(), "x", ready, done, func() bool { return false }); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("done: %v", err)
	}
}

// closer counts Close calls and removes itself from its set, as provider
// objects do.
type closer struct {
	set    *Set[*closer]
	closed int
}

func (c *closer) Close() error { c.closed++; c.set.Remove(c); return nil }

func TestSet(t *testing.T) {
	var s Set[*closer]
	a, b := &closer{set: &s}, &closer{set: &s}
	if !s.Add(a) || !s.Add(b) || s.Len() != 2 {
		t.Fatal("adds before CloseAll")
	}
	s.Remove(b)
	s.CloseAll()
	if a.closed != 1 || b.closed != 0 || s.Len() != 0 {
		t.Fatalf("CloseAll closed a %d times, b %d times; %d left", a.closed, b.closed, s.Len())
	}
	if s.Add(&closer{set: &s}) {
		t.Fatal("Add after CloseAll succeeded")
	}
}
