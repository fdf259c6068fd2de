// Package driver defines the interface that DAT providers implement.
//
// It plays the role database/sql/driver plays for database/sql: package dat
// owns every handle, reference count, state machine, event queue and all
// argument validation that the DAT specification assigns to the consumer
// API, and calls down into a provider only for transport work. A provider
// therefore never sees a DAT handle or a DAT state; it moves connections and
// bytes and reports what happened.
//
// Calls into a provider are made by package dat with its own locks released,
// and may block: dat runs connection establishment in goroutines of its own
// and turns the outcome into DAT events. Providers must be safe for
// concurrent use by different endpoints.
package driver

import (
	"context"
	"net"
)

// Driver opens Interface Adapters. A provider registers one Driver under a
// name with dat.Register; the IA registry (dat.conf) maps IA names to a
// provider name and the parameters passed to Open.
type Driver interface {
	// Open opens one IA. Args are the provider-specific instance
	// parameters from the registry entry (for example a local address or a
	// device name).
	Open(ctx context.Context, args []string) (IA, error)
}

// IA is an open Interface Adapter: one local RDMA-capable address.
type IA interface {
	// Attr reports the adapter's limits and capabilities. It must not
	// change for the life of the IA.
	Attr() IAAttr
	// LocalAddr is the IA's own address (an unspecified IP if the IA is not
	// bound to one).
	LocalAddr() net.Addr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateQP creates an unconnected queue pair. Events for it are
	// reported to h.
	CreateQP(cfg QPConfig, h QPHandler) (QP, error)
	// CreateSRQ creates a shared receive queue in pd.
	CreateSRQ(pd PD, cfg SRQConfig, h SRQHandler) (SRQ, error)
	// Listen starts accepting connection requests on port. It fails with
	// an error wrapping ErrPortInUse when the port is taken.
	Listen(cfg ListenConfig) (Listener, error)
	// Close releases the IA. Package dat closes every object of the IA
	// before calling it.
	Close() error
}

// PD is a protection domain.
type PD interface {
	// Register makes buf available to the adapter with the given access.
	// The memory must stay valid (and, for Go memory, reachable) until the
	// MR is closed; package dat keeps the slice alive.
	Register(buf []byte, access Access) (MR, error)
	// AllocWindow allocates an unbound memory window (DAT RMR) in this
	// PD. Providers without memory windows return an error wrapping
	// ErrNotSupported. Windows are bound through a QP: see
	// QP.BindWindow.
	AllocWindow() (Window, error)
	// Close frees the PD. Package dat guarantees nothing uses it any more.
	Close() error
}

// Window is a memory window: a remote key of its own that exposes part
// of a registered region to peers, with rights of its own, and can be
// moved or withdrawn without touching the region.
//
// Why windows are allocated on the PD and bound on the QP: verbs binds
// a window by posting a work request to a queue pair (ibv_bind_mw posts
// a type 1 bind to the send queue, and the binding exists only once its
// completion arrives), while the window itself, like DAT's RMR, lives
// in a protection domain from dat_rmr_create to dat_rmr_free, bound or
// not. dat_rmr_bind names an EP for the same reason. So the PD creates
// windows, the QP binds them, and Close frees them without any QP.
type Window interface {
	// Binding reports the window's current binding: its remote key, and
	// ok false when the window is unbound.
	Binding() (rkey uint32, ok bool)
	// Close frees the window; a binding ends at once: its remote key
	// stops working. It is idempotent.
	Close() error
}

// MR is a registered memory region.
type MR interface {
	// LKey is the local key (DAT lmr_context).
	LKey() uint32
	// RKey is the remote key, the STag on iWARP (DAT rmr_context).
	RKey() uint32
	// Addr is the registered virtual address of the first byte: the
	// address DTO segments and remote peers use for this region.
	Addr() uint64
	// Close deregisters the region.
	Close() error
}

// Listener is a passive endpoint waiting for connection requests.
type Listener interface {
	// Accept blocks until a connection request arrives, ctx is done, or the
	// listener is closed (then it returns an error wrapping net.ErrClosed).
	Accept(ctx context.Context) (Request, error)
	// Addr is the address the listener is bound to.
	Addr() net.Addr
	// Close stops listening; pending requests not yet returned by Accept
	// are refused as non-peer rejects.
	Close() error
}

