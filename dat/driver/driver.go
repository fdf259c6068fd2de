// Package driver defines the interface that DAT providers implement.
//
// It plays the role database/sql/driver plays for database/sql: package dat
// owns every handle, reference count, the endpoint state machine, event
// queues, the order in which completions are reported, the flushing of
// work a broken or closed connection never finished, and all argument
// validation that the DAT specification assigns to the consumer API. A
// provider never sees a DAT handle or a DAT state: it moves connections and
// bytes, fills completion queues, and reports transport events.
//
// # The required core
//
// Eight interfaces, thirty methods: Driver (1), IA (6), PD (2), MR (4), CQ
// (4), QP (6), Listener (3) and Request (4). What only some providers can
// do is an optional interface, found by type assertion as database/sql
// finds driver.Pinger: ConfigOpener on a Driver (a logger for the IA),
// SRQCreator on an IA, WindowAllocator on a PD, WindowBinder and
// OptionsConnector (a local address and port, a socket hook, keepalive)
// on a QP, RequestNotifier on a Listener, LocalAccepter on a Request,
// and CQProgresser on a CQ. Options of a listener are fields of
// ListenConfig, which a provider may ignore where they do not apply.
//
// # Completions are pulled
//
// A provider never calls package dat on the data path. It appends each
// finished work request to the completion queue (CQ) named in the QP's
// configuration, and the goroutine that waits for it (an EVD waiter, a
// blocked rdmanet Read) takes it with CQ.Poll, spinning for a while and
// then sleeping in CQ.Wait. No goroutine stands between a completion and
// its waiter.
//
// # Ordering and flushing belong to package dat
//
// Package dat gives every work request an ID (RecvWR.ID, SendWR.ID) and
// reports completions in post order itself, so a provider may complete the
// requests of one queue out of order (soft-iWARP completes a Send posted
// behind an RDMA Read before the Read). When a connection ends, a provider
// drops the requests it did not finish without completing them: package
// dat completes them as flushed, after it has polled every completion the
// provider did produce. For that, a provider guarantees quiescence: once
// QP.Disconnect or QP.Close has returned, and before QPConfig.OnDisconnect
// is called, the provider touches no posted memory any more and every
// completion it will ever produce for the QP is already in its CQ.
//
// # Concurrency
//
// Calls into a provider are made by package dat with its own locks
// released, except the post calls (PostSend, PostRecv), which dat makes
// under the lock of the queue they post to so that IDs reach the provider
// in post order. A provider must therefore never call back into package
// dat from a post, and OnDisconnect and OnLowWatermark must not be called
// from inside a post or a Poll. Connection calls (Connect, Accept,
// Disconnect) may block; dat makes them from goroutines of its own.
package driver

import (
	"context"
	"net"
	"time"
)

// Driver opens Interface Adapters. A provider registers one Driver under a
// name with Register, usually from an init function of its package; the IA
// registry (dat.conf) maps IA names to a provider name and the parameters
// passed to Open.
type Driver interface {
	// Open opens one IA. Args are the provider-specific instance
	// parameters from the registry entry (for example a local address or a
	// device name).
	Open(ctx context.Context, args []string) (IA, error)
}

// IA is an open Interface Adapter: one local RDMA-capable address.
type IA interface {
	// Attr reports the adapter's limits, capabilities and address. It
	// must not change for the life of the IA.
	Attr() IAAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue.
	CreateCQ(cfg CQConfig) (CQ, error)
	// CreateQP creates an unconnected queue pair.
	CreateQP(cfg QPConfig) (QP, error)
	// Listen starts accepting connection requests on a port. It fails with
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
	// Close frees the PD. Package dat guarantees nothing uses it any more.
	Close() error
}

// MR is a registered memory region.
type MR interface {
	// LKey is the local key (DAT lmr_context).
	LKey() uint32
	// RKey is the remote key, the STag on iWARP (DAT rmr_context).
	RKey() uint32
	// Addr is the registered virtual address of the first byte: the
	// address work requests and remote peers use for this region.
	Addr() uint64
	// Close deregisters the region.
	Close() error
}

