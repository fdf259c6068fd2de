//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// maxInlineOf is the inline data the device granted the end's connection.
func maxInlineOf(t *testing.T, e *end) int {
	t.Helper()
	e.qp.mu.Lock()
	defer e.qp.mu.Unlock()
	if e.qp.conn == nil || e.qp.conn.qp == nil {
		t.Fatal("no verbs QP")
	}
	return int(e.qp.conn.maxInline)
}

// inlinedOf is how many requests the end's QP posted inline.
func inlinedOf(e *end) uint64 {
	e.qp.mu.Lock()
	defer e.qp.mu.Unlock()
	return e.qp.inlined
}

// heapSGE names b, which is not registered (its lkey, 0, names no region).
func heapSGE(b []byte) driver.SGE {
	return driver.SGE{Addr: uint64(uintptr(unsafe.Pointer(&b[0]))), Length: uint32(len(b))}
}

// TestInlineSends sends Sends and RDMA Writes of 1, max-1 and max bytes
// (max: the max_inline_data the device granted) and overwrites their
// source as soon as each post returns: they are posted inline, and
// arrive intact. One byte more is not inline, and arrives intact too.
// Inline data keeps the device's protection: a Send from memory that is
// not registered fails, of max bytes (the provider checks the key itself,
// the device reads no region) as of max+1 (the device checks).
func TestInlineSends(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		const slot = 1024
		for i := range 16 {
			s.postRecv(t, uint64(i), i*slot, slot)
		}
		connectPair(t, c, s)
		m := maxInlineOf(t, c)
		t.Logf("%s: max_inline_data %d", d.name, m)
		if m < inlineMin {
			t.Fatalf("max_inline_data %d: the device granted no inline data", m)
		}
		rid := 0 // the next receive
		recv := func(n int) []byte {
			t.Helper()
			rp := s.h.next(t)
			if rp.Status != driver.StatusSuccess || rp.WRID != uint64(rid) || rp.Length != uint32(n) {
				t.Fatalf("receive: %+v, want %d bytes in receive %d", rp, n, rid)
			}
			rid++
			return s.buf[int(rp.WRID)*slot : int(rp.WRID)*slot+n]
		}
		wid := uint64(100)
		// send posts wr, checks whether it went inline, overwrites its
		// source and waits for its completion.
		send := func(wr driver.SendWR, inline bool) {
			t.Helper()
			wid++
			wr.ID, wr.Flags = wid, driver.SendSignaled
			before := inlinedOf(c)
			c.postSend(t, wr)
			if got := inlinedOf(c) - before; got != map[bool]uint64{true: 1, false: 0}[inline] {
				t.Fatalf("%d bytes: %d posted inline, want inline %v", wr.Local[0].Length, got, inline)
			}
			if inline {
				for _, g := range wr.Local {
					clear(c.buf[g.Addr-c.mr.Addr() : g.Addr-c.mr.Addr()+uint64(g.Length)])
				}
			}
			if sp := c.h.next(t); sp.Status != driver.StatusSuccess || sp.WRID != wid {
				t.Fatalf("%d: %+v", wid, sp)
			}
		}
		writeAt := 32 << 10 // Writes land in the upper half of s's buffer
		for _, n := range []int{1, m - 1, m, m + 1} {
			inline := n <= m
			want := pattern(n, byte(n))
			copy(c.buf, want)
			// Two SGEs where there are bytes for two.
			local := []driver.SGE{c.sge(0, n)}
			if n > 1 {
				local = []driver.SGE{c.sge(0, 1), c.sge(1, n-1)}
			}
			send(driver.SendWR{Op: driver.OpSend, Local: local}, inline)
			if got := recv(n); !bytes.Equal(got, want) {
				t.Fatalf("Send of %d bytes: got %x, want %x", n, got, want)
			}
			// An RDMA Write the same way, then a Send behind it: its
			// receive shows that the Write was placed.
			want = pattern(n, byte(n+1))
			copy(c.buf, want)
			send(driver.SendWR{Op: driver.OpRDMAWrite, Local: []driver.SGE{c.sge(0, n)},
				Remote: driver.RemoteSegment{Addr: s.mr.Addr() + uint64(writeAt), Length: uint32(n), RKey: s.mr.RKey()}}, inline)
			send(driver.SendWR{Op: driver.OpSend, Local: []driver.SGE{c.sge(0, 1)}}, true)
			recv(1)
			if got := s.buf[writeAt : writeAt+n]; !bytes.Equal(got, want) {
				t.Fatalf("RDMA Write of %d bytes: got %x, want %x", n, got, want)
			}
		}
		// Out of a registered region, or from memory that is not
		// registered: not inline, and the device fails it.
		heap := make([]byte, m)
		for _, registered := range []bool{true, false} {
			e, f := newEnd(t, d), newEnd(t, d)
			f.postRecv(t, 1, 0, slot)
			connectPair(t, e, f)
			seg := heapSGE(heap)
			if registered {
				seg = e.sge(bufSize-m/2, m) // past the region's end
			}
			e.postSend(t, driver.SendWR{ID: 7, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{seg}})
			if n := inlinedOf(e); n != 0 {
				t.Fatalf("%d requests posted inline from an invalid segment", n)
			}
			sp := e.h.next(t)
			t.Logf("a Send of %d bytes from an invalid segment (lkey %#x): %+v", m, seg.LKey, sp)
			if sp.WRID != 7 || sp.Status == driver.StatusSuccess {
				t.Fatalf("a Send of %d bytes from an invalid segment: %+v, want a failure", m, sp)
			}
			t.Logf("initiator OnDisconnect(%v)", e.h.disconnected(t))
		}
	})
}

