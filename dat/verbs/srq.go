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
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// SRQ is an ibv_srq. It implements driver.SRQ. Its receives complete on
// the receive CQ of whichever QP consumed them, with that QP's tag (the
// CQ finds the QP by the completion's qp_num).
type SRQ struct {
	ia  *IA
	pd  *PD
	srq *C.struct_ibv_srq
	key uintptr
	cfg driver.SRQConfig

	// posted counts receives posted and not yet completed: the CQ that
	// polls a completion of the SRQ takes one off.
	posted atomic.Int64

	mu     sync.Mutex
	closed bool
	sges   [maxSGE]C.struct_ibv_sge
}

var _ driver.SRQ = (*SRQ)(nil)

// srqIA is an IA whose device has SRQs.
type srqIA struct{ *IA }

var _ driver.SRQCreator = srqIA{}

// CreateSRQ creates an ibv_srq in pd.
func (ia srqIA) CreateSRQ(pd driver.PD, cfg driver.SRQConfig) (driver.SRQ, error) {
	p, ok := pdOf(pd)
	if !ok || p.ia != ia.IA {
		return nil, fmt.Errorf("verbs: create SRQ: PD %T does not belong to this IA: %w", pd, driver.ErrNotSupported)
	}
	if err := ia.live(); err != nil {
		return nil, err
	}
	return newSRQ(ia.IA, p, cfg)
}

func newSRQ(ia *IA, pd *PD, cfg driver.SRQConfig) (*SRQ, error) {
	switch {
	case cfg.MaxRecvWR <= 0 || cfg.MaxRecvWR > ia.attr.MaxSRQWR,
		cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > ia.lim.maxSRQSGE,
		cfg.LowWatermark < 0 || cfg.LowWatermark > cfg.MaxRecvWR:
		return nil, fmt.Errorf("verbs: create SRQ: %d WRs (max %d), %d SGEs (max %d), watermark %d: %w",
			cfg.MaxRecvWR, ia.attr.MaxSRQWR, cfg.MaxRecvSGE, ia.lim.maxSRQSGE, cfg.LowWatermark, driver.ErrResources)
	}
	s := &SRQ{ia: ia, pd: pd, cfg: cfg}
	s.key = register(s)
	var srq *C.struct_ibv_srq
	if rc := C.shim_create_srq(pd.pd, C.uint32_t(cfg.MaxRecvWR), C.uint32_t(max(cfg.MaxRecvSGE, 1)), C.uintptr_t(s.key), &srq); rc != 0 {
		unregister(s.key)
		return nil, fmt.Errorf("verbs: %w", localError("ibv_create_srq", errnoOf(rc)))
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
	case s.posted.Load() >= int64(s.cfg.MaxRecvWR):
		return fmt.Errorf("verbs: SRQ post recv: %d receives posted: %w", s.posted.Load(), driver.ErrQueueFull)
	}
	for i, g := range wr.Local {
		s.sges[i] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
	}
	wrid, err := encodeWRID(wr.ID, true)
	if err != nil {
		return err
	}
	s.posted.Add(1)
	if rc := C.shim_post_srq_recv(s.srq, C.uint64_t(wrid), &s.sges[0], C.int(len(wr.Local))); rc != 0 {
		s.posted.Add(-1)
		return postError("ibv_post_srq_recv", errnoOf(rc))
	}
	return nil
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

// Posted reports the receives posted and not yet completed (polled).
func (s *SRQ) Posted() int { return int(s.posted.Load()) }

// asyncEvent receives the device's events for this SRQ.
func (s *SRQ) asyncEvent(t C.enum_ibv_event_type) {
	if t == C.IBV_EVENT_SRQ_LIMIT_REACHED && s.cfg.OnLowWatermark != nil {
		s.cfg.OnLowWatermark()
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
	if rc := C.shim_destroy_srq(s.srq); rc != 0 {
		// EBUSY: a QP still uses it.
		return fmt.Errorf("verbs: ibv_destroy_srq: %w", errnoOf(rc))
	}
	s.closed = true
	unregister(s.key)
	return nil
}
