// Package verbs is rdmanet's verbs provider: the DAT provider contract of
// package dat/driver over rdma-core's librdmacm and libibverbs (cgo), for
// any RDMA device the kernel drives: InfiniBand, RoCE (rxe) and iWARP
// (siw, iWARP NICs).
//
// Every file but this one is built only with `-tags verbs` on Linux with
// cgo (Debian: libibverbs-dev, librdmacm-dev), so default and CGO_ENABLED=0
// builds are unaffected. Package dat registers Driver as "verbs" in such
// builds. The tests need real devices and run in the test VM (test/vm).
//
// # Open arguments
//
// args[0] is the IA's address: an IP literal or a network interface name
// (its first IPv4 address, else its first global IPv6 one), as in DAPL's
// dat.conf "rxe_if0 0". A numeric second argument (DAPL's port) is
// accepted and ignored. An rdma_cm id bound to the address names the
// device (ibv_context) and port; an address on no RDMA device is
// driver.ErrInvalidAddress.
//
// # Event loops
//
// Each IA has one rdma_event_channel and one ibv_comp_channel; each device
// (ibv_context, which librdmacm shares among its ids) has one async event
// reader, refcounted across IAs. Every such fd is made non-blocking, a
// duplicate is wrapped in an *os.File, and one goroutine waits in Go's
// netpoller (RawConn.Read) until it is readable: no thread sleeps in C and
// nothing spins. The goroutine takes every queued event inside one cgo
// call per event that copies it and acknowledges it at once (so
// rdma_destroy_id, ibv_destroy_cq and ibv_destroy_srq never wait for Go),
// then dispatches outside the fd's lock. C context fields hold integer
// registry keys, never Go pointers; events are routed by key, and a key
// whose owner is gone is dropped. A CONNECT_REQUEST's new id gets its own
// key before the event is acked. Close of the IA stops its loops and
// waits for them; handler calls run on a per-QP delivery goroutine that
// exists only while events are queued.
//
// # Memory registration and the cgo rules
//
// PD.Register accepts any []byte, including Go heap memory, and passes its
// address to ibv_reg_mr as an integer. The kernel pins the pages and the
// device accesses them until the MR is closed, which the cgo rule "C may
// not keep a Go pointer after the call returns" forbids for a Go pointer
// value. Handing C an integer is sound here because the rule exists to let
// the garbage collector move or free memory, and neither happens:
//
//   - Go's heap is non-moving: an object's address is fixed for its life
//     (only goroutine stacks move, and a slice stored in an MR, as here,
//     or passed through the driver interface has escaped to the heap).
//   - The memory stays allocated while reachable; package dat keeps the
//     slice until the LMR is freed and the MR itself holds it until Close.
//   - The collector never writes into a []byte (it has no pointers to
//     scan) and returns whole spans to the OS only when every object in
//     them is dead, so pinned pages are never unmapped under the device.
//
// The caller must not register a stack array (impossible through the
// interface) nor let the memory die before closing the MR. Copying into C
// memory is not an option, as it would break RDMA semantics (the peer
// writes memory the consumer reads). AllocRegion/FreeRegion offer mmap'd
// memory outside the heap for regions that should not be GC-managed (very
// large ones, ones shared across fork). Fork: kernels since 5.13 keep
// pinned pages coherent in the parent; ibv_fork_init is not called.
//
// # QPs, connections and accept
//
// A QP's verbs objects live per connection. Connect creates an rdma_cm id
// (RDMA_PS_TCP) on the IA channel, resolves address and route (2000 ms
// each), creates one CQ for both queues on the IA's completion channel and
// an RC QP on the id (rdma_create_qp), posts the receives queued while
// there was no QP, and calls rdma_connect (responder_resources = IRD,
// initiator_depth = ORD, retry 7, RNR retry 7). Request.Accept builds the
// CQ and QP the same way directly on the request's own id, so nothing is
// migrated between ids (DAPL instead moves the EP's QP to the request id),
// then calls rdma_accept with depths min(QP's, requester's). Reset and
// Close destroy QP, CQ and id; the next connection gets fresh ones, as
// DAPL's dat_ep_reset does. Modify applies to the next connection.
//
// # Completion pairing
//
// Package dat pairs completions with posts per queue in post order and
// needs exactly one Completion per posted request, flushes included. So
// every send-side request is posted signalled (sq_sig_all), and the
// Completion's Signaled flag reports whether the poster asked for one. Each
// queue keeps a FIFO of what was posted (cookie, opcode, requested flag,
// length); wr_id carries the queue and a sequence number, which is checked
// against the FIFO head, because a failed work completion has no opcode.
// Kernel siw completes a Send or Write ahead of an RDMA Read posted before
// it (the Read completes when its Response arrives); such a completion is
// held until every earlier request has completed (reorder.go), so the
// handler still sees post order.
// A request posted on a dead connection completes flushed only after the
// device completed everything ahead of it; teardown moves the QP to the
// error state, waits for the device's flushes (bounded), and completes
// whatever is left as flushed itself before Reset or Close return. A
// failed request (not a flush) on an established connection means the QP
// is in the error state: the connection is reported broken
// (Disconnected(err)) and rdma_disconnect tells the peer. SRQ receives
// complete on the consuming QP's CQ and are reported by that QP's handler.
//
// # Outcomes of Connect
//
//	ESTABLISHED                          ConnectResult with accept data
//	REJECTED, IB reason 28 (consumer)    *driver.RejectError
//	REJECTED on iWARP with private data  *driver.RejectError
//	REJECTED otherwise (no listener: IB
//	reason 8; Abort/backlog: IB reason
//	35; iWARP without data)              plain error (non-peer reject)
//	rdma_connect ECONNREFUSED (iWARP,
//	nobody listening)                    plain error (non-peer reject)
//	ADDR_ERROR, ROUTE_ERROR, UNREACHABLE,
//	CONNECT_ERROR, EHOSTUNREACH,
//	ENETUNREACH, ETIMEDOUT ...           wraps driver.ErrUnreachable
//	ctx deadline / cancel                wraps context.DeadlineExceeded /
//	                                     context.Canceled
//	local Disconnect/Close meanwhile     wraps ErrAborted
//
// On iWARP the kernel reports an MPA reject and a TCP reset alike
// (-ECONNRESET); only a reject can carry data, so a REJECTED event without
// data counts as non-peer. A consumer reject with empty private data over
// iWARP is therefore seen as non-peer. Abort rejects with IB reason 35
// (rdma_reject_ece) so that IB initiators can tell it from Reject.
//
// On iWARP, rdma_connect makes the TCP connection synchronously inside the
// kernel; it runs on its own goroutine so ctx is honoured. rdma_destroy_id
// of an iWARP id whose MPA request is unanswered blocks in the kernel until
// the reply or siw's 10 s MPA timeout, so a failed attempt is torn down in
// the background; Reset and Close of that QP wait for it.
//
// # Private data
//
// IAAttr.MaxPrivateData is 56 on IB and RoCE (the IB CM REQ less the
// rdma_cm header) and 251 on iWARP: kernel siw adds its 4-byte MPA v2
// block to a u8 length, so 252 bytes go out with PD_Length 0 and the peer
// drops the connection. The IB CM has no length field: received private
// data (request, accept, reject) is the whole message field, cut here to
// 56 bytes, i.e. the sender's bytes zero-padded to 56. iWARP data arrives
// exactly.
//
// # Memory windows
//
// DAT RMRs are type 1 ibv_mw windows, offered when the device has them
// (IBV_DEVICE_MEM_WINDOW and max_mw > 0: rxe yes, siw no, so there
// IAAttr.MemoryWindows is false and package dat answers
// DAT_MODEL_NOT_SUPPORTED). Every region is then registered with
// IBV_ACCESS_MW_BIND. PD.AllocWindow is ibv_alloc_mw, Window.Close
// ibv_dealloc_mw (the key dies at once, no QP needed), and
// QP.BindWindow posts ibv_bind_mw to the connection's send queue (a
// zero-length bind unbinds) and waits for its completion, bounded by
// bindTimeout. The bind has an entry in the send FIFO like any request,
// so completion pairing is undisturbed, but its completion is consumed
// by the waiting BindWindow and never reaches the handler; it counts
// against MaxSendWR, as DAT counts binds among max_request_dtos. A bind
// the device refuses (IBV_WC_MW_BIND_ERR) breaks the connection like
// any failed request; after a failed, flushed or timed-out bind the
// window's state is unknown, so it is deallocated and replaced by a
// fresh, unbound one.
//
// rxe (6.1, measured) checks an access through a window's key against the
// whole region the window is bound to, not against the window: a Write
// lands anywhere in the LMR. On rxe (vendor_id 0xffffff) each binding is
// therefore made over a registration of exactly the window's range,
// without remote rights of its own, deregistered when the binding ends.
//
// # Not supported
//
// SharePort (rdma_cm cannot share a port between listeners) returns
// driver.ErrNotSupported. A remote access error breaks the connection at the target (a QP async
// event, or on rxe the QP found in the error state when DISCONNECTED
// arrives). At an iWARP initiator kernel siw completes the RDMA Write
// successfully and reports the target's TERMINATE as a plain DISCONNECTED
// with no QP event, so that side sees DISCONNECTED rather than BROKEN.
// Verbs work completions do not say whether a Send carried the solicited
// event bit, so every successful receive reports Solicited: a
// SOLICITED_WAIT EVD in package dat is woken by every receive rather than
// missing a solicited one.
package verbs
