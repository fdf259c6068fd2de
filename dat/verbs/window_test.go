//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestWindowSupport: rxe has type 1 memory windows, siw has none. On rxe a
// window starts unbound and binds only through a connected QP.
func TestWindowSupport(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		e := newEnd(t, d)
		wa, okPD := e.dpd.(driver.WindowAllocator)
		_, okQP := e.dqp.(driver.WindowBinder)
		if d.transport == driver.TransportIWARP {
			if okPD || okQP {
				t.Errorf("siw offers memory windows: PD %v, QP %v", okPD, okQP)
			}
			return
		}
		if !okPD || !okQP {
			t.Fatalf("rxe offers no memory windows: PD %v, QP %v", okPD, okQP)
		}
		w, err := wa.AllocWindow()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := w.Binding(); ok {
			t.Error("a new window is bound")
		}
		if _, err := e.qp.bindWindow(w, e.mr, e.mr.Addr(), 64, driver.AccessRemoteWrite); !errors.Is(err, driver.ErrNotConnected) {
			t.Errorf("bind through an unconnected QP: %v, want ErrNotConnected", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if _, err := e.qp.bindWindow(w, e.mr, e.mr.Addr(), 64, driver.AccessRemoteWrite); err == nil {
			t.Error("bind of a closed window: no error")
		}
	})
}

// forEachWindowDevice runs fn on the devices with memory windows (rxe).
func forEachWindowDevice(t *testing.T, fn func(t *testing.T, d testDev)) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		if d.transport == driver.TransportIWARP {
			t.Skip("siw has no memory windows (TestWindowSupport checks that)")
		}
		fn(t, d)
	})
}

func allocWindow(t *testing.T, e *end) *Window {
	t.Helper()
	w, err := e.pd.allocWindow()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w.(*Window)
}

// collect takes n completions, which may come from both queues in any
// order between them, by cookie.
func collect(t *testing.T, h *recorder, n int) map[uint64]driver.Completion {
	t.Helper()
	got := make(map[uint64]driver.Completion)
	for i := 0; i < n; i++ {
		c := h.next(t)
		if _, dup := got[c.WRID]; dup {
			t.Fatalf("two completions for ID %d", c.WRID)
		}
		got[c.WRID] = c
	}
	return got
}

// windowModes runs fn twice on rxe: binding windows over a registration
// of their own (what rxe gets, devLimits.windowBoundsByRegion) and
// directly over the consumer's region (what devices that check a window's
// own bounds get).
func windowModes(t *testing.T, fn func(t *testing.T, d testDev, direct bool)) {
	forEachWindowDevice(t, func(t *testing.T, d testDev) {
		for _, direct := range []bool{false, true} {
			name := "exact-registration"
			if direct {
				name = "direct"
			}
			t.Run(name, func(t *testing.T) { fn(t, d, direct) })
		}
	})
}

// newWindowEnd is newEnd with the binding mode chosen.
func newWindowEnd(t *testing.T, d testDev, direct bool) *end {
	e := newEnd(t, d)
	if direct {
		e.ia.lim.windowBoundsByRegion = false
	} else if !e.ia.lim.windowBoundsByRegion {
		t.Fatal("rxe: windows are not bound over registrations of their own (rxe checks only the region's bounds)")
	}
	return e
}

