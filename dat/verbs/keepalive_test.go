//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/internal/rdmapair"
	"github.com/rdmanet/rdmanet/internal/tcpdiag"
)

// TestKeepAliveKeeper: which connections get a keeper, and what it
// watches. Keepalive is on by default, as with TCP, and a negative
// KeepAlive turns it off. An iWARP keeper watches the connection's TCP
// socket and probes with an RDMA Write, as an InfiniBand or RoCE one does.
func TestKeepAliveKeeper(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		for _, tc := range []struct {
			name string
			opts driver.ConnectOptions
			want bool
		}{
			{"default", driver.ConnectOptions{}, true},
			{"off", driver.ConnectOptions{KeepAlive: -1}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, s := newEnd(t, d), newEnd(t, d)
				noReads(t, c, s)
				l := listenOn(t, s.ia, driver.ListenConfig{KeepAlive: tc.opts.KeepAlive})
				done := serve(t, l, s, nil)
				if _, err := c.qp.ConnectWith(testCtx(t), l.Addr(), nil, tc.opts); err != nil {
					t.Fatalf("connect: %v", err)
				}
				if a := <-done; a.err != nil {
					t.Fatalf("accept: %v", a.err)
				}
				for _, e := range []*end{c, s} {
					k := e.qp.keep.Load()
					if (k != nil) != tc.want {
						t.Errorf("keeper %v, want one: %v", k != nil, tc.want)
					}
					if k == nil {
						continue
					}
					if k.idle != driver.DefaultKeepAliveIdle || k.limit != driver.DefaultKeepAliveInterval*driver.DefaultKeepAliveCount {
						t.Errorf("keeper idle %v, limit %v: want package net's defaults", k.idle, k.limit)
					}
					iwarp := d.transport == driver.TransportIWARP
					e.qp.mu.Lock()
					tcp, read := k.tcp != nil, k.read
					e.qp.mu.Unlock()
					if tcp != iwarp || read {
						t.Errorf("keeper watches TCP: %v, probes with a Read: %v; want TCP watched on iWARP only, and no Read", tcp, read)
					}
				}
			})
		}
	})
}

// noReads gives ends QPs configured as rdmanet's are: no RDMA Read either
// way (IRD and ORD 0).
func noReads(t *testing.T, ends ...*end) {
	t.Helper()
	for _, e := range ends {
		cfg := defaultQPConfig(e.dpd)
		cfg.IRD, cfg.ORD = 0, 0
		e.renew(t, cfg)
	}
}

// TestKeepAliveDeadPeer: on two devices whose traffic crosses a veth
// (rdmapair), an idle connection with a short keepalive is probed without
// harm while the peer is there, and once the link is cut both ends report
// the connection broken with ETIMEDOUT within a few times Idle +
// Interval × Count. On rxe the probe is an RDMA Write; on siw an RDMA
// Read, here on QPs configured with ORD 0, as rdmanet's are.
//
// On siw the keeper watches the kernel's TCP socket; siw-read takes the
// fallback for a kernel that does not show it, an RDMA Read probe.
func TestKeepAliveDeadPeer(t *testing.T) {
	for _, kind := range []rdmapair.Kind{rdmapair.RXE, rdmapair.SIW} {
		t.Run(string(kind), func(t *testing.T) { keepAliveDeadPeer(t, kind, tcpWatch{}) })
	}
	t.Run("siw-read", func(t *testing.T) { keepAliveDeadPeer(t, rdmapair.SIW, noSockDiag) })
}

// noSockDiag makes the keepers of an IA take the fallback of a kernel
// without sock_diag.
var noSockDiag = tcpWatch{
	usable: func() bool { return false },
	lookup: func(*tcpdiag.Socket, netip.AddrPort, netip.AddrPort) (tcpdiag.Info, error) {
		return tcpdiag.Info{}, syscall.EPROTONOSUPPORT
	},
}

