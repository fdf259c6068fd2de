package iwarp

import (
	"fmt"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// SRQ is a shared receive queue. Receives are queued here; the data path
// takes them (take) when a Send arrives on any QP bound to the SRQ and
// completes them on that QP's receive CQ, with its Tag.
type SRQ struct {
	ia  *IA
	pd  *PD
	cfg driver.SRQConfig

	mu        sync.Mutex
	closed    bool
	wrs       ring[srqWR]
	watermark int // armed low watermark, 0: disarmed
}

var _ driver.SRQ = (*SRQ)(nil)

func newSRQ(ia *IA, pd *PD, cfg driver.SRQConfig) *SRQ {
	return &SRQ{ia: ia, pd: pd, cfg: cfg, watermark: cfg.LowWatermark}
}

// PostRecv queues a receive shared by every QP on the SRQ.
func (s *SRQ) PostRecv(wr driver.RecvWR) error {
	if len(wr.Local) > s.cfg.MaxRecvSGE {
		return fmt.Errorf("iwarp: SRQ post recv: %d SGEs exceed %d: %w", len(wr.Local), s.cfg.MaxRecvSGE, driver.ErrResources)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("iwarp: SRQ post recv: %w", net.ErrClosed)
	}
	if s.wrs.len() >= s.cfg.MaxRecvWR {
		return fmt.Errorf("iwarp: SRQ post recv: %d receives posted: %w", s.wrs.len(), driver.ErrQueueFull)
	}
	s.wrs.push(newSRQWR(wr))
	return nil
}

// SetLowWatermark arms (n > 0) or disarms (0) the low-watermark event.
func (s *SRQ) SetLowWatermark(n int) error {
	if n < 0 || n > s.cfg.MaxRecvWR {
		return fmt.Errorf("iwarp: SRQ watermark %d outside 0..%d: %w", n, s.cfg.MaxRecvWR, driver.ErrResources)
	}
	s.mu.Lock()
	s.watermark = n
	s.mu.Unlock()
	return nil
}

// Posted reports the number of queued receives.
func (s *SRQ) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wrs.len()
}

// take removes the oldest receive for the data path (a receive goroutine,
// never a post or a Poll). When that drops the count below the armed
// watermark, OnLowWatermark is called once, without any lock held, and the
// watermark disarmed (verbs IBV_EVENT_SRQ_LIMIT_REACHED semantics).
func (s *SRQ) take() (recvWR, bool) {
	s.mu.Lock()
	if s.closed || s.wrs.len() == 0 {
		s.mu.Unlock()
		return recvWR{}, false
	}
	wr := s.wrs.pop().recvWR()
	fire := s.watermark > 0 && s.wrs.len() < s.watermark
	if fire {
		s.watermark = 0
	}
	s.mu.Unlock()
	if fire && s.cfg.OnLowWatermark != nil {
		s.cfg.OnLowWatermark()
	}
	return wr, true
}

// requeue gives back a receive that a QP took for a Send that never
// finished (its connection ended): the receive is still posted as far
// as package dat knows, so another QP may complete it. It goes back to
// the front, where it was taken from. Its bytes are undefined until a
// completion says otherwise, as for any posted receive.
func (s *SRQ) requeue(wr recvWR) {
	s.mu.Lock()
	if !s.closed {
		s.wrs.pushFront(newSRQWR(driver.RecvWR{ID: wr.id, Local: wr.sge[:wr.n]}))
	}
	s.mu.Unlock()
}

// Close destroys the SRQ. Its receives are dropped: package dat flushes
// them (it destroys an SRQ only when no EP uses it).
func (s *SRQ) Close() error {
	s.mu.Lock()
	s.closed = true
	s.wrs.clear()
	s.mu.Unlock()
	return nil
}
