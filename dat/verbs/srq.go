//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// SRQ is an ibv_srq. It implements driver.SRQ. Its receives complete on
// the CQ of whichever QP consumed them and are reported through that QP's
// handler; the SRQ maps their wr_ids back to cookies.
type SRQ struct {
	ia  *IA
	pd  *PD
	srq *C.struct_ibv_srq
	key uintptr
	cfg driver.SRQConfig
	h   driver.SRQHandler

	mu     sync.Mutex
	closed bool
	seq    uint64
	posted map[uint64]uint64 // wr_id -> cookie of every receive not yet completed
	sges   [maxSGE]C.struct_ibv_sge
}

var _ driver.SRQ = (*SRQ)(nil)

func newSRQ(ia *IA, pd *PD, cfg driver.SRQConfig, h driver.SRQHandler) (*SRQ, error) {
	switch {
	case cfg.MaxRecvWR <= 0 || cfg.MaxRecvWR > ia.attr.MaxSRQWR,
		cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > ia.lim.maxSRQSGE,
		cfg.LowWatermark < 0 || cfg.LowWatermark > cfg.MaxRecvWR:
		return nil, fmt.Errorf("verbs: create SRQ: %d WRs (max %d), %d SGEs (max %d), watermark %d: %w",
			cfg.MaxRecvWR, ia.attr.MaxSRQWR, cfg.MaxRecvSGE, ia.lim.maxSRQSGE, cfg.LowWatermark, driver.ErrResources)
	}
	s := &SRQ{ia: ia, pd: pd, cfg: cfg, h: h, posted: make(map[uint64]uint64)}
	s.key = register(s)
	srq, err := C.shim_create_srq(pd.pd, C.uint32_t(cfg.MaxRecvWR), C.uint32_t(max(cfg.MaxRecvSGE, 1)), C.uintptr_t(s.key))
	if srq == nil {
		unregister(s.key)
		return nil, fmt.Errorf("verbs: ibv_create_srq: %v: %w", err, driver.ErrResources)
	}
	s.srq = srq
	if cfg.LowWatermark > 0 {
		if err := s.SetLowWatermark(cfg.LowWatermark); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// PostRecv posts a receive shared by every QP on the SRQ.
func (s *SRQ) PostRecv(wr driver.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("verbs: SRQ post recv: %w", net.ErrClosed)
	case len(wr.Local) > s.cfg.MaxRecvSGE || len(wr.Local) > maxSGE:
		return fmt.Errorf("verbs: SRQ post recv: %d SGEs exceed %d: %w", len(wr.Local), s.cfg.MaxRecvSGE, driver.ErrResources)
	case len(s.posted) >= s.cfg.MaxRecvWR:
		return fmt.Errorf("verbs: SRQ post recv: %d receives posted: %w", len(s.posted), driver.ErrQueueFull)
	}
	s.seq++
	id := wrID(wrKindSRQ, s.seq)
	for i, g := range wr.Local {
		s.sges[i] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
	}
	s.posted[id] = wr.Cookie
	if rc := C.shim_post_srq_recv(s.srq, C.uint64_t(id), &s.sges[0], C.int(len(wr.Local))); rc != 0 {
		delete(s.posted, id)
		return postError("ibv_post_srq_recv", errnoOf(rc))
	}
	return nil
}

// take returns and forgets the cookie of a completed receive.
func (s *SRQ) take(id uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.posted[id]
	delete(s.posted, id)
	return c, ok
}

// SetLowWatermark arms (n > 0) or disarms (0) the SRQ limit: the device
// raises IBV_EVENT_SRQ_LIMIT_REACHED once when fewer than n receives are
// left, and disarms it.
func (s *SRQ) SetLowWatermark(n int) error {
	if n < 0 || n > s.cfg.MaxRecvWR {
		return fmt.Errorf("verbs: SRQ watermark %d outside 0..%d: %w", n, s.cfg.MaxRecvWR, driver.ErrResources)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("verbs: SRQ watermark: %w", net.ErrClosed)
	}
	if rc := C.shim_srq_limit(s.srq, C.uint32_t(n)); rc != 0 {
		return fmt.Errorf("verbs: ibv_modify_srq(limit %d): %w", n, errnoOf(rc))
	}
	return nil
}

// Posted reports the receives posted and not yet completed.
func (s *SRQ) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.posted)
}

// asyncEvent receives the device's events for this SRQ.
func (s *SRQ) asyncEvent(t C.enum_ibv_event_type) {
	if t == C.IBV_EVENT_SRQ_LIMIT_REACHED && s.h != nil {
		s.h.LowWatermark()
	}
}

// Close destroys the SRQ. Package dat destroys an SRQ only when no EP
// uses it, so no QP is left to complete its receives; they are dropped.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if rc := C.shim_ret(C.ibv_destroy_srq(s.srq)); rc != 0 {
		// EBUSY: a QP still uses it.
		return fmt.Errorf("verbs: ibv_destroy_srq: %w", errnoOf(rc))
	}
	s.closed = true
	s.posted = nil
	unregister(s.key)
	return nil
}
