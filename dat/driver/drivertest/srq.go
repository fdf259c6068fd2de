package drivertest

import (
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// srqT is an SRQ of the passive IA with a buffer of fixed-size slots and
// a record of its low-watermark calls.
type srqT struct {
	e     *env
	srq   driver.SRQ
	pd    driver.PD
	buf   *region
	slot  map[uint64]int
	next  int
	wm    atomic.Int32
	wmSig chan struct{}
}

const srqSlot = 256

// newSRQ creates an SRQ with room for n receives, or skips the subtest
// if the passive IA has none (fails if Config.RequireSRQ).
func (e *env) newSRQ(n int, watermark int) *srqT {
	e.t.Helper()
	sc, ok := e.passive.(driver.SRQCreator)
	if !ok {
		if e.cfg.RequireSRQ {
			e.t.Fatalf("the passive IA (%T) does not implement driver.SRQCreator, and Config.RequireSRQ is set", e.passive)
		}
		e.t.Skipf("the passive IA (%T) has no SRQs", e.passive)
	}
	s := &srqT{e: e, pd: e.newPD(e.passive), slot: map[uint64]int{}, wmSig: make(chan struct{}, 8)}
	srq, err := sc.CreateSRQ(s.pd, driver.SRQConfig{
		MaxRecvWR: n, MaxRecvSGE: 1, LowWatermark: watermark,
		OnLowWatermark: func() {
			s.wm.Add(1)
			s.wmSig <- struct{}{}
		},
	})
	require.NoError(e.t, err, "CreateSRQ")
	s.srq = srq
	e.onClose(lvlSRQ, "SRQ Close", srq.Close)
	s.buf = e.register(s.pd, n*srqSlot, driver.AccessLocalWrite)
	return s
}

// post posts k receives, each in a slot of its own.
func (s *srqT) post(k int) {
	s.e.t.Helper()
	for range k {
		id := s.e.id()
		s.e.mu.Lock()
		s.e.posted[id] = &postRec{op: driver.OpRecv, srq: s.srq}
		s.e.mu.Unlock()
		require.NoError(s.e.t, s.srq.PostRecv(driver.RecvWR{ID: id, Local: []driver.SGE{s.buf.sge(s.next*srqSlot, srqSlot)}}), "SRQ PostRecv")
		s.slot[id] = s.next
		s.next++
	}
}

// endpoint creates a passive QP that receives from the SRQ.
func (s *srqT) endpoint() *endpoint {
	return s.e.newEndpoint(true, epOpts{pd: s.pd, srq: s.srq})
}

// deliver sends one message from a to p, whose receive must come from
// the SRQ, complete on p's RecvCQ with p's Tag (the ledger checks both)
// and hold the message.
func (s *srqT) deliver(a, p *endpoint, seed byte) {
	e := s.e
	e.t.Helper()
	data := a.ctl.fill(0, 100, seed)
	sid := a.send(a.ctl.sge(0, 100))
	a.scq.awaitOK(sid, 100)
	comp := p.rcq.awaitAny()
	require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
	require.Equal(e.t, uint32(100), comp.Length, "%+v", comp)
	i, ok := s.slot[comp.WRID]
	require.True(e.t, ok, "receive %+v is not one of the SRQ's", comp)
	e.checkBytes("SRQ receive", s.buf.buf[i*srqSlot:i*srqSlot+100], data)
}

// testSRQConsumer: receives posted to an SRQ shared by two QPs complete
// on the RecvCQ of whichever QP consumed them, with its Tag, and Posted
// counts them down.
func testSRQConsumer(e *env) {
	s := e.newSRQ(16, 0)
	s.post(6)
	require.Equal(e.t, 6, s.srq.Posted())
	p1, p2 := s.endpoint(), s.endpoint()
	a1, a2 := e.newEndpoint(false, epOpts{}), e.newEndpoint(false, epOpts{})
	e.connectWith(a1, p1, nil, nil)
	s.deliver(a1, p1, 1)
	e.connectWith(a2, p2, nil, nil)
	s.deliver(a2, p2, 2)
	s.deliver(a1, p1, 3)
	s.deliver(a2, p2, 4)
	require.Equal(e.t, 2, s.srq.Posted(), "Posted after 4 of 6 receives were consumed")
	p1.rcq.none("after every message")
	p2.rcq.none("after every message")
}

// checkWatermark waits a quiet period (or for a call, when one is due)
// and checks the number of low-watermark calls so far.
func (s *srqT) checkWatermark(want int32, what string) {
	s.e.t.Helper()
	if s.wm.Load() < want {
		select {
		case <-s.wmSig:
		case <-time.After(s.e.timeout):
		}
	}
	s.e.sleepQuiet()
	require.Equal(s.e.t, want, s.wm.Load(), "OnLowWatermark calls %s", what)
}

// testSRQWatermark: the armed watermark fires once when the posted count
// drops below it, not at it, not again, not when disarmed, and again
// when re-armed.
func testSRQWatermark(e *env) {
	s := e.newSRQ(16, 0)
	s.post(6)
	require.NoError(e.t, s.srq.SetLowWatermark(4))
	p, a := s.endpoint(), e.newEndpoint(false, epOpts{})
	e.connectWith(a, p, nil, nil)
	s.deliver(a, p, 1) // 5 posted
	s.checkWatermark(0, "with 5 posted, watermark 4")
	s.deliver(a, p, 2) // 4
	s.checkWatermark(0, "with 4 posted, watermark 4")
	s.deliver(a, p, 3) // 3
	s.checkWatermark(1, "with 3 posted, watermark 4")
	s.deliver(a, p, 4) // 2
	s.checkWatermark(1, "once fired")
	require.NoError(e.t, s.srq.SetLowWatermark(0))
	s.deliver(a, p, 5) // 1
	s.checkWatermark(1, "disarmed")
	require.NoError(e.t, s.srq.SetLowWatermark(1))
	s.deliver(a, p, 6) // 0
	s.checkWatermark(2, "re-armed at 1, 0 posted")
}

// testSRQWatermarkAtCreation: SRQConfig.LowWatermark arms the event.
func testSRQWatermarkAtCreate(e *env) {
	s := e.newSRQ(16, 2)
	s.post(3)
	p, a := s.endpoint(), e.newEndpoint(false, epOpts{})
	e.connectWith(a, p, nil, nil)
	s.deliver(a, p, 1) // 2 posted
	s.checkWatermark(0, "with 2 posted, watermark 2 from SRQConfig")
	s.deliver(a, p, 2) // 1
	s.checkWatermark(1, "with 1 posted, watermark 2 from SRQConfig")
}
