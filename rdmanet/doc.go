// Package rdmanet gives Go programs RDMA connections through the
// interfaces they already use: a program that dials and listens with
// package net switches by changing only those calls.
//
//	l, err := rdmanet.Listen("rdma", "127.0.0.1:7000")   // net.Listener
//	c, err := rdmanet.Dial("rdma", "127.0.0.1:7000")     // net.Conn
//
// Networks are "rdma", "rdma4" and "rdma6"; addresses are "host:port",
// the port being the DAT connection qualifier (on iWARP, the TCP port
// underneath). Dialer and ListenConfig hold the options (the IA to use,
// buffer sizes, timeouts, SO_REUSEPORT sharing, TCP fallback); Conn adds
// CloseRead, CloseWrite, Dup and Stats to net.Conn. Errors are
// *net.OpError with Net "rdma"; Read and Write timeouts are
// os.ErrDeadlineExceeded, as with TCP, and a dial that runs out of time
// fails with an error matching both that and context.DeadlineExceeded.
//
// Underneath is package dat, the DAT/uDAPL consumer API, and by default
// its pure-Go iWARP provider, so everything runs on any machine with TCP.
// Each IA name is opened once per process and shared.
//
// # Protocol
//
// Handshake: the dialer's connect private data and the server's accept
// private data each carry a Hello (internal/handshake: magic, version,
// the sender's receive ring address, key and size, and its initial
// control credits; 24 bytes, within the 56 an InfiniBand REQ allows). A
// server rejects a Hello it cannot use with a payload naming the reason;
// the dialer's error says why (HandshakeError).
//
// Data: each side exposes a receive ring, page-aligned registered memory
// the peer may RDMA-write. Write copies into a registered staging buffer
// and RDMA-writes into the peer's ring at prod mod size (split at the
// wrap), then posts a small control Send carrying the new producer
// position; RC ordering puts the data in place before the Send arrives.
// Large Writes on the iwarp provider skip the staging copy and are
// RDMA-written from the caller's buffer itself (conn_direct.go). Rings and
// staging buffers start at DefaultBufferSize and grow, up to
// MaxBufferSize, while the round trip limits a stream; idle connections
// shrink back (resize.go: the reader offers a new ring in a control
// message, the writer switches to it at a stream position it announces).
// Writes of at most 232 bytes that can go at once travel inside the
// control message instead. Where both ends' transports have RDMA Write
// with Immediate (InfiniBand, RoCE, rxe; not iWARP) and both Hellos say
// so, a chunk's last RDMA Write carries its announcement as 32 bits of
// immediate data (how far prod moved, and a credit grant), and no Send
// follows it: one work request and one completion per chunk instead of
// two. It still consumes a control receive and a credit, and the
// receiver checks it by the rules of a control message; anything it
// cannot say (consumption, FIN, ring offers) goes by Send (imm.go;
// Dialer.NoWriteImm turns it off). A chunk's Writes and the Send that may
// follow them reach the provider in one call (dat.EP.PostSendList; on
// verbs one ibv_post_send). Read copies out of the ring and returns credit
// (its consumer position) in batches of a quarter ring, or sooner when the
// writer is blocked on a full ring. Positions are cumulative byte counts
// (internal/ring). The control channel has its own credits (see credits.go
// for the rule and why it cannot deadlock): iWARP has no
// receiver-not-ready retry, so a Send without a posted receive would kill
// the connection.
//
// Completions: a Conn has no goroutine of its own. Whoever waits on it
// (a blocked Read or Write, Close, the dial or the listener during the
// handshake) polls its EVD and applies control messages, send completions
// and connection events; see progress.go.
//
// Closing: Close sends a FIN after the last data, lets sends drain and
// disconnects gracefully; the peer reads everything, then io.EOF. A peer
// that disappears without a FIN gives a reset error (syscall.ECONNRESET)
// after the data already received.
//
// # Shared control receives
//
// On iwarp, the control messages of every connection of an IA land in
// one shared receive queue (an SRQ, dat.IA.CreateSRQ) rather than in
// receives each connection posts on its own QP. Each connection reserves
// K+1 slots of it (K, the credits it grants, plus the one it is applying)
// and gives them back when it ends; the SRQ is refilled one slot at a
// time as messages are applied, and another is opened when one is fully
// reserved. Credits are unchanged, so they cannot deadlock, and the
// reservation means a message sent within its credits always finds a
// receive, whatever other peers do: the provider ends a connection whose
// peer sends beyond what its K receives can hold instead of letting it
// take the others' (dat.ProviderAttr.SRQEPLimit). The argument is in
// ctrlpool.go, with TestSharedReceivesModel. A provider without that
// limit (verbs: an RDMA adapter takes SRQ receives for any QP) keeps a
// receive queue per connection.
//
// # Two processes
//
// Between two processes on one host (loopback iWARP, two shared cores,
// scripts/bench-loopback.sh, medians of 10 interleaved runs), large
// streams ran at 0.82× TCP with 1 MiB Writes (3405 against 4159 MiB/s)
// and 1.03× with 64 KiB ones (3018 against 2941, within the noise), and
// 2.33× with 4 KiB ones, where TCP had a slow run (568 MiB/s; it moved
// about 1100 in others); the run-to-run spread on that shared machine
// was 20-40%. The stream is a loop: the writer's socket write (by the
// provider's sender goroutine, woken for it), the reader placing the
// ring data and the control message after it, its copy and its credit
// report, whose write costs about 20 µs on loopback (the kernel delivers
// it and wakes the writer's thread within that system call), and the
// writer woken for the report. The reader places the data itself: it
// holds the provider's receive role while it waits and places each
// 64 KiB FPDU's payload as its bytes arrive, straight from the socket
// into the ring (see "Receiving in the waiter's goroutine" in
// dat/iwarp); when the provider's receive goroutine placed it and woke
// the reader for each chunk, that wake-up, on the other processor, was
// the larger part of the stream's CPU time (with both processes at
// GOMAXPROCS=1, so that no wake-up crossed processors, the same code had
// moved 1.57× as much). A writer blocked by flow control sleeps at once
// instead of spinning (see progress.go). The reader had first placed an
// FPDU only once all of it had arrived, asking the socket (SIOCINQ) on
// each look and reading the FPDU's start through a 4 KiB read-ahead
// first; placing the bytes as they come gave, in the same runs as the
// figures above, 3405 against 3040 MiB/s at 1 MiB (p=0.023), 3018
// against 2812 at 64 KiB (within the noise), 1321 against 1009 at 4 KiB
// (p<0.001), and 0.52 against 0.58 CPU-seconds per GB at 1 MiB. Now the
// reading process is the busy one (a CPU profile with 1 MiB Writes: its
// socket reads, which copy into the ring, 52%, the copy out of the ring
// 17%, the credit reports' writes 3%, its spinning waits most of the
// rest), while the writing process waits for credit most of the time;
// so the writer's hand-off of each large chunk to the provider's sender
// goroutine, which earlier profiles blamed, no longer limits the loop.
// What is left against TCP is the copy out of the ring, which a TCP
// reader does not make. What did not help: rings of 2 to 16 MiB (no
// faster; 4 and 16 MiB rings were 27-33% slower at 1 MiB in one run of
// four rounds, and a 4 MiB ring cost 22% more CPU per GB at 64 KiB: its
// data no longer stays in the caches), the provider writing large chunks
// in the poster's goroutine (+52% at 1 MiB in one run of ten rounds,
// nothing in the next, and 64 KiB Writes 23% slower), the provider
// writing every request, small ones too, in its sender goroutine, so
// that the reader's credit reports would cost the reading process less
// (a fifth slower at 64 KiB and 1 MiB in one run of five rounds), a
// 256 KiB read-ahead for bulk streams (fewer reads, but its copy cost
// more than they did), reservations of a quarter to a sixteenth of the
// ring, credit batches of half to an eighth of it, and a Read returning
// credit as it copies.
//
// Nor did zero-copy Reads (prototyped and dropped): a large
// Read that found the ring empty registered its buffer and advertised it
// in a control message, and a writer inside a Write RDMA-wrote the next
// stream bytes into it, saying where it started and stopped. A writer
// allowed to take an advert only at the reader's position (so that
// ring bytes past it prove the advert was not taken) almost never could:
// on a bulk stream bytes are always in flight past what the reader has
// been told, and 228 of 236 adverts were declined. Taking it from the
// writer's own position (the reader copies the ring bytes before it)
// filled 98% of the stream in place and took the copy out of the
// reading process's profile (runtime.memmove 17.6% to 1%), but the
// stream went no faster: 3203 against 3578 MiB/s at 1 MiB (p=0.065,
// six interleaved rounds), CPU per GB unchanged, 64 KiB unchanged. Each
// advert is a rendezvous: the reader waits for the writer to see it,
// and if it leaves the credit for the next advert to carry, the writer
// waits for that, so the reader no longer bottlenecks the stream but
// the round trip does; returning the credit at once measured no better.
// It also cannot be made safe without the writer's answer: a Read may
// not return while the writer may still write into its buffer, and a
// writer that was not polling when the advert arrived (its last Write
// done) answers only when its application next calls in, which hung the
// prototype's own test; a revoke on a Read deadline would then have to
// break an idle connection.
//
// # Connection setup
//
// A dial makes its connection in its own goroutine (dat's
// EP.ConnectContext): the TCP connect, the MPA Request and Reply with the
// Hellos they carry, with no hand-off to another goroutine on the way. The
// first control message, which the iWARP initiator owes the server before
// the server may send, is held for the application's first call: its
// first Write carries it along with its data, and a Read, a Close or, for
// a client that does not call in, a timer after a millisecond sends it on
// its own (see firstmsg.go). A listener answers a request in its serve
// goroutine, from the client's Hello to the connection queued for Accept,
// when no other request waits behind it and the provider's accept does
// not wait for the peer (iwarp; with verbs a goroutine of its own waits
// for rdma_cm's RTU, so that a silent client holds no answering slot);
// the iwarp provider hands the request to dat, and dat to that goroutine,
// as it arrives, and starts a connection without its receive goroutine
// when its first waiter comes at once (see the iwarp package). A
// connection's memory (its initial ring, staging buffer and control
// slots, one mapping) comes from its IA, which keeps up to 1 MiB of
// closed connections' memory for the next ones: they neither map nor
// fault in pages, and the control slots stay registered. The ring is
// registered afresh each time, so that a former peer's key never reaches
// another connection's ring.
//
// Each goroutine started or woken on the way costs more than the work it
// does: with an idle processor, Go's scheduler wakes another thread to
// run it, and on two shared virtual cores that wake-up, and the core it
// takes from the one doing the work, is what a dial mostly waits for
// (the same dial and echo take 1.5-2.1× TCP's time with GOMAXPROCS=1).
// So does a waiter that spins: a spin takes a processor, and yields it
// only to wake another thread, while the peer's answer needs one for
// its own set-up work (accepting the connection, the goroutines that
// serve it). Traced, every new connection's first waits (the server's
// for the first byte and then for the FIN, the dialer's for the echo,
// both closes) spun their 100 µs and ran out, and the answer came just
// after each spin ended; the listener spun too, waiting for the next
// request. So waiters on a new connection sleep at once until its
// exchanges show a spin could pay (see dat.PollAdaptive), a closing Conn
// sleeps (unless its Poll is dat.PollBusy), and so does a listener
// waiting for connection requests.
// Measured on loopback on two shared cores, with other load on them
// (BenchmarkDial, a dial and one byte echoed, medians of 8 runs
// interleaved with TCP's and with the previous version's): 280 µs where
// TCP takes 115 µs (2.4×, 2.1-2.9× run by run; the previous version
// 390 µs, 3.2-4.7×, in the same runs; it was 410 µs, 4.5×, before dials
// ran in one goroutine). What remains beyond TCP's time is wake-ups and
// system calls rather than work: a TCP dial plus echo is a connect and
// one round trip, an iWARP one a connect and two (the MPA exchange, then
// the byte's), each of them wake-ups of goroutines on both ends, and the
// listener hands a request from its accept loop to its serve goroutine
// and the connection from there to Accept (TCP: one hand-off). In a
// trace, the MPA Request's and Reply's writes took 10-20 µs each (the kernel creates
// the server's socket, as the connect does for TCP, since the listener
// defers accepting until data arrives, and wakes the peer's thread), the
// listener's answer from the request to its Reply ~15 µs, and the
// dialer's from the Reply to its first Write ~20 µs; in the CPU profile
// the scheduler's wake-ups and idling (futex, findRunnable, wakep) take
// about a quarter of the process's time, system calls most of the rest,
// and creating the Conns of both ends 3%. The listener's admission
// reads a Request that has arrived whole in one read, its socket is plain TCP (not Multipath TCP) and
// passes its keepalive options on to the connections it accepts, the
// dialer sets TCP_NODELAY only once, neither side reads its keepalive
// options back for TCP_USER_TIMEOUT, and neither asks for its MSS before
// a message needs it. A dialer that spun (reading its socket without
// waiting) for the MPA Reply instead of sleeping measured no faster. The
// iwarp dialer writes its MPA Request as soon as connect(2) has started
// the connection, not after the poller reported the connect, a wait
// that parked it for another thread's wake-up: 8 interleaved runs,
// medians, 222 µs where it took 238 µs before and TCP 103 µs (2.15×
// instead of 2.3×, 1.8-2.2× run by run). A spare (below) is dialed
// without that haste: nobody waits for it.
//
// A dial through dup-connect (Conn.Dup, or a Dialer reusing a live
// connection to the same address) skips only the address resolution, and
// every iWARP connection needs its own TCP connection and MPA exchange; so
// once a peer was dialed that way, the IA dials up to two spare
// connections to it ahead, which the next such dials with the same setup
// take (see Dialer.NoDup). The spares a dial asks for are dialed once
// the connection it returned has had its first exchange (its first Read
// has returned, or it closes; a millisecond at most), or at once when a
// dial wants one: dialed at the same time, a spare's set-up met that
// connection's first message and its answer on both ends. BenchmarkDialDup,
// the same dial-and-echo in a loop through dup-connect: 78 µs against
// 221 µs for a fresh dial in the same runs (0.35×, 0.33-0.38× run by run
// over 8; 0.46-0.50× with the spares dialed at once, and no faster than a
// fresh dial before the spares). Programs that never dup get no spare; those that do
// pay for the spares' connections on both ends (the server accepts them as
// they are dialed) while the connection they were dialed from lives.
//
// # TCP fallback
//
// As with SMC-R, RDMA is an upgrade a connection can do without. A Dialer
// with FallbackTCP dials plain TCP when RDMA cannot be had, within the
// dial's own time, and a ListenConfig with FallbackTCP serves plain TCP
// clients on the same port. Such connections are *FallbackConn, which say
// why they are TCP (FallbackReason); the process counts them by reason
// (Listing.Fallbacks) and logs each at Info.
//
// # Socket options and dead peers
//
// Dialer and ListenConfig take package net's socket-level options with
// net's meanings: LocalAddr (port included), Control and ControlContext,
// KeepAlive and KeepAliveConfig. They reach the provider through package
// dat (dat.ConnectOptions on the connection's EP, dat.PSPOptions on the
// listener's PSP). Keepalive is on by default (15 s); a peer that
// vanishes without closing then fails a blocked Read or Write with an
// error matching syscall.ETIMEDOUT, within about Idle + Interval × Count
// (see Dialer.KeepAlive for how each provider probes).
//
// # Observing connections
//
// Conn.Stats returns a connection's counters (bytes, RDMA Writes, control
// messages, waits for credit or ring space, errors) and its negotiated
// parameters. Snapshot lists every live Conn and Listener of the process,
// as smcss lists SMC-R sockets; the listing is published through expvar
// as "rdmanet" (ExpvarName), and StatsHandler serves it as a table or as
// JSON for cmd/rdmastat. Dialer.Logger and ListenConfig.Logger (log/slog)
// receive each connection's life-cycle records (dialed, accepted, closed,
// failures with their reason), never one per Read or Write.
package rdmanet