// CQ is a completion queue: the work requests of every QP whose
// configuration names it complete here. Package dat calls Poll and Wait
// from one goroutine at a time per CQ; the provider fills the queue
// concurrently.
type CQ interface {
	// Poll moves up to len(dst) completions, oldest first, into dst and
	// returns how many it moved. It never blocks.
	Poll(dst []Completion) int
	// Wait blocks until the CQ holds a completion, Interrupt is called,
	// the deadline passes (the zero time: no deadline) or the CQ is
	// closed. It returns at once if the CQ already holds a completion or
	// an Interrupt came since the last Wait returned. A spurious return is
	// allowed: package dat polls again either way. It returns an error
	// wrapping net.ErrClosed once the CQ is closed, else nil.
	Wait(deadline time.Time) error
	// Interrupt makes the current Wait, or the next one if none is in
	// progress, return. Package dat calls it when an event that does not
	// come through the CQ (a connection event, a software event, a flush)
	// is queued for the waiter. It never blocks.
	Interrupt()
	// Close frees the CQ. Package dat guarantees no QP uses it any more;
	// a Wait in progress returns.
	Close() error
}

// CQProgresser is implemented by a CQ whose completions a spinning waiter
// can bring about itself: a provider that does in goroutines of its own
// what a device would do (the pure-Go iWARP provider reads its sockets
// there) lets the waiter do that work, without blocking, instead of
// waiting for the goroutine, which a spinning waiter would keep from the
// processor. Package dat calls Progress between the polls of a spinning
// waiter (PollAdaptive's spin, PollBusy), from the goroutine that polls
// the CQ, never from a Wait in progress. Progress never blocks. It
// reports whether it found work (bytes arrived), so that the waiter polls
// again at once instead of yielding the processor first, and stop when
// the waiter cannot do the work now (it is with the provider's goroutine,
// or the CQ is not one the provider lets waiters progress): a spin would
// then only keep that goroutine from the processor, so PollAdaptive's
// waiter ends its spin and sleeps.
type CQProgresser interface {
	Progress() (found, stop bool)
}

// QP is a reliable-connected queue pair: the transport endpoint behind a DAT
// EP.
type QP interface {
	// Modify changes the configuration of a QP that has never connected.
	// The CQs, Tag and callbacks stay those of CreateQP; receives already
	// posted stay posted.
	Modify(cfg QPConfig) error
	// Connect establishes a connection to remote, sending privateData. It
	// blocks until the peer accepts (returning its private data and the
	// connection's addresses), rejects (an error wrapping a *RejectError),
	// or the attempt fails. An expired ctx deadline must be reported as
	// context.DeadlineExceeded. A QP connects at most once: package dat
	// creates a new QP to connect an endpoint again. When Connect fails,
	// the QP is quiescent as after Disconnect: dat flushes the receives
	// posted to it at once.
	Connect(ctx context.Context, remote net.Addr, privateData []byte) (ConnectResult, error)
	// Disconnect ends the connection, or aborts its establishment. A
	// graceful disconnect first lets the send-side work finish (bounded
	// by a provider timeout); an abrupt one drops it. It returns once the
	// QP is quiescent (see the package documentation). OnDisconnect is not
	// called for a local Disconnect. Calling it again, or on a QP whose
	// connection already ended, does nothing beyond hurrying a graceful
	// disconnect still in progress when graceful is false.
	Disconnect(graceful bool) error
	// PostRecv posts a receive buffer. Receives may be posted before the
	// connection exists (iWARP has no receiver-not-ready retry, so they
	// must be). After the connection ended the provider drops the request
	// and returns nil: package dat flushes it. The provider must not keep
	// wr.Local after returning.
	PostRecv(wr RecvWR) error
	// PostSend posts a Send, RDMA Write or RDMA Read on a connected QP,
	// with the ownership and end-of-connection rules of PostRecv.
	PostSend(wr SendWR) error
	// Close destroys the QP, abruptly ending any connection or attempt.
	// It returns once the QP is quiescent and is idempotent.
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
	// Info describes the request. Its PrivateData is owned by the Request
	// and must not be modified.
	Info() RequestInfo
	// Accept completes the connection on qp, which must never have
	// connected, sending privateData to the peer. It returns once the
	// connection is established or has failed; on failure qp is quiescent,
	// as Connect's is.
	Accept(ctx context.Context, qp QP, privateData []byte) (ConnectResult, error)
	// Reject refuses the request, delivering privateData to the peer as a
	// consumer (peer) reject.
	Reject(privateData []byte) error
	// Abort refuses the request as a non-peer reject (for example because
	// the service point was freed) and releases it.
	Abort() error
}

