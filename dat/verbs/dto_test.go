//go:build verbs && linux && cgo

package verbs

import (
	"bytes"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestSendRecv exchanges Sends both ways. The server's receives are posted
// before the connection exists (they wait for the verbs QP), the client's
// after; completions carry cookies, lengths and the Signaled flag in post
// order.
func TestSendRecv(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		for i := 0; i < 3; i++ {
			s.postRecv(t, uint64(100+i), 4096*i, 4096)
		}
		connectPair(t, c, s)
		c.postRecv(t, 200, 0, 4096)

		msgs := [][]byte{pattern(1000, 1), pattern(3000, 2), nil}
		for i, m := range msgs {
			off := 8192 + 4096*i
			copy(c.buf[off:], m)
			flags := driver.SendSignaled
			if i == 1 {
				flags = 0 // unsignalled: the provider completes it all the same
			}
			local := []driver.SGE{c.sge(off, len(m))}
			if len(m) == 0 {
				local = nil
			}
			c.postSend(t, driver.SendWR{ID: uint64(i), Op: driver.OpSend, Flags: flags | driver.SendSolicited, Local: local})
		}
		for i, m := range msgs {
			cp := c.h.next(t)
			if cp.WRID != uint64(i) || cp.Op != driver.OpSend || cp.Status != driver.StatusSuccess || cp.QPTag != c.tag || cp.Length != uint32(len(m)) {
				t.Errorf("send %d completion %+v", i, cp)
			}
			rp := s.h.next(t)
			if rp.WRID != uint64(100+i) || rp.Op != driver.OpRecv || rp.Status != driver.StatusSuccess || rp.Length != uint32(len(m)) {
				t.Errorf("recv %d completion %+v", i, rp)
			}
			if !bytes.Equal(s.buf[4096*i:4096*i+len(m)], m) {
				t.Errorf("message %d corrupted", i)
			}
		}
		// Back the other way, with two segments.
		copy(s.buf[20000:], "hello, ")
		copy(s.buf[30000:], "client")
		s.postSend(t, driver.SendWR{ID: 9, Op: driver.OpSend, Flags: driver.SendSignaled,
			Local: []driver.SGE{s.sge(20000, 7), s.sge(30000, 6)}})
		if cp := s.h.next(t); cp.WRID != 9 || cp.Status != driver.StatusSuccess {
			t.Errorf("server send: %+v", cp)
		}
		if rp := c.h.next(t); rp.WRID != 200 || rp.Length != 13 || string(c.buf[:13]) != "hello, client" {
			t.Errorf("client recv: %+v %q", rp, c.buf[:13])
		}
		c.h.none(t)
		s.h.none(t)
	})
}

func TestRDMAWriteRead(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		data := pattern(10000, 9)
		copy(c.buf, data)
		remote := driver.RemoteSegment{Addr: s.mr.Addr() + 5000, Length: uint32(len(data)), RKey: s.mr.RKey()}
		c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled,
			Local: []driver.SGE{c.sge(0, len(data))}, Remote: remote})
		if cp := c.h.next(t); cp.WRID != 1 || cp.Op != driver.OpRDMAWrite || cp.Status != driver.StatusSuccess || cp.Length != uint32(len(data)) {
			t.Fatalf("write completion %+v", cp)
		}
		if !bytes.Equal(s.buf[5000:5000+len(data)], data) {
			t.Fatal("RDMA Write did not land")
		}
		// Read it back into another part of the client's buffer. siw
		// allows one local SGE for a Read (MaxReadSGE 1).
		c.postSend(t, driver.SendWR{ID: 2, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{c.sge(32768, len(data))}, Remote: remote})
		if cp := c.h.next(t); cp.WRID != 2 || cp.Op != driver.OpRDMARead || cp.Status != driver.StatusSuccess || cp.Length != uint32(len(data)) {
			t.Fatalf("read completion %+v", cp)
		}
		if !bytes.Equal(c.buf[32768:32768+len(data)], data) {
			t.Fatal("RDMA Read returned other data")
		}
		s.h.none(t) // one-sided operations complete nothing at the target
	})
}

