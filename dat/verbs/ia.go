//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
	"github.com/rdmanet/rdmanet/internal/tcpdiag"
)

// IA is an open interface adapter: one local address, the RDMA device
// (ibv_context) that owns it and one rdma_cm event channel, driven by a
// goroutine in the netpoller. It implements driver.IA; a device with SRQs
// gets an srqIA, which adds driver.SRQCreator. Completions take no
// goroutine: each CQ has its own completion channel, waited on by
// whoever waits for the CQ (cq.go).
type IA struct {
	ip     net.IP
	log    *slog.Logger // the provider's diagnostics (log.go); nil: the default
	key    uintptr      // registry key of the bind id
	ch     *C.struct_rdma_event_channel
	bindID *C.struct_rdma_cm_id // keeps the device bound for the IA's life
	ctx    *C.struct_ibv_context
	dev    *device
	attr   driver.IAAttr
	lim    devLimits
	inline inlineAsk // max_inline_data for new QPs (inline.go)

	// cmMu serialises taking CM events with destroying QPs (fetchCM).
	cmMu    sync.Mutex
	cmBatch []cmEvent // owned by the CM loop
	cmLoop  *fdLoop
	// watch looks for QPs the device broke silently (nil on devices
	// that report it).
	watch *errorWatch

	// diag is the sock_diag socket through which the keepers of the
	// IA's iWARP connections watch their TCP sockets (keepalive_tcp.go):
	// opened by the first lookup, closed with the IA.
	diag tcpdiag.Socket
	// tcpWatch is how the keepers ask about TCP (keepalive_tcp.go); the
	// zero value but in tests, which set it before the first connection.
	tcpWatch tcpWatch

	// ids counts rdma_cm ids being destroyed in the background
	// (QP.quiesce); the event channel outlives them.
	ids sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	qps       provkit.Set[*QP]
	cqs       provkit.Set[*CQ]
	listeners provkit.Set[*Listener]
}

var _ driver.IA = (*IA)(nil)

// openIA binds an rdma_cm id to ip to find its device, queries the device
// and starts the IA's event loops.
func openIA(ip net.IP, log *slog.Logger) (_ *IA, err error) {
	ia := &IA{ip: ip, log: log}
	defer func() {
		if err != nil {
			ia.release()
		}
	}()
	var ch *C.struct_rdma_event_channel
	if rc := C.shim_create_event_channel(&ch); rc != 0 {
		return nil, fmt.Errorf("verbs: open %s: rdma_create_event_channel: %w (is rdma_ucm loaded?): %w", ip, errnoOf(rc), driver.ErrNotSupported)
	}
	ia.ch = ch
	ia.key = register(ia)
	if rc := C.shim_create_id(ch, &ia.bindID, C.uintptr_t(ia.key)); rc != 0 {
		return nil, fmt.Errorf("verbs: open %s: rdma_create_id: %w", ip, errnoOf(rc))
	}
	b := ipBytes(ip)
	if rc := C.shim_bind(ia.bindID, (*C.uint8_t)(cBytes(b)), C.int(len(b)), 0); rc != 0 {
		return nil, fmt.Errorf("verbs: open %s: rdma_bind_addr: %w: %w", ip, errnoOf(rc), driver.ErrInvalidAddress)
	}
	if ia.bindID.verbs == nil {
		return nil, fmt.Errorf("verbs: open %s: the address is not on an RDMA device: %w", ip, driver.ErrInvalidAddress)
	}
	ia.ctx = ia.bindID.verbs
	// The device first: on siw it takes libsiw's invalid mmap key before
	// any queue is made on the context, queryAttr's probe included.
	if ia.dev, err = acquireDevice(ia.ctx); err != nil {
		return nil, err
	}
	if ia.attr, ia.lim, err = queryAttr(ia.ctx, uint8(ia.bindID.port_num)); err != nil {
		return nil, fmt.Errorf("verbs: open %s: %w", ip, err)
	}
	ia.attr.LocalAddr = &net.TCPAddr{IP: ip}
	if ia.lim.silentErrors {
		ia.watch = startErrorWatch()
	}
	if ia.cmLoop, err = startFDLoop(int(ch.fd), "rdma_cm events "+ip.String(), ia.fetchCM, ia.dispatchCM); err != nil {
		return nil, err
	}
	return ia, nil
}

// release stops the loops and frees the C objects, in dependency order.
func (ia *IA) release() {
	ia.cmLoop.stop()
	ia.watch.close()
	if ia.dev != nil {
		ia.dev.release()
	}
	if ia.bindID != nil {
		C.shim_destroy_id(ia.bindID)
	}
	if ia.ch != nil {
		C.rdma_destroy_event_channel(ia.ch)
	}
	ia.diag.Close()
	unregister(ia.key)
}

// cmEvent receives the bind id's events; none needs action (device
// removal reaches the connections through their own ids).
func (ia *IA) cmEvent(ev *cmEvent) {
	if ev.typ == cmDeviceRemoval {
		ia.debug("device removed")
	}
}

// Attr reports the device's limits (see queryAttr) and the IA's address,
// a *net.TCPAddr with port 0.
func (ia *IA) Attr() driver.IAAttr { return ia.attr }