// TestBindWindow binds a window amid the binding side's own requests: the
// bind's completion is consumed by BindWindow, the requests around it
// complete once each, in order, with their cookies. A peer then writes and
// reads the window's range through its key; unbinding and closing make
// the key fail at once, and the region deregisters afterwards (rxe
// refuses while a window is bound to it).
func TestBindWindow(t *testing.T) {
	windowModes(t, func(t *testing.T, d testDev, direct bool) {
		c, s := newEnd(t, d), newWindowEnd(t, d, direct)
		connectPair(t, c, s)
		w := allocWindow(t, s)
		c.postRecv(t, 1, 0, 64)
		c.postRecv(t, 2, 64, 64)
		copy(s.buf, "ab")
		s.postSend(t, driver.SendWR{ID: 10, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{s.sge(0, 1)}})
		rkey, err := s.qp.bindWindow(w, s.mr, s.mr.Addr()+4096, 4096, driver.AccessRemoteWrite|driver.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		s.postSend(t, driver.SendWR{ID: 11, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{s.sge(1, 1)}})
		if cp := s.h.next(t); cp.WRID != 10 || cp.Status != driver.StatusSuccess {
			t.Fatalf("first send: %+v", cp)
		}
		if cp := s.h.next(t); cp.WRID != 11 || cp.Status != driver.StatusSuccess {
			t.Fatalf("second send: %+v (the bind must not complete in its place)", cp)
		}
		s.h.none(t)
		if got, ok := w.Binding(); !ok || got != rkey {
			t.Fatalf("Binding %#x %v, want %#x", got, ok, rkey)
		}
		if rkey == s.mr.RKey() {
			t.Fatal("the window has the region's key")
		}

		data := pattern(4096, 3)
		copy(c.buf, data)
		win := driver.RemoteSegment{Addr: s.mr.Addr() + 4096, Length: 4096, RKey: rkey}
		c.postSend(t, driver.SendWR{ID: 20, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 4096)}, Remote: win})
		c.postSend(t, driver.SendWR{ID: 21, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(8192, 4096)}, Remote: win})
		for cookie, cp := range collect(t, c.h, 4) {
			if cp.Status != driver.StatusSuccess {
				t.Fatalf("client completion %d: %+v", cookie, cp)
			}
		}
		if !bytes.Equal(s.buf[4096:8192], data) || !bytes.Equal(c.buf[8192:12288], data) {
			t.Fatal("data through the window differs")
		}
		if !allZero(s.buf[2:4096]) || !allZero(s.buf[8192:]) {
			t.Fatal("bytes outside the window changed")
		}

		// Unbind, then bind again: the old key is dead, the new one works.
		if k, err := s.qp.bindWindow(w, nil, 0, 0, 0); err != nil || k != 0 {
			t.Fatalf("unbind: %#x, %v", k, err)
		}
		if _, ok := w.Binding(); ok {
			t.Fatal("bound after the unbind")
		}
		rkey2, err := s.qp.bindWindow(w, s.mr, s.mr.Addr(), 64, driver.AccessRemoteRead)
		if err != nil || rkey2 == rkey {
			t.Fatalf("rebind: %#x, %v", rkey2, err)
		}
		c.postSend(t, driver.SendWR{ID: 22, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 2)},
			Remote: driver.RemoteSegment{Addr: s.mr.Addr(), Length: 2, RKey: rkey2}})
		if cp := c.h.next(t); cp.WRID != 22 || cp.Status != driver.StatusSuccess || string(c.buf[:2]) != "ab" {
			t.Fatalf("read through the rebound window: %+v %q", cp, c.buf[:2])
		}
		s.h.none(t)

		// Close kills the key: a Read with it fails at the device.
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.mr.Close(); err != nil {
			t.Fatalf("deregister after the window's close: %v", err)
		}
		c.postSend(t, driver.SendWR{ID: 23, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 2)},
			Remote: driver.RemoteSegment{Addr: s.mr.Addr(), Length: 2, RKey: rkey2}})
		if cp := c.h.next(t); cp.WRID != 23 || cp.Status != driver.StatusRemoteAccess {
			t.Fatalf("read with a closed window's key: %+v, want a remote access error", cp)
		}
	})
}

// TestWindowBounds: a window's key reaches its range and nothing else of
// its region. rxe on its own lets such Writes land anywhere in the region
// (measured on 6.1), hence the exact registrations; each Write must fail
// with a remote access error and place nothing.
func TestWindowBounds(t *testing.T) {
	forEachWindowDevice(t, func(t *testing.T, d testDev) {
		for _, tc := range []struct{ off, n int }{{0, 64}, {4000, 200}, {4096, 4097}, {8192, 64}} {
			c, s := newEnd(t, d), newWindowEnd(t, d, false)
			connectPair(t, c, s)
			w := allocWindow(t, s)
			rkey, err := s.qp.bindWindow(w, s.mr, s.mr.Addr()+4096, 4096, driver.AccessRemoteWrite|driver.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			copy(c.buf, pattern(tc.n, 1))
			c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, tc.n)},
				Remote: driver.RemoteSegment{Addr: s.mr.Addr() + uint64(tc.off), Length: uint32(tc.n), RKey: rkey}})
			if cp := c.h.next(t); cp.Status != driver.StatusRemoteAccess {
				t.Errorf("write [%d, +%d) through the window [4096, +4096): %+v, want a remote access error", tc.off, tc.n, cp)
			}
			if !allZero(s.buf) {
				t.Errorf("write [%d, +%d) through the window [4096, +4096) placed data", tc.off, tc.n)
			}
		}
	})
}

