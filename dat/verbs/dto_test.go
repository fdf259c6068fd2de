//go:build verbs && linux && cgo

package verbs

import (
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
