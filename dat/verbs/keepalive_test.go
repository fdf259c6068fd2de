//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/internal/rxepair"
)

// TestKeepAliveKeeper: which connections get a keeper. Keepalive is on by
// default, as with TCP; a negative KeepAlive turns it off; iWARP devices
// never get one (a Write completes there before the peer acknowledges it).
func TestKeepAliveKeeper(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		for _, tc := range []struct {
			name string
			opts driver.ConnectOptions
			want bool
		}{
			{"default", driver.ConnectOptions{}, d.transport != driver.TransportIWARP},
			{"off", driver.ConnectOptions{KeepAlive: -1}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, s := newEnd(t, d), newEnd(t, d)
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
					if k != nil && (k.idle != driver.DefaultKeepAliveIdle || k.limit != driver.DefaultKeepAliveInterval*driver.DefaultKeepAliveCount) {
						t.Errorf("keeper idle %v, limit %v: want package net's defaults", k.idle, k.limit)
					}
				}
			})
		}
	})
}

// TestKeepAliveDeadPeer: on two rxe devices whose traffic crosses a veth
// (rxepair), an idle connection with a short keepalive is probed without
// harm while the peer is there, and once the link is cut both ends report
// the connection broken with ETIMEDOUT within a few times Idle +
// Interval × Count.
func TestKeepAliveDeadPeer(t *testing.T) {
	pair := rxepair.New(t)
	ka := net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 2}
	const bound = 3 * 3 * time.Second // 3 × (Idle + Interval × Count)
	c := newEnd(t, testDev{name: "rxe-pair-client", addr: pair.ClientIP, transport: driver.TransportRoCE})
	s := newEnd(t, testDev{name: "rxe-pair-server", addr: pair.ServerIP, transport: driver.TransportRoCE})
	l := listenOn(t, s.ia, driver.ListenConfig{KeepAliveConfig: ka})
	done := serve(t, l, s, nil)
	if _, err := c.qp.ConnectWith(testCtx(t), l.Addr(), nil, driver.ConnectOptions{KeepAliveConfig: ka}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if a := <-done; a.err != nil {
		t.Fatalf("accept: %v", a.err)
	}

	// Idle long enough for a few probes each way: they do no harm.
	time.Sleep(4 * ka.Idle)
	for _, e := range []*end{c, s} {
		select {
		case err := <-e.h.disc:
			t.Fatalf("a healthy idle connection ended: %v", err)
		default:
		}
		k := e.qp.keep.Load()
		e.qp.mu.Lock()
		posted := k.posted
		e.qp.mu.Unlock()
		if posted == 0 || k.done.Load() == 0 {
			t.Errorf("%d probes posted, %d completed: want some of each", posted, k.done.Load())
		}
	}
	s.postRecv(t, 1, 0, 64)
	c.postSend(t, driver.SendWR{ID: 2, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 64)}})
	if got := s.h.next(t); got.Status != driver.StatusSuccess || got.WRID != 1 {
		t.Fatalf("receive after the probes: %+v", got)
	}
	if got := c.h.next(t); got.Status != driver.StatusSuccess || got.WRID != 2 {
		t.Fatalf("send after the probes: %+v", got)
	}

	pair.Cut(t)
	start := time.Now()
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
}