// TestBindWindowRefused: a bind beyond the region is refused before
// posting where the window gets its own registration (the connection
// lives on, the window is unchanged), and by the device otherwise: that
// comes back as ErrAccessRefused at once, breaks the connection like any
// failed request, and leaves the window unbound and the region free to
// go.
func TestBindWindowRefused(t *testing.T) {
	forEachWindowDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newWindowEnd(t, d, false)
		connectPair(t, c, s)
		w := allocWindow(t, s)
		s.postRecv(t, 1, 0, 64)
		rkey, err := s.qp.bindWindow(w, s.mr, s.mr.Addr(), 64, driver.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.qp.bindWindow(w, s.mr, s.mr.Addr()+bufSize-16, 64, driver.AccessRemoteWrite); !errors.Is(err, driver.ErrInvalidAddress) {
			t.Fatalf("bind beyond the region: %v, want ErrInvalidAddress", err)
		}
		if got, ok := w.Binding(); !ok || got != rkey {
			t.Fatalf("after a bind refused before posting: Binding %#x %v, want %#x", got, ok, rkey)
		}

		s.ia.lim.windowBoundsByRegion = false // now the device judges
		start := time.Now()
		_, err = s.qp.bindWindow(w, s.mr, s.mr.Addr()+bufSize-16, 64, driver.AccessRemoteWrite)
		t.Logf("bind beyond the region: %v (%v)", err, time.Since(start))
		if !errors.Is(err, driver.ErrAccessRefused) {
			t.Fatalf("bind beyond the region: %v, want ErrAccessRefused", err)
		}
		if time.Since(start) >= bindTimeout {
			t.Error("the refusal waited for the timeout")
		}
		if _, ok := w.Binding(); ok {
			t.Error("the window is bound after a refused bind")
		}
		if err := s.h.disconnected(t); err == nil {
			t.Error("Disconnected(nil) after a refused bind, want an error")
		}
		// Neither the receive's flush (package dat flushes it) nor the
		// bind's own completion reaches the handler.
		s.h.none(t)
		if _, err := s.qp.bindWindow(w, s.mr, s.mr.Addr(), 64, driver.AccessRemoteWrite); !errors.Is(err, driver.ErrNotConnected) {
			t.Errorf("bind on the broken connection: %v, want ErrNotConnected", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.mr.Close(); err != nil {
			t.Fatalf("deregister: %v", err)
		}
	})
}

// TestBindWindowTimeout: a bind queued behind a Send the peer never
// receives (no receive posted: RNR retries forever) cannot complete.
// BindWindow gives up after bindTimeout with DeadlineExceeded and breaks
// the connection so that the device flushes both; neither flush reaches
// the handler (package dat flushes the Send).
func TestBindWindowTimeout(t *testing.T) {
	forEachWindowDevice(t, func(t *testing.T, d testDev) {
		old := bindTimeout
		bindTimeout = time.Second
		t.Cleanup(func() { bindTimeout = old })
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		w := allocWindow(t, c)
		c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 8)}})
		start := time.Now()
		_, err := c.qp.bindWindow(w, c.mr, c.mr.Addr(), 64, driver.AccessRemoteRead)
		took := time.Since(start)
		t.Logf("bind behind a stuck Send: %v after %v", err, took)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bind behind a stuck Send: %v, want DeadlineExceeded", err)
		}
		if took < bindTimeout {
			t.Errorf("gave up after %v, before bindTimeout %v", took, bindTimeout)
		}
		if _, ok := w.Binding(); ok {
			t.Error("the window is bound after a timed-out bind")
		}
		if err := c.h.disconnected(t); err == nil {
			t.Error("Disconnected(nil) after a timed-out bind, want an error")
		}
		c.h.none(t)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.mr.Close(); err != nil {
			t.Fatalf("deregister: %v", err)
		}
	})
}