// TestUnsignalledRequests posts RDMA Writes without SendSignaled, inline
// and not, and then a signalled Send: only the Send completes (the
// device reports no success of an unsignalled request), the Writes'
// bytes are at the target when the Send arrives, and the drain counts
// hold the one signalled request.
func TestUnsignalledRequests(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		s.postRecv(t, 1, 0, 64)
		connectPair(t, c, s)
		m := maxInlineOf(t, c)
		sizes := []int{8 << 10, 1, m, m + 1, 4 << 10, 7}
		off := 1024
		for i, n := range sizes {
			copy(c.buf[off:], pattern(n, byte(i)))
			c.postSend(t, driver.SendWR{ID: uint64(10 + i), Op: driver.OpRDMAWrite, Local: []driver.SGE{c.sge(off, n)},
				Remote: driver.RemoteSegment{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), RKey: s.mr.RKey()}})
			off += n
		}
		c.postSend(t, driver.SendWR{ID: 20, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 4)}})
		if sp := c.h.next(t); sp.WRID != 20 || sp.Status != driver.StatusSuccess {
			t.Fatalf("first completion %+v, want the Send's (20)", sp)
		}
		if rp := s.h.next(t); rp.Status != driver.StatusSuccess {
			t.Fatalf("receive: %+v", rp)
		}
		off = 1024
		for i, n := range sizes {
			if got := s.buf[off : off+n]; !bytes.Equal(got, pattern(n, byte(i))) {
				t.Fatalf("unsignalled Write %d (%d bytes) did not arrive intact", i, n)
			}
			off += n
		}
		c.h.none(t)
		if p, dn := c.qp.sendPosted.Load(), c.qp.sendDone.Load(); p != 1 || dn != 1 {
			t.Fatalf("send queue counts: %d posted, %d done, want 1 and 1", p, dn)
		}
	})
}

