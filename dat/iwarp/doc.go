// Package iwarp is rdmanet's pure-Go iWARP provider: MPA/DDP/RDMAP over a
// plain TCP connection, wire-compatible with Linux soft-iWARP (siw) and
// iWARP NICs. It implements the provider contract of package dat/driver,
// with its optional shared receive queues and memory windows, and
// registers Driver as the "iwarp" provider when it is imported.
//
// It covers connection management (IA/PD/MR/SRQ/QP objects, listening,
// the MPA Request/Reply exchange of RFC 5044 §7.1 and RFC 6581, teardown)
// and the data path: Send, Send with Solicited Event, RDMA Write and RDMA
// Read as MPA FPDUs carrying DDP segments (RFC 5044 §4, RFC 5041, RFC
// 5040), with siw's Terminate behaviour.
//
// # Open arguments
//
// Driver.Open takes the registry parameters of an IA. The first argument,
// if it contains no '=', is the local address of the IA: an IP literal or a
// network interface name (its first IPv4 address, else its first IPv6
// one). Empty, "*", "0.0.0.0" or "::" mean unspecified: listen on every
// address and dial from whatever address the kernel picks. All other
// arguments are key=value options:
//
//	crc=0|1              1: as initiator, set C in the MPA Request and
//	                     refuse a Reply without C; as responder, force C
//	                     in every Reply (siw's mpa_crc_required). Default 0:
//	                     the initiator does not ask, the responder echoes
//	                     the Request's C (siw's default).
//	mpa_rev=1|2          MPA revision the initiator sends (default 2, which
//	                     siw requires). 1 sends no IRD/ORD block.
//	backlog=N            listener backlog used when ListenConfig.Backlog is
//	                     0 (default 4096).
//	max_handshakes=N     TCP connections per listener in admission, their
//	                     MPA Request not read yet (default 16384); a new
//	                     one beyond that resets the oldest (see Admission).
//	req_timeout=DUR      how long a responder waits for the MPA Request
//	                     after it took the TCP connection (default 1s; siw
//	                     waits 5s).
//	fallback_wait=DUR    with ListenConfig.Fallback, how long a silent new
//	                     connection waits before it goes to Fallback
//	                     (default 200ms; at most req_timeout).
//	rep_timeout=DUR      how long an initiator waits for the MPA Reply
//	                     (default 10s, siw's MPAREQ_TIMEOUT); expiry is
//	                     reported as driver.ErrUnreachable.
//	close_timeout=DUR    how long a graceful Disconnect waits for the peer's
//	                     FIN after sending its own (default 2s).
//	srq_pz_diff=0|1      whether an EP may use a PD other than its SRQ's
//	                     (IAAttr.SRQPDDifference, default 1).
//	mulpdu=N|auto        largest ULPDU (DDP segment, headers included) of
//	                     the FPDUs this side sends, 64..65535. Default auto:
//	                     the connection's TCP MSS rounded down to 8, minus
//	                     the 6 bytes of length field and CRC, so an FPDU
//	                     fills at most one TCP segment, as siw sizes them
//	                     and RFC 5044 wants for hardware receivers: 65474
//	                     on loopback (MTU 64 KiB), 1442 on 1500-byte
//	                     Ethernet. Receivers accept any FPDU size.
//
// DUR is a time.ParseDuration string. Unknown keys are an error.
//
// # Private data
//
// IAAttr.MaxPrivateData is 252: siw counts the 4-byte MPA v2 IRD/ORD block
// inside its 256-byte MPA_MAX_PRIVDATA, refuses frames whose PD_Length
// exceeds 256 and limits accept data to 252. Consumer data above 252 would
// make a siw peer drop the connection, so this provider refuses it on
// connect, accept and reject, and treats an incoming frame carrying more
// than 252 consumer bytes (or a PD_Length above 256) as a protocol error.
//
// # Socket options and keepalive
//
// QP implements driver.OptionsConnector, and its ConnectWith hands the
// options to the initiator's TCP socket as a net.Dialer would: it is
// bound to ConnectOptions.LocalAddr (port included), Control runs on it
// before it connects, and KeepAlive and KeepAliveConfig become its TCP
// keepalive, with package net's defaults (probes after 15 s of silence,
// every 15 s, 9 of them). A listener does the same with the Control,
// KeepAlive and KeepAliveConfig of its ListenConfig, for the listening
// socket and the connections it accepts (keepalive once admission hands
// a connection on, to the consumer or to Fallback: a connection in
// admission does not live long enough to need it, and setting it on
// every connection a flood opens cost four system calls each). On Linux
// an MPA connection with keepalive also gets TCP_USER_TIMEOUT of Idle +
// Interval × Count: TCP sends no keepalive while data is unacknowledged,
// so without it a writer whose peer vanished mid-transfer would wait
// for the system's retransmission limit (about 15 minutes). A
// connection ended by either reports OnDisconnect with the socket's
// error, which wraps syscall.ETIMEDOUT (or EHOSTUNREACH, when the peer
// was on the same link and stopped answering neighbour discovery too).
//
// On Linux the initiator's socket writes the MPA Request as soon as
// connect(2) has started the connection (from the dialer's Control hook,
// after the consumer's), not after package net has waited for the poller
// to report the connect: on loopback the handshake is over when connect
// returns, and that wait cost a wake-up of another thread per dial. A
// connect still in progress gets the Request once it is up, as before.
// A fixed local port, an IPv6 zone or a local address of the other
// family keep the plain dial.
//
// An attempt from a fixed local port that fails is reset rather than
// closed, so that the port is free at once (no TIME_WAIT) for another
// attempt or a plain TCP fallback.
//
// # Outcomes of Connect
//
//	MPA Reply with R=1                  *driver.RejectError (peer reject)
//	reset before any byte of the Reply
//	(a full listener refuses so), or
//	nobody listening                    wraps syscall.ECONNREFUSED (non-peer)
//	bytes that are not an MPA Reply     wraps driver.ErrNotRDMAPeer (non-peer),
//	                                    at the first wrong byte
//	closed before the Reply, malformed
//	Reply, M=1, rev/E mismatch, CRC
//	refused, IRD too small              plain error (non-peer reject)
//	EHOSTUNREACH, ENETUNREACH,
//	ETIMEDOUT, no Reply in rep_timeout  wraps driver.ErrUnreachable
//	ctx deadline                        wraps context.DeadlineExceeded
//	ctx cancelled                       wraps context.Canceled
//	local Disconnect/Close meanwhile    wraps ErrAborted
//
// A Connect to a plain TCP server thus fails as soon as the server says
// anything (a banner, an error page), with ErrNotRDMAPeer, and the
// initiator resets its TCP connection at once. A server that waits for
// its client to say more stays silent, and rep_timeout (or the caller's
// deadline, which a consumer that wants to fall back to TCP quickly
// should set) ends the attempt: an HTTP/1 server, for one, reads the MPA
// Request as the start of a request line and answers only at a line end,
// so an MPA Request whose private data holds "\r\n" draws its "400 Bad
// Request" at once.
//
// # Admission
//
// The listener must serve real initiators while anything else hits its
// port: silent TCP connections, garbage, floods of both, kept up by a
// peer that reopens every connection the listener drops. Its rules:
//
//   - The accept loop never waits for a peer: it takes every connection
//     off the kernel's accept queue at once (that queue is
//     net.core.somaxconn deep, 4096 on current Linux: Go passes it to
//     listen(2)).
//   - It looks at what has already arrived, without waiting (a peek). A
//     whole MPA Request, which a real initiator sends with its first
//     segment, skips the table below, so no flood can push it out: the
//     accept loop reads and checks it itself, since that cannot wait for
//     the peer, and queues it for the consumer (a goroutine started for
//     it cost a tenth of a loopback connection's setup). Bytes no Request
//     starts with are reset at once (or go to Fallback).
//   - Anything else enters admission, a table of at most max_handshakes
//     (16384) connections, with a goroutine each that reads the first
//     bytes. A connection that has not sent its whole Request within
//     req_timeout (1s) is reset, as is one whose bytes stop matching the
//     Request key ("MPA ID Req Frame") at the first byte that differs, or
//     whose Request is malformed. When the table is full, a new connection
//     resets the oldest in the table, never itself: silent peers cannot
//     keep a real initiator out, however many they open and however
//     often they reopen, and the table's cost stays bounded (a goroutine,
//     a timer and a socket each, about 7 KB, only while a flood lasts).
//     If the process runs out of file descriptors (EMFILE) before the
//     table is full, the oldest connection in admission is reset to free
//     one, for the same reason. A connection whose whole Request has
//     arrived since, not yet read by its goroutine, is passed over (it
//     leaves the table and is admitted): a real initiator whose
//     connection the listener took before its Request is not pushed out
//     once the Request is there.
//   - At most backlog (4096) valid Requests wait for the consumer's
//     decision. While that many do, a new connection is reset before
//     anything is read from it (with Fallback: once its Request is read),
//     so the initiator sees a refused connection: this provider reports
//     syscall.ECONNREFUSED, like a port nobody listens on.
//   - Every drop is a reset (SO_LINGER 0): no TIME_WAIT is left behind.
//     The resets are made by one goroutine of the listener, which lets
//     the others run every few resets (with 1024 waiting, whoever drops
//     a connection resets it itself). On loopback a reset includes the
//     kernel's delivery of the RST to the peer, the larger part of what
//     a drop costs: under a flood it kept the accept loop from the next
//     connection, and when many silent connections' req_timeout expired
//     together their goroutines kept the consumer's waiting.
//
// Measured on loopback on two shared cores, the flood coming from another
// process (BenchmarkAdmissionFlood, 300 dials a run, 18 runs of each case
// in three sessions; figures vary from run to run on a shared machine):
// 1000 concurrent dials at a listener on defaults all connect, none
// refused. Legitimate dials take p50 0.14-0.20 ms / p99 0.26-1.1 ms
// (median 0.34 ms) with no flood; p50 0.21-0.34 ms / p99 1.3-4.9 ms
// (median 2.1 ms) under 1000 silent connections (reopened when dropped)
// and 32 garbage senders; p50 0.16-0.42 ms / p99 2.5-7.0 ms (median
// 3.3 ms) under 10,000 silent connections reopened the moment they are
// dropped (about 20,000 drops a second) and 64 garbage senders (before
// the resets moved to a goroutine of their own and keepalive to the
// hand-over, the same runs gave p99 1.2-57 ms, median 9.3 ms). Every
// dial connects. What is left of the tail is waiting: in the kernel's
// accept queue behind flood connections, and for a processor in the
// listener's process, which the benchmark's initiators share (to run
// after their connect and after the Reply arrives). The size of the
// table matters: with max_handshakes=1024 the same 10,000 churn through
// it (about 28,000 evictions a second) and dials take p50 0.6-2.1 ms,
// p99 42-68 ms (when the accept loop made the resets, it fell behind and
// the kernel's accept queue stayed full: p50 36-99 ms, p99 0.19-1.15 s).
//
// # Plain TCP on the same port
//
// With ListenConfig.Fallback set, a connection that is not an MPA
// initiator is handed to Fallback instead of being reset, with every byte
// it sent (the ones admission read are replayed first by the net.Conn
// Fallback gets). Admission decides at the first byte that differs from
// the Request key; a client that sends nothing within fallback_wait
// (200ms), only a part of the key within req_timeout, or half-closes
// before the whole key is a TCP client too (a protocol whose server
// speaks first waits fallback_wait for its greeting). Once the whole key
// has arrived the connection is MPA's, and a bad Request after it is
// reset. Admission's limits apply to TCP clients as well while they are
// being classified (an evicted one is reset, not handed on); after that
// they are Fallback's. Fallback is called from a goroutine of the
// listener and should hand the connection off: Close waits for calls in
// progress.
//
// # Startup rule
//
// RFC 5044 §7.1.2: the responder must not send an FPDU before it received
// the initiator's first FPDU, and siw fails a connection whose
// Request/Reply is followed by trailing bytes. The QP therefore records its
// role (ConnInfo.Initiator): the initiator's consumer must transmit first
// (a hello Send; a peer-to-peer initiator sends its RTR frame, which the
// responder accepts as a zero-length Write or Read when ConnInfo.RTR says
// so), and the responder holds everything it has to send, queued in post
// order, until its receiver has taken in the initiator's first complete
// FPDU. A Terminate is the only exception.
//
// # Data path
//
// An established connection costs one goroutine when idle: its receive
// goroutine. The socket's write side has one owner at a time, the holder
// of a writer token. A small request (up to 2 KiB) posted while nothing
// is queued and nobody writes is framed by PostSend itself and written
// with one non-blocking writev: a request/response protocol pays no
// hand-off between goroutines. Everything else (larger requests, what the
// socket did not take at once, Read Responses, Reads and fenced requests
// that had to wait, a graceful drain) is written by a sender goroutine
// that exists only while such work is queued and exits when it runs out.
// It batches whatever is queued into one writev: net.Buffers{header,
// payload pieces..., trailer, header, ...} whose payload entries are the
// registered memory itself, with the CRC-32C computed over the pieces in
// place when CRC was negotiated; for a stream of messages this beats a
// writev per message in the poster's goroutine. A message longer than
// the MULPDU allows is cut into DDP segments whose FPDUs follow each
// other back to back (non-last ones carry a multiple of 8 payload bytes
// and need no pad); segments of two messages never interleave. PostSend
// never waits for the network. Sends use untagged queue 0 and Read
// Requests queue 1, each with MSNs from 1; Read Responses are queued by
// the receiver and sent ahead of new work, in request order. Steady-state
// posting, sending, receiving and completing allocate nothing.
//
// The receive goroutine reads each FPDU's length, control word and header
// through a 4 KiB read-ahead buffer, validates it completely, and then
// reads the payload from the socket straight into the registered memory
// it is destined for (readv: the rest of the payload and, in the same
// call, the read-ahead for what follows). Only bytes the read-ahead
// already held are copied.
//
// Outstanding RDMA Reads are limited to the negotiated ORD (later ones,
// and everything posted after them, wait in post order), and a request
// with SendFence starts only when every earlier Read has completed.
//
// # Completions
//
// Completions are pulled: each finished work request is appended to the
// CQ its QP was created with (CQ, a growable ring that never loses one),
// directly by the goroutine that finished it (whoever reads the socket
// for receives and Reads, see below; the sender goroutine or the posting
// goroutine for Sends and Writes), and the consumer's goroutine takes it
// with Poll and sleeps in Wait. Nothing calls back into the consumer on
// the data path. The IA advises a spin before Wait (IAAttr.Spin, 100 µs
// where goroutines run on more than one processor): between its polls,
// a spinning waiter reads its connection's socket itself without waiting
// (CQ.Progress, driver.CQProgresser), so that while the peer answers
// within the spin neither end sleeps.
//
// A Send or RDMA Write completes when its last byte has been handed to TCP,
// as siw does (TCP then delivers it or the connection fails); an RDMA Read
// when its whole Response has been placed; a receive when the last segment
// of its Send arrived intact (Length is the message length, Solicited is
// set for Send with SE). So a Send or Write posted behind a Read
// completes before it: requests of one queue may complete out of post
// order, and package dat, which numbers the posts, restores the order.
// Sends and Writes complete in post order among themselves, and so do
// Reads; no request completes before those posted ahead of it that do
// not wait for a Response. A successful Send or Write posted without
// SendSignaled produces no completion (a later completion of the QP
// implies it, and its send-queue slot is free by then). Errors: a
// receive too small for its Send completes with StatusLocalLength, one
// naming memory the QP may not write with StatusLocalProtection; a Read
// whose Response does not match it with StatusBadResponse.
//
// When a connection ends (Disconnect, Close, the peer, a failure) the
// provider drops every request it did not finish without completing it:
// package dat flushes them, after it has polled every completion the
// provider did produce. For that, Disconnect and Close return only once
// the connection is quiescent (no goroutine of it writes into registered
// memory or produces a completion any more, and every completion it
// produced is in its CQ), and OnDisconnect, called at most once, only for
// a connection that ended without a local Disconnect or Close, comes
// after that point, from the receive goroutine, never from a post or a
// Poll. Requests posted after the end are accepted and dropped the same
// way. A receive an SRQ lent to a connection that ended inside its Send
// goes back to the SRQ. A QP holds at most its MaxRecvWR of its SRQ's
// receives whose events the consumer has not dequeued
// (IAAttr.SRQQPLimit): a Send beyond that is refused as if no receive
// were posted, which ends that connection only, so a peer cannot empty
// an SRQ that other connections share. A graceful Disconnect first lets the send side
// finish (Sends and Writes handed to TCP, Reads answered and the peer's
// Read Requests served, bounded by close_timeout), then sends FIN.
//
// # Receiving in the waiter's goroutine
//
// A goroutine that waits on a CQ which one connection's receives
// complete on does not sleep until the receive goroutine hands it a
// completion: it takes over the connection's receive role and reads the
// socket itself, parked in the network poller as a TCP reader is, runs
// the receiver on the FPDUs as they arrive (see below), and returns with the
// completion it queued. A receive then costs what a TCP read costs, one
// wake-up by the network poller, instead of that wake-up for the receive
// goroutine plus a hand-off to the waiter. The receive goroutine reads
// whenever no waiter does: a waiter that leaves parks the role, and a
// role parked for about a millisecond goes back to it (at once on a
// local close), so RDMA Writes are placed, Read Requests answered and
// the peer's Terminate or close seen with nobody waiting, only that much
// later at most. A waiter whose deadline passes mid-FPDU leaves the bytes
// it read in the connection's read-ahead for the next reader. A Write,
// Send or Read Response segment larger than the 4 KiB read-ahead a
// waiter places as its bytes come, straight from the socket into
// registered memory (one readv per look, which also brings the start of
// the next FPDU into the read-ahead), and it may leave one half placed:
// the receiver keeps the segment's place, and the next holder of the
// role, a waiter or the receive goroutine, carries on from there. What
// a waiter does not run goes back to the receive goroutine, which reads
// it as before: a long run of large FPDUs with no small
// one in between (a bulk RDMA Write stream nobody waits on, which the
// receive goroutine reads with fewer system calls; waiters then leave
// the role alone while it lasts), a protocol error, the end of the
// stream. A CQ shared by several connections is waited on as before.
// A connection whose CQ is its own starts with the role parked and no
// receive goroutine, which is started the first time the role goes to it
// (the sweeper's, a waiter handing it back, a local close, a Send the
// startup rule holds back): a connection waited on as soon as it is up
// reaches its first byte with no goroutine started and no hand-off.
// A completion another goroutine queues while a waiter reads the socket
// (a Send finished by the sender goroutine, an Interrupt) cuts the
// waiter's read short with a past read deadline, which costs one small
// allocation (the net package's error for the cut read).
//
// A waiter that spins before it sleeps (package dat's PollAdaptive, with
// the spin the IA advises, or PollBusy) takes the role between its polls
// too (CQ.Progress): it reads what the socket has without waiting, runs
// the FPDUs that arrived (whole, or for a Write as far as it has come)
// and parks the role again. While the peer
// answers within the spin, neither end sleeps: a small message is one
// write, which wakes nobody, and one read, where a sleeping waiter costs
// the write a wake-up of the peer's thread and the reader a trip through
// the network poller. Measured in one process on two cores (medians of
// 10 interleaved runs): a 64-byte round trip of 11.6 µs on package dat
// and 12.6 µs through rdmanet, against 17.2 µs and 18.9 µs sleeping at
// once and 13.8 µs over TCP, for both cores busy instead of one (24 µs
// and 27 µs of CPU per round trip instead of 19 µs and 21 µs); between
// two processes a half round trip of 5.7 µs and 6.5 µs (p50) where TCP
// takes 11.6 µs. The spin must outlast a peer
// that has to be woken first (tens of microseconds here); a shorter one
// misses, both ends fall back to sleeping, and the round trip is as slow
// as without it.
//
// Measured on loopback on two shared cores, in one process against the
// code before (medians of 5, interleaved): a 64-byte round trip on package
// dat (BenchmarkDATPingPong in rdmanet) 17.8 µs instead of 23.5 µs, and
// through rdmanet (BenchmarkPingPong) 19.2 µs instead of 23.5 µs, where
// TCP takes 13.7 µs; streams of 4 KiB to 1 MiB writes
// (BenchmarkThroughput) run as fast as before within the noise. Between
// two processes (scripts/bench-loopback.sh, half round trips, medians of
// 5): 64 bytes p50 18.2 µs through rdmanet and 17.3 µs on dat, against
// 20.9 µs and 21.2 µs before and 10.2 µs over TCP; the minimum 10.2 µs
// instead of 11.6 µs (TCP 8.2 µs); bandwidth as before. What remains is
// mostly system calls (a CPU profile of the dat round trip: 62% in the
// sending writev, which on loopback delivers to the peer's socket, 18%
// in reads, 9% in epoll_wait), and the layers above the CQ. A timer
// per parked role, reset by each waiter that left, cost more than the
// hand-off saved (31 µs per round trip): resetting a timer that fires
// before the network poller's next wake-up interrupts the poller. So one
// goroutine per IA, running only while roles are parked, gives back the
// roles it finds parked on two looks a millisecond apart.
//
// # Protocol errors and Terminate
//
// Every inbound FPDU is checked before any payload byte is read: length
// (at least the opcode's header; a Read Request exactly 46), DDP and RDMAP
// versions, opcode (0-7; Send with Invalidate is refused: remote
// invalidation is not supported), queue number, MSN and MO per untagged
// queue, that a receive is posted and large enough, and for tagged
// placement that the STag exists with the right key, belongs to the QP's
// PD, grants REMOTE_WRITE (Write) and that [TO, TO+len) lies inside the
// region; a Read Response must match the oldest outstanding Read (sink
// STag, TO, exact length), an inbound Read Request must fit the IRD and
// name a REMOTE_READ region of the QP's PD within bounds. A violation
// sends one Terminate with siw's layer/type/code and attachment (control
// word in RFC 5040 layout; MSN 1, MO 0, QN 2), fails the connection and
// reports OnDisconnect with a *TerminateError; a received Terminate ends
// the connection the same way (TerminateError.Remote), unanswered. The
// codes: unknown STag, wrong key or missing REMOTE_WRITE DDP/tagged/0, out
// of bounds 1, another PD 2, TO wrap 3, bad DDP version 4 (untagged 6);
// no receive or receive too small DDP/untagged/2, bad QN 1, MSN 3, MO 4;
// Read Request source errors RDMAP/remote protection/0-4, IRD exceeded
// RDMAP/remote operation/7, bad RDMAP version 5, opcode 6; CRC mismatch
// LLP/MPA/2, ULPDU_Length below the minimum 3, stream cut inside an FPDU
// or message 1; a Read Response nobody asked for or interleaved tagged
// messages DDP catastrophic.
//
// # Memory safety
//
// Payload is only ever read into a slice of a registered region cut to
// the validated window ([TO, TO+len) of the region for tagged segments,
// the posted receive's segments for Sends), so no byte lands outside it,
// whatever the peer sends; the hostile-peer and fuzz tests check guard
// bytes around every region. With CRC on, payload is placed before the
// trailer is checked (as siw does): a corrupted FPDU may have written
// bytes inside a window its header legitimately named, but its message
// never completes and the connection fails. Regions stay referenced while
// a request uses them; a Read's sink is re-checked when its Response
// starts to arrive.
package iwarp