// watchTCP makes the keepers of the ends' IAs ask about TCP through w.
// Called before the ends connect: the IA's connections and keepers read
// it from then on.
func watchTCP(w tcpWatch, ends ...*end) {
	for _, e := range ends {
		e.ia.tcpWatch = w
	}
}

// keepAliveDeadPeer cuts a pair of kind under a connection whose keepers
// ask about TCP through w.
func keepAliveDeadPeer(t *testing.T, kind rdmapair.Kind, w tcpWatch) {
	pair := rdmapair.New(t, kind)
	transport := driver.TransportRoCE
	if kind == rdmapair.SIW {
		transport = driver.TransportIWARP
	}
	ka := net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 2}
	const bound = 3 * 3 * time.Second // 3 × (Idle + Interval × Count)
	c := newEnd(t, testDev{name: string(kind) + "-pair-client", addr: pair.ClientIP, transport: transport})
	s := newEnd(t, testDev{name: string(kind) + "-pair-server", addr: pair.ServerIP, transport: transport})
	watchTCP(w, c, s)
	noReads(t, c, s)
	l := listenOn(t, s.ia, driver.ListenConfig{KeepAliveConfig: ka})
	done := serve(t, l, s, nil)
	if _, err := c.qp.ConnectWith(testCtx(t), l.Addr(), nil, driver.ConnectOptions{KeepAliveConfig: ka}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if a := <-done; a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}

	// Idle long enough for a few probes: they do no harm. A keeper that
	// judges by completions probes on each end; one that watches TCP
	// counts the peer's probes as signs of life, so one end's probes may
	// spare the other's: there, the two ends' probes count together.
	time.Sleep(4 * ka.Idle)
	var tcpPosted, tcpDone uint64
	for _, e := range []*end{c, s} {
		select {
		case err := <-e.h.disc:
			t.Fatalf("a healthy idle connection ended: %v", err)
		default:
		}
		k := e.qp.keep.Load()
		k.collect() // completions count once polled
		e.qp.mu.Lock()
		posted, tcp := k.posted, k.tcp != nil
		e.qp.mu.Unlock()
		if tcp {
			tcpPosted, tcpDone = tcpPosted+posted, tcpDone+k.done.Load()
		} else if posted == 0 || k.done.Load() == 0 {
			t.Errorf("%d probes posted, %d completed: want some of each", posted, k.done.Load())
		}
	}
	if kind == rdmapair.SIW && watchesTCP(c) && (tcpPosted == 0 || tcpDone == 0) {
		t.Errorf("%d probes posted, %d completed by both ends: want some of each", tcpPosted, tcpDone)
	}
	exchange(t, c, s)

	pair.Cut(t)
	start := time.Now()
	// Data in flight when the keeper gives up: more than the socket
	// takes, so that siw is still transmitting one of these when the
	// connection is taken down.
	const inFlight = 16
	for i := range inFlight {
		c.postSend(t, driver.SendWR{ID: uint64(100 + i), Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, bufSize)}})
	}
	for _, e := range []*end{c, s} {
		err := e.h.disconnected(t)
		took := time.Since(start)
		t.Logf("%s: broken after %v: %v", e.ia.ip, took.Round(time.Millisecond), err)
		if !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("%s: OnDisconnect(%v), want ETIMEDOUT", e.ia.ip, err)
		}
		if took > bound {
			t.Errorf("%s: broken only after %v, want within %v", e.ia.ip, took, bound)
		}
	}
	// The keeper took the connection down: whatever did not complete
	// was flushed by that. A request failing with a status of its own
	// would be reported as a second, different cause (siw completes the
	// Send it was transmitting with LOC_QP_OP_ERR).
	c.h.poll()
	for _, got := range c.h.got {
		if got.Status != driver.StatusSuccess && got.Status != driver.StatusFlushed {
			t.Errorf("request %d in flight when the keeper gave up: %v, want success or flushed", got.WRID, got.Status)
		}
	}
}