// TestRemoteAccessError reads with a bad rkey: the request fails (rxe:
// remote access error), the connection is broken, and what is posted,
// then or later, flushes. (An RDMA Write is no test on iWARP: it completes
// locally once sent, and only the target notices the bad STag.)
func TestRemoteAccessError(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		s.postRecv(t, 1, 0, 64)
		connectPair(t, c, s)
		c.postRecv(t, 50, 0, 64)
		c.postSend(t, driver.SendWR{ID: 1, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{c.sge(0, 64)}, Remote: driver.RemoteSegment{Addr: s.mr.Addr(), Length: 64, RKey: s.mr.RKey() ^ 0x5a5a00}})
		cp := c.h.next(t)
		t.Logf("read with a bad rkey: %+v", cp)
		// A failed work completion has no opcode: the provider names
		// only the queue (package dat knows the request's op).
		if cp.WRID != 1 || cp.Op != driver.OpSend || cp.Status == driver.StatusSuccess || cp.QPTag != c.tag {
			t.Fatalf("read with a bad rkey: %+v", cp)
		}
		if d.transport == driver.TransportRoCE && cp.Status != driver.StatusRemoteAccess {
			t.Errorf("rxe status %d, want RemoteAccess", cp.Status)
		}
		err := c.h.disconnected(t)
		t.Logf("initiator OnDisconnect(%v)", err)
		if d.transport == driver.TransportRoCE && err == nil {
			t.Error("rxe: OnDisconnect(nil) after a failed request, want an error")
		}
		// OnDisconnect comes after quiescence: the receive's flush is
		// there to poll without waiting.
		c.h.poll()
		if len(c.h.got) != 1 || c.h.got[0].WRID != 50 || c.h.got[0].Status != driver.StatusFlushed || c.h.got[0].Op != driver.OpRecv {
			t.Errorf("client completions after the error: %+v, want receive 50 flushed", c.h.got)
		}
		c.h.got = nil
		// Posts on the broken connection are dropped, for package dat to
		// flush.
		c.postSend(t, driver.SendWR{ID: 2, Op: driver.OpSend, Local: []driver.SGE{c.sge(0, 8)}})
		c.h.none(t)
		// The target's connection ends too; its receive flushes.
		t.Logf("target OnDisconnect(%v)", s.h.disconnected(t))
		if rp := s.h.next(t); rp.WRID != 1 || rp.Status != driver.StatusFlushed {
			t.Errorf("server receive: %+v, want flushed", rp)
		}
	})
}

// TestRecvTooSmall sends more than the posted receive holds: the receive
// fails (the status is the device's: siw LOC_LEN_ERR, rxe LOC_QP_OP_ERR)
// and the connection ends.
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
		if rp := s.h.next(t); rp.WRID != 2 || rp.Status != driver.StatusFlushed {
			t.Errorf("second receive: %+v, want flushed", rp)
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

// TestFlushOnDisconnect: once an abrupt Disconnect returns, the device's
// flushes of everything posted are there to poll at once, in post order,
// with no drain marker among them; later posts are dropped.
func TestFlushOnDisconnect(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		for i := 0; i < 5; i++ {
			c.postRecv(t, uint64(i), 64*i, 64)
		}
		if err := c.qp.Disconnect(false); err != nil {
			t.Fatal(err)
		}
		c.h.poll()
		if len(c.h.got) != 5 {
			t.Fatalf("after Disconnect: %d completions %+v, want the 5 receives flushed", len(c.h.got), c.h.got)
		}
		for i, cp := range c.h.got {
			if cp.WRID != uint64(i) || cp.Status != driver.StatusFlushed || cp.Op != driver.OpRecv || cp.QPTag != c.tag {
				t.Fatalf("flush %d: %+v", i, cp)
			}
		}
		c.h.got = nil
		if err := c.qp.PostRecv(driver.RecvWR{ID: 10, Local: []driver.SGE{c.sge(0, 64)}}); err != nil {
			t.Errorf("receive after disconnect: %v, want nil (dropped)", err)
		}
		if err := c.qp.PostSend(driver.SendWR{ID: 11, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 8)}}); err != nil {
			t.Errorf("send after disconnect: %v, want nil (dropped)", err)
		}
		c.h.none(t)
		// The peer sees an orderly disconnect.
		if err := s.h.disconnected(t); err != nil {
			t.Errorf("peer OnDisconnect(%v), want nil", err)
		}
		select {
		case err := <-c.h.disc:
			t.Errorf("local Disconnect reported OnDisconnect(%v)", err)
		default:
		}
		if err := c.qp.Disconnect(true); err != nil {
			t.Errorf("second Disconnect: %v", err)
		}
	})
}

// TestCloseQuiesces closes a QP with receives waiting for a connection
// (dropped: they never reached the device) and one with receives posted
// on a live connection (their flushes are there once Close returns).
func TestCloseQuiesces(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		idle := newEnd(t, d)
		idle.postRecv(t, 1, 0, 64)
		idle.postRecv(t, 2, 64, 64)
		idle.qp.Close()
		idle.h.none(t)
		c, s := newEnd(t, d), newEnd(t, d)
		connectPair(t, c, s)
		s.postRecv(t, 3, 0, 64)
		s.qp.Close()
		s.h.poll()
		if len(s.h.got) != 1 || s.h.got[0].WRID != 3 || s.h.got[0].Status != driver.StatusFlushed {
			t.Errorf("after Close: %+v, want receive 3 flushed", s.h.got)
		}
		if err := c.h.disconnected(t); err != nil {
			t.Logf("peer of a closed QP: OnDisconnect(%v)", err)
		}
	})
}
