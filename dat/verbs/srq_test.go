//go:build verbs && linux && cgo

package verbs

import (
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestSRQ(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		c, s := newEnd(t, d), newEnd(t, d)
		low := make(chan struct{}, 4)
		srqI, err := srqIA{s.ia}.CreateSRQ(s.dpd, driver.SRQConfig{MaxRecvWR: 8, MaxRecvSGE: 1, LowWatermark: 3,
			OnLowWatermark: func() { low <- struct{}{} }})
		if err != nil {
			t.Fatal(err)
		}
		srq := srqI.(*SRQ)
		defer srq.Close()
		cfg := defaultQPConfig(s.dpd)
		cfg.SRQ = srq
		cfg.MaxRecvWR, cfg.MaxRecvSGE = 0, 0
		if err := s.qp.Modify(cfg); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.PostRecv(driver.RecvWR{ID: 1}); err == nil {
			t.Error("PostRecv on a QP with an SRQ succeeded")
		}
		for i := 0; i < 4; i++ {
			if err := srq.PostRecv(driver.RecvWR{ID: uint64(10 + i), Local: []driver.SGE{s.sge(1024*i, 1024)}}); err != nil {
				t.Fatal(err)
			}
		}
		if n := srq.Posted(); n != 4 {
			t.Fatalf("Posted %d, want 4", n)
		}
		connectPair(t, c, s)
		seen := map[uint64]bool{}
		for i := 0; i < 2; i++ {
			copy(c.buf[i*100:], "srq message")
			c.postSend(t, driver.SendWR{ID: uint64(i), Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(i*100, 11)}})
			if cp := c.h.next(t); cp.Status != driver.StatusSuccess {
				t.Fatalf("send %d: %+v", i, cp)
			}
			rp := s.h.next(t)
			if rp.Op != driver.OpRecv || rp.Status != driver.StatusSuccess || rp.Length != 11 || rp.WRID < 10 || rp.WRID > 13 || seen[rp.WRID] || rp.QPTag != s.tag {
				t.Fatalf("SRQ receive %d: %+v", i, rp)
			}
			seen[rp.WRID] = true
		}
		if n := srq.Posted(); n != 2 {
			t.Errorf("Posted %d after two receives, want 2", n)
		}
		select {
		case <-low:
		case <-time.After(waitTimeout):
			t.Fatal("no LowWatermark after the posted count fell below 3")
		}
		// Fired once: the limit disarmed itself. Re-arm above the
		// current count and consume one more.
		if err := srq.SetLowWatermark(2); err != nil {
			t.Fatal(err)
		}
		c.postSend(t, driver.SendWR{ID: 5, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{c.sge(0, 11)}})
		c.h.next(t)
		s.h.next(t)
		select {
		case <-low:
		case <-time.After(waitTimeout):
			t.Fatal("no LowWatermark after re-arming")
		}
		select {
		case <-low:
			t.Error("LowWatermark fired twice")
		default:
		}
		if err := c.qp.Disconnect(false); err != nil {
			t.Fatal(err)
		}
		s.h.disconnected(t)
		if err := s.qp.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
