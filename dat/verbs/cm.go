//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"syscall"
	"unsafe"
)

// cmEventType is enum rdma_cm_event_type.
type cmEventType int

// The rdma_cm events this package acts on (rdma_cma.h values).
const (
	cmAddrResolved    cmEventType = C.RDMA_CM_EVENT_ADDR_RESOLVED
	cmAddrError       cmEventType = C.RDMA_CM_EVENT_ADDR_ERROR
	cmRouteResolved   cmEventType = C.RDMA_CM_EVENT_ROUTE_RESOLVED
	cmRouteError      cmEventType = C.RDMA_CM_EVENT_ROUTE_ERROR
	cmConnectRequest  cmEventType = C.RDMA_CM_EVENT_CONNECT_REQUEST
	cmConnectResponse cmEventType = C.RDMA_CM_EVENT_CONNECT_RESPONSE
	cmConnectError    cmEventType = C.RDMA_CM_EVENT_CONNECT_ERROR
	cmUnreachable     cmEventType = C.RDMA_CM_EVENT_UNREACHABLE
	cmRejected        cmEventType = C.RDMA_CM_EVENT_REJECTED
	cmEstablished     cmEventType = C.RDMA_CM_EVENT_ESTABLISHED
	cmDisconnected    cmEventType = C.RDMA_CM_EVENT_DISCONNECTED
	cmDeviceRemoval   cmEventType = C.RDMA_CM_EVENT_DEVICE_REMOVAL
	cmTimewaitExit    cmEventType = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
)

func (t cmEventType) String() string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t)))
}

// ibRejectConsumer is the IB CM reject reason of rdma_reject (consumer
// defined); the REJECTED event reports it as a positive status.
const ibRejectConsumer = 28

// cmEvent is a copy of one rdma_cm event, taken and acknowledged by the
// IA's CM loop.
type cmEvent struct {
	typ       cmEventType
	status    int // negative errno, or the IB CM reject reason
	key       uintptr
	listenKey uintptr
	id        *C.struct_rdma_cm_id
	// Connection parameters, from the receiver's point of view:
	// responderResources is what it should offer as IRD, initiatorDepth
	// caps its ORD.
	responderResources, initiatorDepth int
	pdata                              []byte
}

// err describes a failure event.
func (ev *cmEvent) err() error {
	if ev.status < 0 {
		return fmt.Errorf("%v: %w", ev.typ, syscall.Errno(-ev.status))
	}
	return fmt.Errorf("%v (status %d)", ev.typ, ev.status)
}

// cmOwner is what a CM id's key maps to: a QP, a Listener or a Request.
type cmOwner interface {
	cmEvent(ev *cmEvent)
}

// fetchCM takes every queued event off the IA's channel (the CM loop's
// fetch step). It holds cmMu so that librdmacm's own QP transitions inside
// rdma_get_cm_event never race a QP being destroyed (see destroyQP).
func (ia *IA) fetchCM() bool {
	ia.cmMu.Lock()
	defer ia.cmMu.Unlock()
	for {
		var raw C.struct_shim_cm_event
		nk := newKey() // used only by a CONNECT_REQUEST; keys are plentiful
		rc := C.shim_next_cm_event(ia.ch, &raw, C.uintptr_t(nk))
		if rc != 0 {
			if e := syscall.Errno(-rc); e != syscall.EAGAIN && e != syscall.EINTR {
				ia.debug("rdma_get_cm_event failed", slog.String("error", e.Error()))
			}
			return len(ia.cmBatch) > 0
		}
		ev := cmEvent{
			typ:                cmEventType(raw._type),
			status:             int(raw.status),
			key:                uintptr(raw.key),
			listenKey:          uintptr(raw.listen_key),
			id:                 raw.id,
			responderResources: int(raw.responder_resources),
			initiatorDepth:     int(raw.initiator_depth),
		}
		if n := int(raw.pdata_len); n > 0 {
			ev.pdata = C.GoBytes(unsafe.Pointer(&raw.pdata[0]), C.int(n))
		}
		ia.cmBatch = append(ia.cmBatch, ev)
	}
}

// dispatchCM hands fetched events to their owners, in order.
func (ia *IA) dispatchCM() {
	batch := ia.cmBatch
	ia.cmBatch = nil
	for i := range batch {
		ev := &batch[i]
		ia.debug("cm event", slog.String("event", ev.typ.String()), slog.Int("status", ev.status),
			slog.Uint64("key", uint64(ev.key)), slog.Uint64("listen_key", uint64(ev.listenKey)), slog.Int("private_data", len(ev.pdata)))
		if ev.typ == cmConnectRequest {
			ia.connectRequest(ev)
			continue
		}
		if o, ok := lookup(ev.key).(cmOwner); ok {
			o.cmEvent(ev)
		}
	}
}

// connectRequest routes a CONNECT_REQUEST to its listener. A request whose
// listener is gone is refused at once, as a non-peer reject.
func (ia *IA) connectRequest(ev *cmEvent) {
	if l, ok := lookup(ev.listenKey).(*Listener); ok && l.request(ev) {
		return
	}
	refuse(ev.id)
}

// refuse rejects a request as a non-peer reject and destroys its id.
func refuse(id *C.struct_rdma_cm_id) {
	C.shim_reject(id, nil, 0, 1)
	C.shim_destroy_id(id)
}
