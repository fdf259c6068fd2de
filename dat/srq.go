package dat

import (
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// AsyncSRQLowWatermark is the async event reporting that an SRQ's posted
// receives fell below its low watermark. DAT 2.0 defines the reason
// (DAT_SRQ_LOW_WATERMARK_EVENT) but no event number for it; this is an
// rdmanet number in the async-error range. Async.Handle is the *SRQ and
// Async.Reason SRQLowWatermark.
const AsyncSRQLowWatermark EventNumber = 0x08006

func init() { eventNames[AsyncSRQLowWatermark] = "RDMANET_ASYNC_SRQ_LOW_WATERMARK" }

// SRQAttr is DAT_SRQ_ATTR.
type SRQAttr struct {
	// MaxRecvDTOs bounds the receives posted to the SRQ.
	MaxRecvDTOs int
	// MaxRecvIOV bounds the segments of one receive.
	MaxRecvIOV int
	// LowWatermark arms the low-watermark event (0: off).
	LowWatermark int
}

// SRQ is a Shared Receive Queue (DAT_SRQ_HANDLE): receive buffers shared by
// the EPs created on it with CreateEPWithSRQ.
//
// A receive an EP took from the SRQ is reported on that EP's recv EVD.
// If the EP is freed before the completion is reported (the consumer
// polls the EVD later, or never), the receive goes back to the SRQ, as
// posted, instead of being lost with the EP: a consumer that frees EPs
// while peers still send keeps every buffer it posted. DAT leaves this
// case open; the rule here is what lets many short-lived EPs share one
// SRQ for as long as it lives.
type SRQ struct {
	ia    *IA
	pz    *PZ
	prov  driver.SRQ
	attr  SRQAttr
	refs  int  // EPs using it; guarded by ia.mu
	freed bool // guarded by ia.mu
	// dead is freed for the paths that do not take ia.mu (posts and
	// completions).
	dead atomic.Bool
	// id names the SRQ in its receives' WRIDs (see srqWRIDBit).
	id uint32
	// postMu serialises posts; sge is their segment scratch.
	postMu sync.Mutex
	sge    [maxInlineSGE]driver.SGE

	// slots hold the cookie of every posted receive, indexed by the low
	// bits of its provider WRID (see srqWRIDBit); free lists the unused
	// ones. Completions of an SRQ arrive in no particular order, on the
	// receive CQs of whichever EPs consumed the receives, so they are
	// found by slot rather than by position. slotSGE keeps each slot's
	// segments (MaxRecvIOV a slot, slotLen of them used), so that a
	// receive an EP consumed but was freed before reporting can be posted
	// again (restore). The slices grow with the receives posted at once,
	// up to MaxRecvDTOs, rather than being sized for it: an SRQ sized for
	// thousands costs little until it holds them. Guarded by slotMu.
	slotMu  sync.Mutex
	slots   []uint64
	free    []uint32
	slotSGE []driver.SGE
	slotLen []uint8
}

// The WRIDs dat gives providers: an EP's send-side request is its
// sequence number, an EP's receive has recvWRIDBit set as well, and a
// receive posted to an SRQ is srqWRIDBit, the SRQ's id shifted by
// srqIDShift, and its slot. The queue is read from the WRID, not from
// Completion.Op, which a device may not report on a failed completion.
// Every WRID is below 2^62 (driver.MaxWRID), so providers keep the top
// two bits for requests of their own.
const (
	recvWRIDBit = 1 << 60
	srqWRIDBit  = 1 << 61
	seqMask     = recvWRIDBit - 1
	srqIDShift  = 32
	srqSlotMask = 1<<srqIDShift - 1
	srqIDMask   = recvWRIDBit>>srqIDShift - 1
)

// takeSlot records cookie and sges in a free slot and returns its WRID.
func (s *SRQ) takeSlot(cookie uint64, sges []driver.SGE) (uint64, bool) {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	n := s.attr.MaxRecvIOV
	if len(s.free) == 0 {
		if len(s.slots) == s.attr.MaxRecvDTOs {
			return 0, false
		}
		s.free = append(s.free, uint32(len(s.slots)))
		s.slots = append(s.slots, 0)
		s.slotLen = append(s.slotLen, 0)
		s.slotSGE = append(s.slotSGE, make([]driver.SGE, n)...)
	}
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.slots[i] = cookie
	s.slotLen[i] = uint8(copy(s.slotSGE[int(i)*n:int(i+1)*n], sges))
	return srqWRIDBit | uint64(s.id)<<srqIDShift | uint64(i), true
}

// releaseSlot frees the slot of wrid and returns the cookie it held.
func (s *SRQ) releaseSlot(wrid uint64) (uint64, bool) {
	i := wrid & srqSlotMask
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	if i >= uint64(len(s.slots)) {
		return 0, false
	}
	cookie := s.slots[i]
	s.free = append(s.free, uint32(i))
	return cookie, true
}

// restore posts the receive of wrid again, as it was: an EP consumed it
// and was freed before the completion was reported, so no consumer will
// ever see the buffer, and without this the SRQ would have one receive
// fewer for good. If the SRQ refuses it, the slot is freed.
func (s *SRQ) restore(wrid uint64) {
	i := int(wrid & srqSlotMask)
	s.postMu.Lock()
	defer s.postMu.Unlock()
	s.slotMu.Lock()
	if i >= len(s.slots) {
		s.slotMu.Unlock()
		return
	}
	n := s.attr.MaxRecvIOV
	sges := s.sge[:copy(s.sge[:], s.slotSGE[i*n:i*n+int(s.slotLen[i])])]
	s.slotMu.Unlock()
	if s.dead.Load() || s.prov.PostRecv(driver.RecvWR{ID: wrid, Local: sges}) != nil {
		s.releaseSlot(wrid)
	}
}

// srqCompletionLocked reports the completion of an SRQ receive consumed
// by ep (nil if its QP is already destroyed), whose recv EVD should be e.
// SRQ receives always complete signalled. A receive whose EP is gone, or
// no longer reports to e, goes back to its SRQ (restore). Callers hold
// e.mu.
func (e *EVD) srqCompletionLocked(ep *EP, c *driver.Completion) (lost int) {
	srq := e.ia.srqOf(c.WRID)
	if srq == nil {
		return 0 // freed with the receives it held
	}
	ok := false
	if ep != nil {
		ep.recvQ.mu.Lock()
		ok = ep.recvQ.evd == e && ep.recvQ.srq == srq
		ep.recvQ.mu.Unlock()
	}
	if !ok {
		srq.restore(c.WRID)
		return 0
	}
	cookie, found := srq.releaseSlot(c.WRID)
	if !found {
		return 0
	}
	ev := Event{Number: DTOCompletionEvent, DTO: DTOCompletion{
		EP: ep, Cookie: cookie, Status: DTOStatus(c.Status), Length: c.Length, Op: DTOReceive,
		WithImm: c.WithImm && c.Status == driver.StatusSuccess, Imm: c.Imm,
	}}
	if !e.enqueueLocked(ev, true) {
		ep.srqEventTaken() // lost: nobody will take it
		lost++
	}
	return lost
}

// srqEventTaken counts off an SRQ receive of ep whose event the consumer
// took (see driver.QPConfig.SRQHeld). Receive events of an EP without an
// SRQ, or one already freed, are not counted.
func (ep *EP) srqEventTaken() {
	if ep == nil {
		return
	}
	if v := ep.view.Load(); v != nil && v.srq {
		ep.srqHeld.Add(-1)
	}
}

// CreateSRQ creates a shared receive queue in pz (dat_srq_create).
func (ia *IA) CreateSRQ(pz *PZ, attr SRQAttr) (*SRQ, error) {
	const op = "dat_srq_create"
	if ia == nil {
		return nil, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	if err := pz.check(op, ia); err != nil {
		ia.mu.Unlock()
		return nil, err
	}
	creator, ok := ia.prov.(driver.SRQCreator)
	if !ok || ia.attr.MaxSRQWR == 0 {
		ia.mu.Unlock()
		return nil, newError(op, ModelNotSupported, NoSubtype, "the provider has no SRQ support")
	}
	switch {
	case attr.MaxRecvDTOs <= 0 || attr.MaxRecvDTOs > ia.attr.MaxSRQWR:
		ia.mu.Unlock()
		return nil, newError(op, InvalidParameter, Arg(3), "max_recv_dtos %d not in 1..%d", attr.MaxRecvDTOs, ia.attr.MaxSRQWR)
	case attr.MaxRecvIOV <= 0 || attr.MaxRecvIOV > ia.attr.MaxSGE:
		ia.mu.Unlock()
		return nil, newError(op, InvalidParameter, Arg(3), "max_recv_iov %d not in 1..%d", attr.MaxRecvIOV, ia.attr.MaxSGE)
	case attr.LowWatermark < 0 || attr.LowWatermark > attr.MaxRecvDTOs:
		ia.mu.Unlock()
		return nil, newError(op, InvalidParameter, Arg(3), "low watermark %d not in 0..%d", attr.LowWatermark, attr.MaxRecvDTOs)
	}
	pz.refs++ // hold the PZ while the provider builds the SRQ
	ia.mu.Unlock()
	s := &SRQ{ia: ia, pz: pz, attr: attr}
	prov, err := creator.CreateSRQ(pz.prov, driver.SRQConfig{MaxRecvWR: attr.MaxRecvDTOs, MaxRecvSGE: attr.MaxRecvIOV,
		LowWatermark: attr.LowWatermark, OnLowWatermark: s.lowWatermark})
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err != nil {
		pz.refs--
		return nil, providerError(op, err)
	}
	s.prov = prov
	ia.srqs[s] = struct{}{}
	ia.addSRQ(s)
	return s, nil
}

// check returns INVALID_HANDLE (subtype SRQ) unless s is a live SRQ of ia.
// Callers hold ia.mu.
func (s *SRQ) check(op string, ia *IA) error {
	if s == nil || s.freed || s.ia != ia {
		return newError(op, InvalidHandle, HandleSRQ, "SRQ is nil, freed or of another IA")
	}
	return nil
}

// SRQParam is what dat_srq_query reports.
type SRQParam struct {
	IA   *IA
	PZ   *PZ
	Attr SRQAttr
	// Posted is the number of receives currently posted.
	Posted int
}

// Query reports the SRQ's parameters (dat_srq_query).
func (s *SRQ) Query() (SRQParam, error) {
	const op = "dat_srq_query"
	if s == nil {
		return SRQParam{}, newError(op, InvalidHandle, HandleSRQ, "SRQ is nil")
	}
	s.ia.mu.Lock()
	if err := s.check(op, s.ia); err != nil {
		s.ia.mu.Unlock()
		return SRQParam{}, err
	}
	p := SRQParam{IA: s.ia, PZ: s.pz, Attr: s.attr}
	s.ia.mu.Unlock()
	p.Posted = s.prov.Posted()
	return p, nil
}

// SetLowWatermark arms the low-watermark event at n posted receives
// (dat_srq_set_lw); 0 disarms it.
func (s *SRQ) SetLowWatermark(n int) error {
	const op = "dat_srq_set_lw"
	if s == nil {
		return newError(op, InvalidHandle, HandleSRQ, "SRQ is nil")
	}
	s.ia.mu.Lock()
	if err := s.check(op, s.ia); err != nil {
		s.ia.mu.Unlock()
		return err
	}
	if n < 0 || n > s.attr.MaxRecvDTOs {
		s.ia.mu.Unlock()
		return newError(op, InvalidParameter, Arg(2), "low watermark %d not in 0..%d", n, s.attr.MaxRecvDTOs)
	}
	s.attr.LowWatermark = n
	s.ia.mu.Unlock()
	if err := s.prov.SetLowWatermark(n); err != nil {
		return providerError(op, err)
	}
	return nil
}

// Free destroys the SRQ (dat_srq_free). It fails with
// DAT_INVALID_STATE/SRQ_IN_USE while an EP uses it.
func (s *SRQ) Free() error {
	const op = "dat_srq_free"
	if s == nil {
		return newError(op, InvalidHandle, HandleSRQ, "SRQ is nil")
	}
	ia := s.ia
	ia.mu.Lock()
	if err := s.check(op, ia); err != nil {
		ia.mu.Unlock()
		return err
	}
	if s.refs > 0 {
		ia.mu.Unlock()
		return newError(op, InvalidState, StateSRQInUse, "%d EPs still use the SRQ", s.refs)
	}
	s.freed = true
	s.dead.Store(true)
	s.pz.refs--
	delete(ia.srqs, s)
	ia.mu.Unlock()
	ia.dropSRQ(s)
	if err := s.prov.Close(); err != nil {
		return providerError(op, err)
	}
	return nil
}

// lowWatermark posts the low-watermark event to the IA's async EVD.
func (s *SRQ) lowWatermark() {
	s.ia.async.post(Event{Number: AsyncSRQLowWatermark, Async: AsyncData{Handle: s, Reason: SRQLowWatermark}})
}

// PostRecv posts a receive buffer to the SRQ (dat_srq_post_recv). Its
// segments must be in the SRQ's PZ. The completion goes to the recv EVD of
// whichever EP the message arrives on, always signalled.
func (s *SRQ) PostRecv(iov []LMRTriplet, cookie uint64) error {
	const op = "dat_srq_post_recv"
	if s == nil {
		return newError(op, InvalidHandle, HandleSRQ, "SRQ is nil")
	}
	s.postMu.Lock()
	defer s.postMu.Unlock()
	// As for an EP's posts, the IA-wide lock is not taken: many EPs
	// share an SRQ, and each of their receives is posted again here.
	if s.dead.Load() {
		return newError(op, InvalidHandle, HandleSRQ, "SRQ is freed")
	}
	if len(iov) > s.attr.MaxRecvIOV {
		return newError(op, InvalidParameter, Arg(2), "%d segments exceed the SRQ's limit of %d", len(iov), s.attr.MaxRecvIOV)
	}
	ia := s.ia
	sges := s.sge[:0]
	ia.lmrMu.RLock()
	for _, t := range iov {
		if t.Length == 0 {
			continue
		}
		if err := ia.checkLocal(op, s.pz, t, true); err != nil {
			ia.lmrMu.RUnlock()
			return err
		}
		sges = append(sges, driver.SGE{Addr: t.Addr, Length: t.Length, LKey: t.Context})
	}
	ia.lmrMu.RUnlock()
	wrid, ok := s.takeSlot(cookie, sges)
	if !ok {
		return newError(op, InsufficientResources, NoSubtype, "the SRQ holds %d receives, its max_recv_dtos", s.attr.MaxRecvDTOs)
	}
	if err := s.prov.PostRecv(driver.RecvWR{ID: wrid, Local: sges}); err != nil {
		s.releaseSlot(wrid)
		return providerError(op, err)
	}
	return nil
}
