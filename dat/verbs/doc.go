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
// Driver also implements driver.ConfigOpener: the IA's diagnostics
// (unexpected errors of its event loops, CM events as they arrive, QPs
// that did not drain) go to OpenConfig.Logger at Debug level with
// structured attributes; without one to slog.Default(), or to standard
// error when RDMANET_VERBS_DEBUG is set (log.go).
//
// # Connection options and keepalive
//
// QP implements driver.OptionsConnector. A port in
// ConnectOptions.LocalAddr is bound on the connection's rdma_cm id
// (rdma_bind_addr) before address resolution, so it is the connection's
// source port, which the peer's request reports; an IP must be the IA's.
// Control has no socket to act on and is ignored, as is
// ListenConfig.Control.
//
// KeepAlive and KeepAliveConfig (of ConnectOptions for a connect, of the
// ListenConfig for the connections a listener accepts) start a keeper on
// an established connection, on by default with package net's 15 s
// (keepalive.go): after Idle without any completion on the QP it posts a
// zero-length probe which the peer's device must answer and which no
// consumer sees; a probe that fails (retry exceeded) or that stays
// unanswered, with no other completion, for Interval × Count breaks the
// connection with an error wrapping syscall.ETIMEDOUT. The bound is what
// detects a dead peer: rxe takes the retry count of 7 given to
// rdma_connect as "retry forever", and iWARP's TCP retransmits for about
// 15 minutes. Over InfiniBand and RoCE the probe is an RDMA Write, which
// completes once acknowledged. On iWARP (siw) a Write completes as soon
// as the kernel's TCP has it, so there the keeper asks the kernel, through
// sock_diag (internal/tcpdiag), about the connection's TCP socket: the
// connection is idle while nothing came from the peer, the probe (a
// zero-length Write again) only makes TCP send a segment, and a peer whose
// TCP acknowledges nothing outstanding for Idle + Interval × Count is
// gone. The keeper first asks at its first tick, an Idle after
// establishment, not during connection setup, and each IA asks through
// one netlink socket, opened by its first keeper's question and closed
// with the IA. Only where the kernel does not show the socket does the
// keeper fall back to a zero-length RDMA Read, which completes when its
// response arrives. It is a fallback because siw answers a zero-length
// Read that arrives while it is transmitting from stale state, which
// terminates the connection (see keeper in keepalive.go). A kernel
// without sock_diag is known before connecting (one probe per process):
// the connection then asks for ORD and IRD of at least 1, and gets no
// keeper if the peer grants no Read (ORD 0 once negotiated). A kernel
// that answers sock_diag but does not show this connection's socket (a
// port mapper rewrote the port) is found out only at the first tick,
// with the ORD already negotiated as the consumer asked: a connection
// with ORD 0, as rdmanet's are, then loses its keeper and goes on without
// keepalive (logged at Debug). The probe takes a send queue slot of its
// own (extraSendWR).
//
// # Completions and event loops
//
// Completions take no goroutine of the provider. Each CQ has its own
// ibv_comp_channel; package dat's waiter polls the CQ (CQ.Poll maps each
// ibv_wc to a driver.Completion inside the caller's goroutine) and, when
// there is nothing, calls CQ.Wait, which arms the CQ, polls once more
// (a completion that arrived just before the arming raises no event), and
// then sleeps in Go's netpoller on a non-blocking duplicate of the
// channel's fd (RawConn.Read). The deadline and Interrupt work through the
// file's read deadline; Close closes the file, which ends a Wait and
// waits for it to leave before the CQ and channel are destroyed. Events
// are taken and acked as soon as the fd is readable.
//
// The connection's control path keeps its goroutines: each IA has one
// rdma_event_channel, and each device (ibv_context, which librdmacm
// shares among its ids) one async event reader, refcounted across IAs.
// Each runs in the netpoller the same way and takes every queued event
// inside one cgo call per event that copies and acknowledges it (so
// rdma_destroy_id and ibv_destroy_srq never wait for Go), then dispatches
// outside the fd's lock. C context fields hold integer registry keys,
// never Go pointers; events are routed by key, and a key whose owner is
// gone is dropped. A CONNECT_REQUEST's new id gets its own key before the
// event is acked.
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
// A QP connects once (package dat makes a new QP to connect again). Its
// verbs objects exist for that connection: Connect creates an rdma_cm id
// (RDMA_PS_TCP) on the IA channel, resolves address and route (2000 ms
// each), creates an RC QP on the id (rdma_create_qp) on the configured
// send and receive CQs, posts the receives queued while there was no QP,
// and calls rdma_connect (responder_resources = IRD, initiator_depth =
// ORD, retry 7, RNR retry 7). Request.Accept builds the QP the same way
// directly on the request's own id, so nothing is migrated between ids
// (DAPL instead moves the EP's QP to the request id), then calls
// rdma_accept with depths min(QP's, requester's). Modify applies until
// the QP connects.
//
// # Admission: what a listener can and cannot bound
//
// Unlike the iwarp provider, which owns its TCP listener and so drops
// silent or garbage connections itself, a verbs listener only ever sees
// connection requests the kernel's connection manager has already
// parsed: a CM REQ on InfiniBand and RoCE (rxe), a TCP connection whose
// MPA Request the kernel's iWARP code (siw's connection manager) has
// read in full. So the limits on half-open connections are the kernel's:
// on iWARP devices the MPA exchange has the kernel driver's own timeout
// (siw's is seconds, not configurable from user space) and the TCP accept
// queue is sized from rdma_listen's backlog; on RoCE a REQ that is never
// answered times out at the requester by the CM's own retries, and costs
// the listener one kernel cm_id meanwhile. What the provider bounds is
// the requests it has been handed and not yet settled: ListenConfig.Backlog
// (default 128), beyond which a request is rejected at once (see the
// reject table below), and it reads the event channel as
// events arrive, so the kernel's backlog (rdma_listen's, at least 128)
// only bounds events not yet read. A flood of half-open TCP connections
// against an iWARP device's port is therefore the kernel's to absorb: the
// iwarp provider's own defences (TCP_DEFER_ACCEPT, a short request
// timeout, dropping the oldest half-open connection) do not carry over.
//
// # Completions: IDs, tags and CQ sizes
//
// Package dat numbers its requests, restores their post order and flushes
// what a connection left unfinished, so the provider only maps: a
// Completion carries the ID the request was posted with and the Tag of
// the QP, which the CQ finds from the work completion's qp_num (for SRQ
// receives, the QP that consumed the receive). Two things cannot come from
// dat's ID alone and are encoded in the wr_id the device carries (see
// wrid.go): the queue, because dat picks it by the Completion's Op and a
// failed or flushed verbs completion has no opcode (Op is then OpRecv or
// OpSend), and whether the request is the provider's own (a window bind),
// whose completions never reach dat. Package dat keeps its IDs below
// driver.MaxWRID, so both fit in the top two bits.
//
// Flushed completions (IBV_WC_WR_FLUSH_ERR) are counted and dropped: what
// the device did not finish, package dat completes as flushed itself.
// Length is the device's byte_len: the message length for receives, the
// request's length on the send side as rxe and siw report it.
//
// A CQ never loses a completion: each QP attached reserves its queue
// depths (plus a window bind on the send queue of a device with windows;
// for an SRQ the SRQ's whole depth), and the ibv_cq grows with
// ibv_resize_cq when they exceed it. siw cannot resize a CQ, so there a
// CQ is a list of ibv_cqs (segments) on one completion channel: the first
// is made with the entries asked for (64 at least), and a QP whose queue
// fits in no segment gets a new one, as large as the others together.
// Poll takes from each in turn, Wait arms them all. A CQ serving one
// connection, as rdmanet's do, thus costs what that connection needs
// rather than a fixed maximum (siw's CQs used to be made with 4096
// entries, 33 pages each).
//
// # Fewer completions and copies: signalling and inline data
//
// Send-side requests are signalled as package dat asks (no sq_sig_all): a
// Send or RDMA Write posted without driver.SendSignaled, which is what dat
// makes of a SUPPRESSed DTO (rdmanet posts its ring Writes and most
// control Sends so), produces no work completion when it succeeds, so the
// device writes, and dat's waiter polls, one CQ entry for several
// requests; the completion of a later request implies their success
// (dat's wrQueue), and dat signals one request in every half queue
// itself. Such a request still completes when it fails, with its ID
// (wr_id kind wrQuiet, see wrid.go). The quiescence count (below) covers
// signalled requests only; a graceful disconnect whose newest request
// was unsignalled posts a signalled zero-length RDMA Write behind it and
// waits for that, since the send queue completes in order.
//
// Every QP asks for 256 bytes of inline data (max_inline_data, one
// rdmanet control message) and keeps what the device grants: 256 on rxe,
// whose limit is 400, and 64 on siw, which refuses more (EINVAL; the
// provider halves the request and remembers it per IA, once a smaller
// size was accepted: other parameters fail with EINVAL too). A Send or RDMA
// Write of 1 to max_inline_data bytes is posted with IBV_SEND_INLINE: the
// user-space driver copies the payload into the work request, the memory
// is the consumer's again when the post returns, and the device reads no
// registered memory for it (no key lookup, no page walk or DMA at send
// time). Since the device then checks no key either, the provider does:
// only segments inside a region of the QP's PD under their own key go
// inline (PD.covers); others are posted the ordinary way and fail there
// as before (drivertest's Protection cases). Completions are reported as
// before. The inline room costs queue memory on rxe, whose send WQE holds
// its inline data and is rounded up to a power of two: measured with
// rdmanet's queue depths (64 requests, 32 receives), the queue mappings
// a connection end adds grow from 44 KiB (32 bytes inline, what rxe
// grants when asked for none) to 76 KiB, the same for 64, 128 or 256
// bytes; siw's WQE is fixed (28 KiB, unchanged).
//
// Measured in the guest under TCG (2 shared cores; medians of 8 runs,
// before and after, interleaved, 64-byte ping-pongs and Writes over
// rxe0): rdmanet bandwidth with 64 KiB Writes 26.9 and 29.9 MiB/s
// (ib_write_bw: 40 MiB/s), with 256-byte Writes 1.24 and 1.42 MiB/s (36
// more pairs: 1.15 and 1.08; ib_write_bw: 7.5); rdmanet's half round
// trip busy-polling 41.6 and 40.0 µs, with the default adaptive wait 433
// and 379 µs (ib_send_lat: 13-15 µs); DAT Send/Receive busy-polling 30.4
// and 27.7 µs. benchstat calls none of these a difference (p from 0.13
// to 1.0): the spread from run to run (10-50%) is larger. Under TCG the
// time goes to the guest
// kernel's packet path and to wake-ups, which neither change touches
// much; on a NIC, inline saves the DMA read of each small payload, and
// selective signalling a CQ entry per suppressed request.
//
// Measuring this also found rdmanet streams of 256-byte Writes over rxe0
// stalling for good, both ends waiting on a live connection: with every
// announcement a control Send, 8 of 93 runs (rdmaperf, 20,000 Writes per
// run), 8 of 27 busy-polling. It was not the provider's. Caught in the
// act, the link's counters showed every Send received and nothing in
// flight, and rdmanet's state showed a writer asleep in the EVD although
// the peer had returned its ring space: another goroutine of the writer's
// had applied that message between the writer's look at its state and
// its turn to poll, and rdmanet's poller then slept on an empty CQ with
// nothing more to come (fixed in rdmanet's progress engine). Since, 0 of
// 60 runs stall, and 0 of 30 busy-polling.
//
// # Write with Immediate and post lists
//
// On InfiniBand and RoCE devices (not iWARP: IAAttr.WriteImm) the provider
// posts driver.OpRDMAWriteImm as IBV_WR_RDMA_WRITE_WITH_IMM, the value in
// network order on the wire, and reports a receive completed by one
// (IBV_WC_RECV_RDMA_WITH_IMM) with its value (Completion.WithImm); its
// send-side completion is reported as an RDMA Write, which is all the work
// completion says. siw refuses the opcode, so the provider refuses it
// first, with driver.ErrNotSupported.
//
// QP.PostSendList (driver.SendListPoster) chains up to eight requests
// into one ibv_post_send: one doorbell, which on rxe and siw is one
// system call, for a chunk's RDMA Writes and the control Send behind
// them. Each request is checked as PostSend checks it before any reaches
// the device; the device may still refuse one part way, and then reports
// how many it took (bad_wr), which PostSendList returns.
//
// # Queue sizes
//
// The provider asks the device for exactly what package dat configures:
// the EP's request and receive depths as the QP's send and receive
// queues (plus a send slot for window binds where there are windows and
// one for keepalive probes on IB and RoCE), and the EVD's length as its
// CQ. Devices round up: siw and rxe to a
// power of two. For an rdmanet connection (32 receives, 64 requests, an
// EVD of 112 for both queues) that is, per Conn:
//
//	              siw (queue memory, mmap'd)          rxe
//	CQ            128 entries, 2 pages                112 entries asked
//	send queue    64 WRs x 120 B, 2 pages             66 WRs asked
//	receive queue 32 WRs x 112 B, 1 page              32 WRs asked
//
// so 5 pages (20 KiB) on siw, where a fixed 4096-entry CQ and a 65-entry
// send queue (rounded to 128) took 38. rdmanet's ring and credit scheme
// bounds what is outstanding: at most 64 requests (ring Writes and
// control Sends) and 32 posted receives (its credits), so these depths
// are also all the CQ must hold.
//
// # siw and the mmap key 0x90000
//
// siw gives user space each queue (CQ, send and receive queue, SRQ) as a
// mapping of the context's command fd at an offset (the mmap key) that the
// kernel picks with rdma_user_mmap_entry_insert: the lowest free run of
// pages in the context's key space, which queues share and give back when
// destroyed. libsiw (rdma-core 44 and still upstream) compares each key
// with SIW_INVAL_UOBJ_KEY, 0x90000, a leftover of an older kernel ABI
// that is a valid key today: page 144 with 4 KiB pages. A queue that lands
// there is refused and destroyed, and ibv_create_cq, ibv_create_qp or
// ibv_create_srq fails without setting errno. The page is then free
// again, so every later queue whose first fit it is fails the same way:
// a process could hold only as many queues as fit below it.
//
// The provider therefore takes the key itself before any queue of its own
// exists on a siw context (device.go, siwkey.go): it reads the context's
// mappings from /proc/self/maps (the command fd's inode), fills the free
// pages below 143 with throwaway CQs (largest first: on a fresh context
// CQs of 129, 9 and 5 pages), makes a 2-page CQ that lands on pages 143
// and 144, and destroys the fillers. That CQ, the plug, lives as long as
// an IA uses the context. Queues then take pages 0-142 and 145 on, and
// never start at 144. If the page is held by someone else's queue when
// the first IA opens, or page 143 is and 144 is free, nothing is plugged
// (logged with RDMANET_VERBS_DEBUG); only another library's queues on the
// same context can cause that.
//
// # siw and small Sends across a page
//
// Kernel siw (6.1, and upstream as of this writing) copies the payload of
// a Send or RDMA Write of at most 32 bytes from a single SGE into the
// packet header (siw_try_1seg). When that memory crosses a page boundary
// and the copy is made by siw's transmit thread, as it is for a request
// posted while the send queue is busy, it copies the wrong lengths from
// the wrong places: bytes from past the end of the first page reach the
// peer, shifted bytes follow, and the request completes successfully.
// rdmanet's soak test (128 connections of small and large writes) saw it
// on siw0 about once a minute, as a few bytes of a small Write arriving
// wrong; TestSmallSendsAcrossPages makes it happen at once. On siw the
// provider therefore splits such an SGE at the page boundary (two SGEs,
// same key), which takes siw's other, correct path, and gives every QP
// room for two send SGEs. An inline request (siw grants 64 bytes, above)
// never takes that path either: its payload is in the work request, not
// in user pages; so the split now serves QPs without inline data. The
// same copy serves RDMA Read responses, which the peer's Reads cause and
// the provider cannot split: a Read of at most 32 bytes that crosses a
// page of this side's memory can return wrong data from a siw responder.
//
// # Local errors
//
// A verbs call that fails on this host (creating a QP, CQ, SRQ, PD or
// completion channel, registering memory, resizing a CQ) is reported as an
// error that wraps both driver.ErrResources and the call's own errno as a
// syscall.Errno, so errors.Is(err, syscall.ENOMEM) works through package
// dat and rdmanet. When a QP cannot be created during Connect, that error
// is the connection's: package dat reports it as a non-peer rejection
// event carrying it. Every C wrapper clears errno before its call, so an errno
// left over from an earlier call is never reported; a call that fails
// without setting errno (libsiw, above) is reported with ErrNoErrno.
//
// # Quiescence
//
// Disconnect and Close return, and OnDisconnect is called, only once the
// QP is quiescent: the device touches no posted memory and every
// completion it made for the QP can be polled. The QP goes to the error
// state, which makes the device flush what it had not finished, and the
// CQs are polled into a stash, which Poll returns before the device's
// queue, until every request posted to the device has completed (counted
// per queue). Drain markers posted behind the requests would not do: rxe
// and siw read a ring written from user space only when told, and flush
// only on the transition to the error state, so a marker posted after it
// never completes. The wait is bounded (2 s), for requests posted after
// the device itself moved the QP to the error state, which never
// complete (measured under TCG: a close drains in well under a
// millisecond on both devices otherwise). Then the QP is destroyed, with
// the CQs locked and polled before and after (some devices drop a
// destroyed QP's entries from its CQ, and its number may be reused at
// once), after which the device produces nothing more for it. Receives
// posted before the QP existed, and posts after the connection ended,
// never reach the device: they are dropped, for dat to flush. The rdma_cm
// id is destroyed in the background afterwards (below); IA.Close waits
// for that.
//
// A failed request (not a flush) on an established connection means the
// device moved the QP to the error state: the connection is reported
// broken (OnDisconnect(err), from a goroutine of the provider, never from
// inside Poll) and rdma_disconnect tells the peer. The peer's disconnect
// (DISCONNECTED) is reported as OnDisconnect(nil), or as broken if the
// QP is found in the error state then, or if an error was seen first (an
// async QP event or a failed completion whose report had not run yet).
// rxe raises no async event when it refuses a peer's access or gets the
// NAK for one; it only moves both QPs to the error state. Since nobody
// polls a CQ unless a consumer waits on it, an IA on rxe checks the state
// of its connected QPs every 100 ms and reports one found in the error
// state as broken (watch.go).
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
// the reply or siw's 10 s MPA timeout, so ids are destroyed in the
// background once their QP is quiescent; IA.Close waits for them.
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
// (IBV_DEVICE_MEM_WINDOW and max_mw > 0: rxe yes, siw no). Only then do
// the IA's PDs implement driver.WindowAllocator and its QPs
// driver.WindowBinder, so package dat learns it by type assertion; every
// region is then registered with IBV_ACCESS_MW_BIND. AllocWindow is
// ibv_alloc_mw, Window.Close ibv_dealloc_mw (the key dies at once, no QP
// needed), and BindWindow posts ibv_bind_mw to the connection's send
// queue (a zero-length bind unbinds), one at a time per QP, in a send
// queue slot kept for it, and polls the send CQ (into its stash) for the
// bind's completion, bounded by bindTimeout. A bind the device refuses
// (IBV_WC_MW_BIND_ERR) breaks the connection like any failed request;
// after a failed, flushed or timed-out bind the window's state is
// unknown, so it is deallocated and replaced by a fresh, unbound one.
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
// driver.ErrNotSupported. A remote access error breaks the connection at
// the target (siw: a QP access error event; rxe: the QP found in the
// error state). At an iWARP initiator kernel siw completes the RDMA Write
// successfully and reports the target's TERMINATE as a plain DISCONNECTED
// with no QP event, so that side sees DISCONNECTED rather than BROKEN.
// Verbs work completions do not say whether a Send carried the solicited
// event bit, so every successful receive reports Solicited: a
// SOLICITED_WAIT EVD in package dat is woken by every receive rather than
// missing a solicited one.
package verbs
