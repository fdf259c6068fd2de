//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// defaultSpin is the spin the provider advises waiters (IAAttr.Spin). It
// must cover a small-message round trip, or the waiter sleeps on the
// completion channel for every message and pays a wake-up that costs
// far more than the round trip. Chosen by measurement (test/vm/bench.sh,
// the info-spin rows: rdmanet's 64-byte ping-pong on rxe0 in the TCG
// guest against ib_send_lat, medians of 3, one boot): the median half
// round trip was 487 µs spinning 5 µs, 522 µs at 20 µs, 352 µs at
// 50 µs, 51 µs at 200 µs and 59 µs at 1 ms (ib_send_lat: 12-22 µs).
// Below the round trip of a software device the spin fails and the
// waits sleep; 200 µs catches it, and more only burns. On a NIC the
// round trip is a few microseconds, so a wait ends long before; an idle
// wait burns the spin once, after which package dat's adaptive back-off
// makes the next waits sleep at once (see dat.PollAdaptive).
const defaultSpin = 200 * time.Microsecond

// Private-data limits per transport: on IB and RoCE the REQ is the binding
// constraint (92 bytes minus the 36-byte rdma_cm header). On iWARP the
// limit the MPA rules give, 252 (siw's 256-byte MPA_MAX_PRIVDATA
// minus the 4-byte MPA v2 IRD/ORD block), is one too many for kernel siw as
// a sender: siw_send_mpareqrep adds the 4 bytes to a u8 length, so 252
// consumer bytes go out with PD_Length 0 and the peer drops the connection
// (measured: connect, accept and reject all fail at 252 and work at 251).
const (
	maxPrivateDataIB    = 56
	maxPrivateDataIWARP = 251
)

// maxSGE caps the SGE count so that a post can build its list in a fixed
// scratch array (QP.sges); no common device allows more.
const maxSGE = 32

// devLimits are device limits and traits that IAAttr has no field for.
type devLimits struct {
	maxCQE    int // entries of one CQ
	maxSRQSGE int // SGEs of one SRQ receive
	// cqResizable: ibv_resize_cq works (rxe; not siw), so a CQ can grow
	// as QPs are attached (CQ.attach).
	cqResizable bool
	// windows: the device has type 1 memory windows, so its PDs and QPs
	// offer the window interfaces (windowPD, windowQP).
	windows bool
	// windowBoundsByRegion: the device checks an access through a
	// window against the region the window is bound to, not against the
	// window's own range, so windows are bound over an exact-range
	// registration of their own (window.go).
	windowBoundsByRegion bool
	// splitSmall: the device sends a small single-SGE Send or RDMA
	// Write whose memory crosses a page boundary wrong (siw), so such an
	// SGE is split at the boundary (splitSmallSGE) and every QP gets
	// room for two send SGEs.
	splitSmall bool
	// silentErrors: the device moves a QP to the error state on a
	// remote access violation without an async event (errorWatch).
	silentErrors bool
}

// rxeVendorID is the vendor_id of the kernel's soft-RoCE driver (rxe).
// Device names are chosen by whoever adds the link, so the name cannot
// tell.
const rxeVendorID = 0xffffff

// queryAttr derives the IA attributes from ibv_query_device and
// ibv_query_port.
func queryAttr(ctx *C.struct_ibv_context, port uint8) (driver.IAAttr, devLimits, error) {
	var da C.struct_ibv_device_attr
	var pa C.struct_ibv_port_attr
	if rc := C.shim_query(ctx, C.uint8_t(port), &da, &pa); rc != 0 {
		return driver.IAAttr{}, devLimits{}, fmt.Errorf("query device: %w", errnoOf(rc))
	}
	a := driver.IAAttr{
		Name:           deviceName(ctx),
		MaxQPs:         int(da.max_qp),
		MaxWRPerQP:     int(da.max_qp_wr),
		MaxSGE:         min(int(da.max_sge), maxSGE),
		MaxReadSGE:     min(int(da.max_sge_rd), maxSGE),
		MaxMessageSize: uint32(pa.max_msg_sz),
		MaxRDMASize:    uint32(pa.max_msg_sz),
		// rdma_conn_param carries the depths in a byte.
		MaxIRD:    min(int(da.max_qp_rd_atom), 255),
		MaxORD:    min(int(da.max_qp_init_rd_atom), 255),
		MaxMR:     int(da.max_mr),
		MaxMRSize: uint64(da.max_mr_size),
		// The IB spec leaves it to the device whether an SRQ may serve
		// QPs of another PD; say no, which every device honours.
		SRQPDDifference: false,
		// The device writes completions where a poll sees them at once,
		// while a sleeping waiter pays a completion-channel event and a
		// wake-up: spin for about a small-message round trip first.
		Spin: defaultSpin,
	}
	if a.MaxReadSGE == 0 {
		// max_sge_rd is an IB "RD" QP limit some drivers leave at zero;
		// reads then use the ordinary SGE limit.
		a.MaxReadSGE = a.MaxSGE
	}
	if da.max_srq > 0 {
		a.MaxSRQWR = int(da.max_srq_wr)
	}
	switch {
	case C.shim_transport(ctx) == C.IBV_TRANSPORT_IWARP:
		a.Transport = driver.TransportIWARP
		a.MaxPrivateData = maxPrivateDataIWARP
	case pa.link_layer == C.IBV_LINK_LAYER_ETHERNET:
		a.Transport = driver.TransportRoCE
		a.MaxPrivateData = maxPrivateDataIB
	default:
		a.Transport = driver.TransportIB
		a.MaxPrivateData = maxPrivateDataIB
	}
	// RDMA Write with Immediate is an InfiniBand operation (RoCE too);
	// iWARP's RDMAP has none, and siw refuses the opcode.
	a.WriteImm = a.Transport != driver.TransportIWARP
	lim := devLimits{maxCQE: int(da.max_cqe), maxSRQSGE: min(int(da.max_srq_sge), maxSGE), windows: hasType1Windows(&da)}
	lim.cqResizable = C.shim_probe_resize_cq(ctx) != 0
	// Measured on Debian 12's 6.1 kernel: an RDMA Write through an rxe
	// window's key lands anywhere in the window's region, even wholly
	// outside the window (the responder checks the region's range only).
	lim.windowBoundsByRegion = lim.windows && da.vendor_id == rxeVendorID
	lim.silentErrors = da.vendor_id == rxeVendorID
	lim.splitSmall = da.vendor_id == siwVendorID
	return a, lim, nil
}

// hasType1Windows reports whether the device has type 1 memory windows,
// the kind RMRs use (window.go): IBV_DEVICE_MEM_WINDOW and a nonzero
// max_mw. rxe has them; siw has no windows at all (max_mw 0).
func hasType1Windows(da *C.struct_ibv_device_attr) bool {
	return da.max_mw > 0 && da.device_cap_flags&C.IBV_DEVICE_MEM_WINDOW != 0
}
