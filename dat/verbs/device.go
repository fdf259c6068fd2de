//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"sync"
	"syscall"
)

// device is the process-wide reader of one ibv_context's async event fd.
// librdmacm shares a single context per device among all its ids, so IAs
// on the same device share this loop (refcounted): with one reader per IA
// each event would reach only one of them.
type device struct {
	ctx  *C.struct_ibv_context
	refs int // guarded by devices.mu
	// plug is the CQ that keeps libsiw's invalid mmap key taken on a siw
	// context (siwkey.go), destroyed with the device; nil elsewhere.
	plug  *C.struct_ibv_cq
	loop  *fdLoop
	mu    sync.Mutex                  // serialises fetch and dispatch (loop and drain)
	batch []C.struct_shim_async_event // guarded by mu
}

var devices struct {
	mu sync.Mutex
	m  map[*C.struct_ibv_context]*device
}

// asyncOwner is what a QP's or SRQ's key maps to for async events.
type asyncOwner interface {
	asyncEvent(typ C.enum_ibv_event_type)
}

// acquireDevice returns the running async loop of ctx, starting it first.
func acquireDevice(ctx *C.struct_ibv_context) (*device, error) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if d := devices.m[ctx]; d != nil {
		d.refs++
		return d, nil
	}
	d := &device{ctx: ctx, refs: 1}
	var vendor C.uint32_t
	var maxCQE C.int
	if rc := C.shim_vendor(ctx, &vendor, &maxCQE); rc != 0 {
		return nil, fmt.Errorf("verbs: %s: query device: %w", deviceName(ctx), errnoOf(rc))
	}
	if vendor == siwVendorID {
		// Before any queue of ours exists on the context: see siwkey.go.
		plug, err := plugSiwKey(ctx, int(maxCQE))
		if err != nil {
			debugDevice(nil, deviceName(ctx), "libsiw's invalid mmap key left unplugged", slog.String("error", err.Error()))
		}
		d.plug = plug
	}
	l, err := startFDLoop(int(ctx.async_fd), "async events "+deviceName(ctx), d.fetch, d.dispatch)
	if err != nil {
		d.destroyPlug()
		return nil, err
	}
	d.loop = l
	if devices.m == nil {
		devices.m = make(map[*C.struct_ibv_context]*device)
	}
	devices.m[ctx] = d
	return d, nil
}

// release drops one reference; the last stops the loop.
func (d *device) release() {
	devices.mu.Lock()
	d.refs--
	last := d.refs == 0
	if last {
		delete(devices.m, d.ctx)
	}
	devices.mu.Unlock()
	if last {
		d.loop.stop()
		d.destroyPlug()
	}
}

// destroyPlug frees the siw plug, once every queue of ours on the context
// is gone (the last IA's).
func (d *device) destroyPlug() {
	if d.plug != nil {
		C.shim_destroy_cq(d.plug)
		d.plug = nil
	}
}

func (d *device) fetch() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fetchLocked()
}

func (d *device) fetchLocked() bool {
	for {
		var ev C.struct_shim_async_event
		if rc := C.shim_next_async_event(d.ctx, &ev); rc != 0 {
			if e := syscall.Errno(-rc); e != syscall.EAGAIN && e != syscall.EINTR {
				debugDevice(nil, deviceName(d.ctx), "ibv_get_async_event failed", slog.String("error", e.Error()))
			}
			return len(d.batch) > 0
		}
		d.batch = append(d.batch, ev)
	}
}

func (d *device) dispatch() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dispatchLocked()
}

// drain takes and dispatches the events queued on the async fd now, for a
// caller that must see them before acting on an event of another fd.
func (d *device) drain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fetchLocked()
	d.dispatchLocked()
}

// dispatchLocked hands the batch to the events' owners. Owners only take
// their own locks, never d.mu.
func (d *device) dispatchLocked() {
	batch := d.batch
	d.batch = nil
	for _, ev := range batch {
		if ev.key == 0 {
			continue // port and device events: rdma_cm reports what matters
		}
		if o, ok := lookup(uintptr(ev.key)).(asyncOwner); ok {
			o.asyncEvent(C.enum_ibv_event_type(ev._type))
		}
	}
}

// asyncEventName names an ibv_event_type for error messages.
func asyncEventName(t C.enum_ibv_event_type) string {
	return C.GoString(C.ibv_event_type_str(t))
}