// TestKeepAliveNoReadGranted: on siw, keepalive needs no RDMA Read: a
// connection whose peer grants none (keepalive off, IRD 0) keeps ORD 0,
// has a keeper that watches its TCP socket, and traffic goes on after
// probes. With the fallback of a kernel without sock_diag, such a
// connection cannot be probed: it gets no keeper (probing it anyway would
// wedge it, see keeper), and the test idles past Idle to show that
// nothing was posted.
func TestKeepAliveNoReadGranted(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		if d.transport != driver.TransportIWARP {
			t.Skip("the Read probe is iWARP's")
		}
		if os.Getenv("IN_RDMA_VM") == "1" && !tcpdiagUsable() {
			t.Fatal("the test VM's kernel does not answer sock_diag")
		}
		ka := net.KeepAliveConfig{Enable: true, Idle: 100 * time.Millisecond, Interval: time.Second, Count: 2}
		t.Run("tcp", func(t *testing.T) {
			c, s := keepAliveServerOnly(t, d, ka, tcpWatch{})
			if s.qp.conn.ord != 0 {
				t.Errorf("server ORD %d, want 0: keepalive needs no Read", s.qp.conn.ord)
			}
			k := s.qp.keep.Load()
			if k == nil || !watchesTCP(s) {
				t.Fatalf("the server end has keeper %v, want one that watches TCP", k)
			}
			time.Sleep(5 * ka.Idle)
			exchange(t, s, c)
			s.qp.mu.Lock()
			posted := k.posted
			s.qp.mu.Unlock()
			if posted == 0 {
				t.Error("no probe posted in 5 × Idle")
			}
		})
		t.Run("read", func(t *testing.T) {
			c, s := keepAliveServerOnly(t, d, ka, noSockDiag)
			if s.qp.conn.ord != 0 {
				t.Errorf("server ORD %d, want 0 against a client with IRD 0", s.qp.conn.ord)
			}
			if k := s.qp.keep.Load(); k != nil {
				t.Errorf("the server end has a keeper (ORD %d)", s.qp.conn.ord)
			}
			time.Sleep(5 * ka.Idle)
			exchange(t, s, c)
		})
	})
}

// watchesTCP reports whether e's QP has a keeper that watches the
// connection's TCP socket.
func watchesTCP(e *end) bool {
	k := e.qp.keep.Load()
	if k == nil {
		return false
	}
	e.qp.mu.Lock()
	defer e.qp.mu.Unlock()
	return k.tcp != nil
}

// keepAliveServerOnly connects two ends configured as rdmanet's (no RDMA
// Read either way), with keepalive ka on the server end only.
func keepAliveServerOnly(t *testing.T, d testDev, ka net.KeepAliveConfig, w tcpWatch) (c, s *end) {
	t.Helper()
	c, s = newEnd(t, d), newEnd(t, d)
	watchTCP(w, c, s)
	noReads(t, c, s)
	connectKeptAlive(t, c, s, driver.ConnectOptions{KeepAlive: -1}, ka)
	return c, s
}

// connectKeptAlive connects c to s, with opts on c and keepalive ka on
// the listener s accepts on.
func connectKeptAlive(t *testing.T, c, s *end, opts driver.ConnectOptions, ka net.KeepAliveConfig) {
	t.Helper()
	l := listenOn(t, s.ia, driver.ListenConfig{KeepAliveConfig: ka})
	done := serve(t, l, s, nil)
	if _, err := c.qp.ConnectWith(testCtx(t), l.Addr(), nil, opts); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if a := <-done; a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}
}

// exchange sends 64 bytes from one end to the other and checks that both
// requests complete: the connection still works.
func exchange(t *testing.T, from, to *end) {
	t.Helper()
	to.postRecv(t, 1, 0, 64)
	from.postSend(t, driver.SendWR{ID: 2, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{from.sge(0, 64)}})
	if got := to.h.next(t); got.Status != driver.StatusSuccess || got.WRID != 1 {
		t.Fatalf("receive: %+v", got)
	}
	if got := from.h.next(t); got.Status != driver.StatusSuccess || got.WRID != 2 {
		t.Fatalf("send: %+v", got)
	}
}