// TestGracefulDisconnectAfterUnsignalled posts RDMA Writes of the whole
// target buffer without SendSignaled and disconnects gracefully at once.
// Nothing would report when they are done, so the provider posts a
// signalled marker behind them and waits for it: the bytes are all at the
// target, the marker (a zero-length RDMA Write) ends nothing there, and
// it reaches no consumer.
func TestGracefulDisconnectAfterUnsignalled(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		const piece = 8 << 10
		want := pattern(bufSize, 5)
		copy(c.buf, want)
		for i := range bufSize / piece {
			c.postSend(t, driver.SendWR{ID: uint64(i), Op: driver.OpRDMAWrite, Local: []driver.SGE{c.sge(i*piece, piece)},
				Remote: driver.RemoteSegment{Addr: s.mr.Addr() + uint64(i*piece), Length: piece, RKey: s.mr.RKey()}})
		}
		if err := c.qp.Disconnect(true); err != nil {
			t.Fatal(err)
		}
		if p, dn := c.qp.sendPosted.Load(), c.qp.sendDone.Load(); p != 1 || dn != 1 {
			t.Fatalf("send queue counts: %d posted, %d done, want 1 and 1 (the marker)", p, dn)
		}
		if err := s.h.disconnected(t); err != nil {
			t.Fatalf("target OnDisconnect(%v), want a clean disconnect", err)
		}
		if !bytes.Equal(s.buf, want) {
			i := 0
			for i < len(want) && s.buf[i] == want[i] {
				i++
			}
			t.Fatalf("the target's buffer differs from byte %d on", i)
		}
		c.h.none(t)
		s.h.none(t)
	})
}

// TestUnsignalledFailureReports writes with a bad rkey without
// SendSignaled: the failure still completes, with the request's ID (rxe;
// on iWARP a Write completes once sent and only the target notices).
func TestUnsignalledFailureReports(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		if d.transport == driver.TransportIWARP {
			t.Skip("an iWARP initiator completes a Write once sent")
		}
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		c.postSend(t, driver.SendWR{ID: 7, Op: driver.OpRDMAWrite, Local: []driver.SGE{c.sge(0, 4096)},
			Remote: driver.RemoteSegment{Addr: s.mr.Addr(), Length: 4096, RKey: s.mr.RKey() ^ 0x5a5a00}})
		cp := c.h.next(t)
		t.Logf("unsignalled Write with a bad rkey: %+v", cp)
		if cp.WRID != 7 || cp.Status != driver.StatusRemoteAccess || cp.QPTag != c.tag {
			t.Fatalf("unsignalled Write with a bad rkey: %+v, want a remote access error for 7", cp)
		}
		if err := c.h.disconnected(t); err == nil {
			t.Error("OnDisconnect(nil) after a failed request, want an error")
		}
		c.h.none(t)
	})
}

// The inline size asked for halves with each refusal, down to none, and
// never grows back.
func TestInlineAskSteps(t *testing.T) {
	var a inlineAsk
	var got []uint32
	for range 5 {
		n := a.next()
		got = append(got, n)
		a.refuse(n)
	}
	a.refuse(inlineWanted)
	got = append(got, a.next())
	if fmt.Sprint(got) != fmt.Sprint([]uint32{inlineWanted, inlineWanted / 2, inlineWanted / 4, inlineWanted / 8, 0, 0}) {
		t.Fatalf("sizes asked %v", got)
	}
}

// TestInlineAfterInvalidQP makes QP creation fail for another reason
// than inline data (one send SGE too many, EINVAL as well): the IA's
// later QPs still get the inline data the first one would have.
func TestInlineAfterInvalidQP(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		bad := defaultQPConfig(c.dpd)
		bad.SendCQ, bad.RecvCQ = c.cq, c.cq
		bad.MaxSendSGE = c.ia.attr.MaxSGE + 1
		q := newQP(c.ia, bad)
		defer q.Close()
		if _, err := q.Connect(testCtx(t), &net.TCPAddr{IP: c.ia.ip, Port: unusedPort(t, c.ia)}, nil); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("connect with %d send SGEs: %v, want EINVAL", bad.MaxSendSGE, err)
		}
		if n := c.ia.inline.next(); n != inlineWanted {
			t.Fatalf("after a QP with too many SGEs the IA asks for %d bytes inline, want %d", n, inlineWanted)
		}
		connectPair(t, c, s)
		t.Logf("%s: max_inline_data %d", d.name, maxInlineOf(t, c))
	})
}
