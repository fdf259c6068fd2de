//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"os"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestRemoteAccessError reads with a bad rkey: on rxe the request fails
// with a remote access error, named by its queue only; on siw it is
// flushed. The connection ends on both sides, and no flush reaches the
// handler (package dat flushes what the provider did not finish). The
// drivertest suite checks the contract's side (Protection/ReadBadRKey);
// this pins the statuses the devices report. (An RDMA Write is no test on
// iWARP: it completes locally once sent, and only the target notices the
// bad STag.)
func TestRemoteAccessError(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		s.postRecv(t, 1, 0, 64)
		connectPair(t, c, s)
		c.postRecv(t, 50, 0, 64)
		c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{c.sge(0, 64)}, Remote: driver.RemoteSegment{Addr: s.mr.Addr(), Length: 64, RKey: s.mr.RKey() ^ 0x5a5a00}})
		if d.transport == driver.TransportRoCE {
			cp := c.h.next(t)
			t.Logf("read with a bad rkey: %+v", cp)
			// A failed work completion has no opcode: the provider
			// names only the queue (package dat knows the request's op).
			if cp.WRID != 1 || cp.Op != driver.OpSend || cp.Status != driver.StatusRemoteAccess || cp.QPTag != c.tag {
				t.Fatalf("read with a bad rkey: %+v, want a remote access error", cp)
			}
		}
		// On siw the target's TERMINATE ends the connection and the
		// Read is flushed, which the provider drops like the receive's
		// flush (c.h.none below).
		err := c.h.disconnected(t)
		t.Logf("initiator OnDisconnect(%v)", err)
		if d.transport == driver.TransportRoCE && err == nil {
			t.Error("rxe: OnDisconnect(nil) after a failed request, want an error")
		}
		c.h.none(t)
		// The target's connection ends too.
		t.Logf("target OnDisconnect(%v)", s.h.disconnected(t))
		s.h.none(t)
	})
}

// TestRecvTooSmall sends more than the posted receive holds: the receive
// fails (the status is the device's: siw LOC_LEN_ERR, rxe LOC_QP_OP_ERR)
// and the connection ends, broken on rxe. The drivertest suite checks the
// contract's side (Data/RecvTooSmall); this pins the devices' ways.
func TestRecvTooSmall(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		s.postRecv(t, 1, 0, 16)
		s.postRecv(t, 2, 16, 16)
		connectPair(t, c, s)
		c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 100)}})
		rp := s.h.next(t)
		t.Logf("receive: %+v; send: %+v", rp, c.h.next(t))
		if rp.WRID != 1 || rp.Status == driver.StatusSuccess || rp.Status == driver.StatusFlushed {
			t.Errorf("receive of 100 bytes into 16: %+v, want an error", rp)
		}
		// rxe breaks the connection through the failed completion (an
		// error); on siw the sender's TERMINATE and TCP close race the
		// error CQE, so the CM's orderly DISCONNECTED may come first.
		err := s.h.disconnected(t)
		t.Logf("receiver Disconnected(%v)", err)
		if d.transport == driver.TransportRoCE && err == nil {
			t.Error("receiver: Disconnected(nil) after a failed receive, want an error")
		}
	})
}

// TestSmallSendsAcrossPages sends bursts of 20-byte messages whose source
// crosses a page boundary. Kernel siw copies a payload of at most 32
// bytes from a single SGE into the packet header itself (siw_try_1seg),
// and when the page crossing is handled by its transmit thread (a post
// made while the send queue is busy) it copies the wrong lengths from the
// wrong places: part of the message arrives as bytes from past the end of
// the first page. The provider splits such an SGE at the page boundary on
// siw (post.go), which takes the other, correct path. Such small
// messages go inline where the device allows it, which does not take the
// path either; "noinline" makes the sender's QP without inline data.
func TestSmallSendsAcrossPages(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		for _, inline := range []bool{true, false} {
			t.Run(map[bool]string{true: "inline", false: "noinline"}[inline], func(t *testing.T) {
				smallSendsAcrossPages(t, d, inline)
			})
		}
	})
}

func smallSendsAcrossPages(t *testing.T, d testDev, inline bool) {
	c, s := newEnd(t, d), newEnd(t, d)
	if !inline {
		c.ia.inline.refuse(1) // ask for none
	}
	// One message per page boundary of the 64 KiB buffer, all posted
	// at once.
	const burst, size = 12, 20
	post := func() {
		for i := range burst {
			s.postRecv(t, uint64(i), i*64, 64)
		}
	}
	post()
	connectPair(t, c, s)
	if m := maxInlineOf(t, c); inline != (m >= size) {
		if !inline {
			// rxe rounds inline data up to its WQE's SGE room (2 x 16
			// bytes here), even from nothing.
			t.Skipf("max_inline_data %d although none was asked for", m)
		}
		t.Fatalf("max_inline_data %d", m)
	}
	ps := os.Getpagesize()
	// src is the offset in c's buffer of message i: 7 bytes before
	// the end of a page, the rest on the next.
	base := ps - int(c.mr.Addr()%uint64(ps))
	src := func(i int) int { return base + i*ps - 7 }
	bad := 0
	for round := range 20 {
		for i := range burst {
			copy(c.buf[src(i):], pattern(size, byte(round*burst+i)))
		}
		for i := range burst {
			c.postSend(t, driver.SendWR{ID: uint64(i), Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(src(i), size)}})
		}
		for range burst {
			rp := s.h.next(t)
			want := pattern(size, byte(round*burst+int(rp.WRID)))
			got := s.buf[int(rp.WRID)*64 : int(rp.WRID)*64+size]
			if rp.Status != driver.StatusSuccess || rp.Length != size || !bytes.Equal(got, want) {
				if bad < 5 {
					t.Errorf("round %d, message %d: %+v: got %x, want %x", round, rp.WRID, rp, got, want)
				}
				bad++
			}
		}
		for range burst {
			if sp := c.h.next(t); sp.Status != driver.StatusSuccess {
				t.Fatalf("send: %+v", sp)
			}
		}
		post()
	}
	if bad > 0 {
		t.Fatalf("%d of %d messages damaged", bad, 20*burst)
	}
}
