//go:build verbs && linux && cgo

package verbs

import (
	"sync"
	"sync/atomic"
)

// The registry maps the integer keys this package stores in C context
// fields (rdma_cm_id.context, ibv_cq/ibv_qp/ibv_srq contexts) to their Go
// owners. cgo forbids C from keeping Go pointers, so C only ever holds a
// key; events carry the key back and are dispatched by lookup. Keys are
// never reused, so an event that arrives after its owner is gone finds
// nothing and is dropped.
var registry struct {
	next atomic.Uint64
	m    sync.Map // uintptr -> any
}

// newKey reserves a key without an owner yet.
func newKey() uintptr { return uintptr(registry.next.Add(1)) }

// register stores owner under a fresh key.
func register(owner any) uintptr {
	k := newKey()
	registry.m.Store(k, owner)
	return k
}

// setOwner stores (or replaces) the owner of k.
func setOwner(k uintptr, owner any) { registry.m.Store(k, owner) }

// lookup returns k's owner, or nil.
func lookup(k uintptr) any {
	v, _ := registry.m.Load(k)
	return v
}

// unregister forgets k.
func unregister(k uintptr) { registry.m.Delete(k) }