// RequestNotifier is implemented by a Listener that can hand each request
// to a function as it arrives, in the goroutine that received it, instead
// of queuing it for Accept. Package dat uses it to turn a request into a
// CR and its event at once: a goroutine of its own blocked in Accept
// would have to be woken for each request, a hand-off that costs a dial
// more than the work it does (on two shared cores the scheduler wakes the
// other core for it).
type RequestNotifier interface {
	// NotifyRequests makes the listener call f with each request that
	// arrives from then on, instead of queuing it; requests queued
	// already are still returned by Accept. f must not block: it runs
	// in the listener's accept path. It is called at most once per
	// Listener, before requests may reach f, and Close returns only
	// once no call of f is in progress.
	NotifyRequests(f func(Request))
}

// LocalAccepter is implemented by a Request whose Accept does not wait
// for the peer: it writes its answer and the connection is up (an iWARP
// responder is established once its MPA Reply is written, RFC 5044
// §7.1.2), so Accept takes no longer than a write to a socket whose peer
// has just written. Package dat then runs Accept in the goroutine of
// dat_cr_accept rather than in one of its own, which saves the hand-off
// between the two. A provider whose accept waits for the peer (rdma_cm
// waits for its RTU) does not implement it, so that a peer that never
// answers holds no consumer goroutine.
type LocalAccepter interface {
	// AcceptsLocally reports whether Accept returns without waiting for
	// the peer.
	AcceptsLocally() bool
}

// SRQCreator is implemented by an IA with shared receive queues.
type SRQCreator interface {
	// CreateSRQ creates a shared receive queue in pd. Receives posted to
	// it complete on the RecvCQ of whichever QP consumes them, with that
	// QP's Tag.
	CreateSRQ(pd PD, cfg SRQConfig) (SRQ, error)
}

// SRQ is a shared receive queue.
type SRQ interface {
	// PostRecv posts a receive buffer shared by every QP on the SRQ.
	PostRecv(wr RecvWR) error
	// SetLowWatermark arms the low-watermark event: when the number of
	// posted receives drops below n, SRQConfig.OnLowWatermark is called
	// once. Zero disarms it.
	SetLowWatermark(n int) error
	// Posted reports the number of receives currently posted.
	Posted() int
	// Close destroys the SRQ. Receives still posted are dropped; package
	// dat flushes them.
	Close() error
}

// SendListPoster is implemented by a QP that can hand several send-side
// requests to the device in one call (ibv_post_send with a chained list:
// one doorbell, one system call on soft devices). PostSendList posts
// wrs in order and returns n, how many it posted: wrs[:n] will complete
// as if posted by PostSend, and on an error none of wrs[n:] was posted.
// Without it, package dat posts a list one PostSend at a time.
type SendListPoster interface {
	PostSendList(wrs []SendWR) (n int, err error)
}

// WindowAllocator is implemented by a PD whose adapter has memory windows
// (DAT RMRs).
//
// Why windows are allocated on the PD and bound on the QP: verbs binds a
// window by posting a work request to a queue pair (ibv_bind_mw posts a
// type 1 bind to the send queue, and the binding exists only once its
// completion arrives), while the window itself, like DAT's RMR, lives in a
// protection domain from dat_rmr_create to dat_rmr_free, bound or not.
// dat_rmr_bind names an EP for the same reason.
type WindowAllocator interface {
	// AllocWindow allocates an unbound memory window in this PD.
	AllocWindow() (Window, error)
}

// Window is a memory window: a remote key of its own that exposes part of a
// registered region to peers, with rights of its own, and can be moved or
// withdrawn without touching the region.
type Window interface {
	// Binding reports the window's current binding: its remote key, and
	// ok false when the window is unbound.
	Binding() (rkey uint32, ok bool)
	// Close frees the window; a binding ends at once: its remote key stops
	// working. It is idempotent.
	Close() error
}

// WindowBinder is implemented by a QP that can bind memory windows.
type WindowBinder interface {
	// BindWindow binds w, a window of the QP's PD, over [addr,
	// addr+length) of mr (a region of the same PD), granting peers the
	// remote rights in access, and returns the window's new remote key. A
	// nil mr with length 0 unbinds the window (and returns 0). Either way
	// the previous binding's key stops working.
	//
	// The bind goes through this QP, which must be connected (an error
	// wrapping ErrNotConnected otherwise), and BindWindow returns only once
	// the binding is in effect or has failed, within a bounded time. It is
	// not a work request in PostSend's sense: it produces no Completion.
	// Package dat validates the range and rights against the LMR; the
	// provider may leave further checks to the device.
	//
	// On error the window either keeps its previous binding or is left
	// unbound; w.Binding reports which.
	BindWindow(w Window, mr MR, addr, length uint64, access Access) (rkey uint32, err error)
}