// AllocPD allocates an ibv_pd.
func (ia *IA) AllocPD() (driver.PD, error) {
	if err := ia.live(); err != nil {
		return nil, err
	}
	var pd *C.struct_ibv_pd
	if rc := C.shim_alloc_pd(ia.ctx, &pd); rc != 0 {
		return nil, fmt.Errorf("verbs: %w", localError("ibv_alloc_pd", errnoOf(rc)))
	}
	p := &PD{ia: ia, pd: pd}
	if ia.lim.windows {
		return windowPD{p}, nil
	}
	return p, nil
}

// CreateQP creates an unconnected QP. The verbs QP itself is created when
// a connection is made (Connect, Request.Accept), on that connection's
// rdma_cm id; see doc.go.
func (ia *IA) CreateQP(cfg driver.QPConfig) (driver.QP, error) {
	if err := ia.checkQPConfig(cfg); err != nil {
		return nil, err
	}
	for _, cq := range []driver.CQ{cfg.SendCQ, cfg.RecvCQ} {
		if c, ok := cq.(*CQ); cq != nil && (!ok || c.ia != ia) {
			return nil, fmt.Errorf("verbs: QP config: CQ %T does not belong to this IA: %w", cq, driver.ErrNotSupported)
		}
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return nil, errIAClosed
	}
	q := newQP(ia, cfg)
	ia.qps.Add(q) // cannot fail: Close takes ia.mu before closing the set
	if ia.lim.windows {
		return windowQP{q}, nil
	}
	return q, nil
}

// checkQPConfig validates what package dat cannot know: the objects belong
// to this IA and the sizes fit the device.
func (ia *IA) checkQPConfig(cfg driver.QPConfig) error {
	a := &ia.attr
	if cfg.PD != nil {
		if pd, ok := pdOf(cfg.PD); !ok || pd.ia != ia {
			return fmt.Errorf("verbs: QP config: PD %T does not belong to this IA: %w", cfg.PD, driver.ErrNotSupported)
		}
	}
	if cfg.SRQ != nil {
		if s, ok := cfg.SRQ.(*SRQ); !ok || s.ia != ia {
			return fmt.Errorf("verbs: QP config: SRQ %T does not belong to this IA: %w", cfg.SRQ, driver.ErrNotSupported)
		}
	}
	switch {
	case cfg.IRD < 0 || cfg.IRD > a.MaxIRD, cfg.ORD < 0 || cfg.ORD > a.MaxORD:
		return fmt.Errorf("verbs: QP config: IRD %d / ORD %d exceed %d / %d: %w", cfg.IRD, cfg.ORD, a.MaxIRD, a.MaxORD, driver.ErrResources)
	case cfg.MaxSendWR < 0 || cfg.MaxSendWR > a.MaxWRPerQP, cfg.MaxRecvWR < 0 || cfg.MaxRecvWR > a.MaxWRPerQP:
		return fmt.Errorf("verbs: QP config: %d send / %d receive WRs exceed %d: %w", cfg.MaxSendWR, cfg.MaxRecvWR, a.MaxWRPerQP, driver.ErrResources)
	case cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > a.MaxSGE, cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > a.MaxSGE:
		return fmt.Errorf("verbs: QP config: SGE counts %d/%d exceed %d: %w", cfg.MaxSendSGE, cfg.MaxRecvSGE, a.MaxSGE, driver.ErrResources)
	case cfg.MaxSendWR+ia.extraSendWR() > ia.lim.maxCQE, cfg.MaxRecvWR > ia.lim.maxCQE:
		// A CQ must hold every completion its queues can have
		// outstanding; CQ.attach checks the sum.
		return fmt.Errorf("verbs: QP config: %d send / %d receive WRs exceed the device's CQ size %d: %w",
			cfg.MaxSendWR, cfg.MaxRecvWR, ia.lim.maxCQE, driver.ErrResources)
	case cfg.MaxMessageSize > a.MaxMessageSize, cfg.MaxRDMASize > a.MaxRDMASize:
		return fmt.Errorf("verbs: QP config: message size %d / RDMA size %d exceed %d: %w", cfg.MaxMessageSize, cfg.MaxRDMASize, a.MaxMessageSize, driver.ErrResources)
	}
	return nil
}

// Listen starts a listener on the IA address; see Listener.
func (ia *IA) Listen(cfg driver.ListenConfig) (driver.Listener, error) {
	if err := ia.live(); err != nil {
		return nil, err
	}
	l, err := listen(ia, cfg)
	if err != nil {
		return nil, err
	}
	if !ia.listeners.Add(l) {
		l.Close()
		return nil, errIAClosed
	}
	return l, nil
}

// Close releases the IA. Package dat closes every object first; whatever
// is still open (listeners, QPs) is closed here so that no id, CQ or
// goroutine outlives the IA.
func (ia *IA) Close() error {
	ia.mu.Lock()
	if ia.closed {
		ia.mu.Unlock()
		return nil
	}
	ia.closed = true
	ia.mu.Unlock()
	ia.listeners.CloseAll()
	ia.qps.CloseAll()
	ia.cqs.CloseAll()
	ia.ids.Wait()
	ia.release()
	return nil
}

func (ia *IA) live() error {
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return errIAClosed
	}
	return nil
}

func (ia *IA) forgetQP(q *QP) { ia.qps.Remove(q) }

func (ia *IA) forgetListener(l *Listener) { ia.listeners.Remove(l) }

// deviceName is the device's name (rxe0, siw0, mlx5_0...).
func deviceName(ctx *C.struct_ibv_context) string {
	return C.GoString(C.shim_dev_name(ctx))
}