// Request is an incoming connection request that the consumer has not yet
// accepted or rejected.
type Request interface {
	// RemoteAddr is the address of the requesting peer.
	RemoteAddr() net.Addr
	// LocalAddr is the local address the request arrived on.
	LocalAddr() net.Addr
	// PrivateData is the requester's private data. It is owned by the
	// Request and must not be modified.
	PrivateData() []byte
	// ReadLimits are the requester's advertised RDMA Read depths: its
	// inbound (IRD) and outbound (ORD) limits.
	ReadLimits() (ird, ord int)
	// Accept completes the connection on qp, which must be unconnected,
	// sending privateData to the peer. It returns once the connection is
	// established or has failed.
	Accept(ctx context.Context, qp QP, privateData []byte) error
	// Reject refuses the request, delivering privateData to the peer as a
	// consumer (peer) reject.
	Reject(privateData []byte) error
	// Abort refuses the request as a non-peer reject (for example because
	// the service point was freed) and releases it.
	Abort() error
}

// QP is a reliable-connected queue pair: the transport endpoint behind a DAT
// EP.
type QP interface {
	// Modify changes the configuration of an unconnected QP.
	Modify(cfg QPConfig) error
	// Connect establishes a connection to remote, sending privateData. It
	// blocks until the peer accepts (returning the peer's private data),
	// rejects (an error wrapping a *RejectError), or the attempt fails. An
	// expired ctx deadline must be reported as context.DeadlineExceeded.
	Connect(ctx context.Context, remote net.Addr, privateData []byte) (ConnectResult, error)
	// Disconnect tears the connection down. A graceful disconnect lets
	// outstanding send-side work finish first; an abrupt one flushes it.
	// It returns once the local side is disconnected.
	Disconnect(graceful bool) error
	// Reset returns a disconnected QP to a fresh unconnected state,
	// discarding any remains of the previous connection.
	Reset() error
	// Addrs reports the local and remote addresses of an established
	// connection (nil before).
	Addrs() (local, remote net.Addr)
	// PostRecv posts a receive buffer.
	//
	// A posted work request completes exactly once (successfully, in
	// error, or flushed), and the work requests of one queue complete in
	// the order they were posted: package dat relies on both. The provider
	// must not keep wr.Local after returning; it is reused.
	PostRecv(wr RecvWR) error
	// PostSend posts a send-side work request (Send, RDMA Write, RDMA
	// Read), with the same completion and ownership rules as PostRecv.
	PostSend(wr SendWR) error
	// BindWindow binds w, a window of the QP's PD, over [addr,
	// addr+length) of mr (a region of the same PD), granting peers the
	// remote rights in access, and returns the window's new remote key.
	// A nil mr with length 0 unbinds the window (and returns 0). Either
	// way the previous binding's key stops working.
	//
	// The bind goes through this QP, which must be connected (an error
	// wrapping ErrNotConnected otherwise), and BindWindow returns only
	// once the binding is in effect or has failed, within a bounded time.
	// It is not a work request in PostSend's sense: it produces no
	// Completion, and the completions of the requests posted around it
	// keep their order and pairing. Package dat validates the range and
	// rights against the LMR; the provider may leave further checks to
	// the device.
	//
	// On error the window either keeps its previous binding or is left
	// unbound (a device that failed a bind may have changed it);
	// w.Binding reports which. Providers without memory windows return
	// an error wrapping ErrNotSupported.
	BindWindow(w Window, mr MR, addr, length uint64, access Access) (rkey uint32, err error)
	// Close destroys the QP, flushing anything still posted.
	Close() error
}

// QPHandler receives a QP's asynchronous events. Calls are serialised per
// QP and must not block for long.
type QPHandler interface {
	// Completion reports a finished (or flushed) work request.
	Completion(c Completion)
	// Disconnected reports that an established connection ended without a
	// local Disconnect call: err is nil for an orderly close by the peer,
	// and describes the failure when the connection broke.
	Disconnected(err error)
}

// SRQ is a shared receive queue.
type SRQ interface {
	// PostRecv posts a receive buffer shared by every QP on the SRQ.
	PostRecv(wr RecvWR) error
	// SetLowWatermark arms the low-watermark event: when the number of
	// posted receives drops below n the handler's LowWatermark is called
	// once. Zero disarms it.
	SetLowWatermark(n int) error
	// Posted reports the number of receives currently posted.
	Posted() int
	// Close destroys the SRQ, flushing its receives.
	Close() error
}

// SRQHandler receives an SRQ's asynchronous events.
type SRQHandler interface {
	// LowWatermark reports that the posted count fell below the armed
	// watermark.
	LowWatermark()
}
