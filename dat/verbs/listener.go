//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
)

// defaultBacklog applies when ListenConfig.Backlog is 0.
const defaultBacklog = 128

// Listener is a listening rdma_cm id bound to the IA address and a port.
// It implements driver.Listener. CONNECT_REQUEST events become Requests;
// at most Backlog of them may be unsettled (not yet accepted, rejected or
// aborted), and arrivals beyond that are refused as non-peer rejects.
type Listener struct {
	ia      *IA
	id      *C.struct_rdma_cm_id
	key     uintptr
	addr    *net.TCPAddr
	backlog int
	// keepAlive is the accepted connections' keepalive (resolved from
	// the ListenConfig; see keepalive.go).
	keepAlive net.KeepAliveConfig

	ready chan *Request // arrived, not yet returned by Accept; cap backlog
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	pending int // unsettled requests
}

var _ driver.Listener = (*Listener)(nil)

func listen(ia *IA, cfg driver.ListenConfig) (*Listener, error) {
	if cfg.SharePort {
		return nil, fmt.Errorf("verbs: listen: rdma_cm cannot share a port between listeners: %w", driver.ErrNotSupported)
	}
	backlog := cfg.Backlog
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	l := &Listener{ia: ia, backlog: backlog, ready: make(chan *Request, backlog), done: make(chan struct{}),
		keepAlive: driver.ResolveKeepAlive(cfg.KeepAlive, cfg.KeepAliveConfig)}
	l.key = register(l)
	where := net.JoinHostPort(ia.ip.String(), fmt.Sprint(cfg.Port))
	if rc := C.shim_create_id(ia.ch, &l.id, C.uintptr_t(l.key)); rc != 0 {
		unregister(l.key)
		return nil, fmt.Errorf("verbs: listen %s: rdma_create_id: %w", where, errnoOf(rc))
	}
	ip := ipBytes(ia.ip)
	err := errnoOf(C.shim_bind(l.id, (*C.uint8_t)(cBytes(ip)), C.int(len(ip)), C.uint16_t(cfg.Port)))
	if err == nil {
		// The kernel backlog only bounds events not yet read; this
		// provider reads them at once and applies its own backlog.
		err = errnoOf(C.shim_listen(l.id, C.int(max(backlog, defaultBacklog))))
	}
	if err != nil {
		C.shim_destroy_id(l.id)
		unregister(l.key)
		switch {
		case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EBUSY):
			return nil, fmt.Errorf("verbs: listen %s: %w: %w", where, err, driver.ErrPortInUse)
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, fmt.Errorf("verbs: listen %s: %w: %w", where, err, driver.ErrInvalidAddress)
		}
		return nil, fmt.Errorf("verbs: listen %s: %w", where, err)
	}
	l.addr = &net.TCPAddr{IP: ia.ip, Port: int(C.shim_src_port(l.id))}
	return l, nil
}

// Addr is the bound address, with the real port when Port was 0.
func (l *Listener) Addr() net.Addr { return l.addr }

// cmEvent receives the listening id's own events (device removal); the
// requests arrive through request.
func (l *Listener) cmEvent(*cmEvent) {}

// request takes a CONNECT_REQUEST from the CM loop. It returns false if
// the request must be refused (listener closed, backlog full).
func (l *Listener) request(ev *cmEvent) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.pending >= l.backlog {
		l.ia.debug("connection request refused", slog.Bool("listener_closed", l.closed), slog.Int("pending", l.pending), slog.Int("backlog", l.backlog))
		return false
	}
	l.pending++
	l.ia.debug("connection request", slog.Uint64("key", uint64(ev.key)), slog.Int("pending", l.pending), slog.Int("backlog", l.backlog))
	r := newRequest(l, ev)
	l.ready <- r // cannot block: len(ready) <= pending <= backlog
	return true
}

// release gives back the backlog slot of a settled request.
func (l *Listener) release() {
	l.mu.Lock()
	l.pending--
	l.ia.debug("connection request settled", slog.Int("pending", l.pending), slog.Int("backlog", l.backlog))
	l.mu.Unlock()
}

// Accept returns the next connection request. It fails with ctx's error,
// or with an error wrapping net.ErrClosed once the listener is closed.
func (l *Listener) Accept(ctx context.Context) (driver.Request, error) {
	return provkit.AcceptQueued(ctx, "verbs", l.ready, l.done, l.isClosed)
}

// isClosed reports whether Close has been called.
func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close stops listening. Requests not yet returned by Accept are refused
// as non-peer rejects; requests already returned stay the caller's to
// settle. It is idempotent.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	err := errnoOf(C.shim_destroy_id(l.id))
	unregister(l.key)
	for drained := false; !drained; {
		select {
		case r := <-l.ready:
			_ = r.Abort()
		default:
			drained = true
		}
	}
	l.ia.forgetListener(l)
	if err != nil {
		return fmt.Errorf("verbs: close listener: rdma_destroy_id: %w", err)
	}
	return nil
}
