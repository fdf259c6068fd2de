// Package iwarp is rdmanet's pure-Go iWARP provider: MPA/DDP/RDMAP over a
// plain TCP connection, wire-compatible with Linux soft-iWARP (siw) and
// iWARP NICs. It implements the provider contract of package dat/driver;
// package dat registers Driver as the built-in "iwarp" provider.
//
// This file set covers connection management: IA/PD/MR/SRQ/QP objects,
// listening, the MPA Request/Reply exchange (RFC 5044 §7.1, RFC 6581) and
// teardown. The FPDU data path is not implemented yet: QP.PostSend returns
// driver.ErrNotSupported on a connected QP (receives are queued and
// flushed, so DAT's queue semantics already hold).
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
//	                     0 (default 16).
//	max_handshakes=N     TCP connections per listener whose MPA Request is
//	                     still being read (default 128); more are reset at
//	                     once so silent peers cannot exhaust the process.
//	req_timeout=DUR      how long a responder waits for the MPA Request
//	                     after the TCP accept (default 5s, siw's
//	                     MPAREP_TIMEOUT).
//	rep_timeout=DUR      how long an initiator waits for the MPA Reply
//	                     (default 10s, siw's MPAREQ_TIMEOUT); expiry is
//	                     reported as driver.ErrUnreachable.
//	close_timeout=DUR    how long a graceful Disconnect waits for the peer's
//	                     FIN after sending its own (default 2s).
//	srq_pz_diff=0|1      whether an EP may use a PD other than its SRQ's
//	                     (IAAttr.SRQPDDifference, default 1).
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
// # Outcomes of Connect
//
//	MPA Reply with R=1                  *driver.RejectError (peer reject)
//	refused, reset or closed before the
//	Reply, malformed Reply, M=1, rev/E
//	mismatch, CRC refused, IRD too small plain error (non-peer reject)
//	EHOSTUNREACH, ENETUNREACH,
//	ETIMEDOUT, no Reply in rep_timeout  wraps driver.ErrUnreachable
//	ctx deadline                        wraps context.DeadlineExceeded
//	ctx cancelled                       wraps context.Canceled
//	local Disconnect/Close meanwhile    wraps ErrAborted
//
// # Startup rule
//
// RFC 5044 §7.1.2: the responder must not send an FPDU before it received
// the initiator's first FPDU, and siw fails a connection whose
// Request/Reply is followed by trailing bytes. The QP therefore records its
// role (ConnInfo.Initiator): the initiator must transmit first (a hello, or
// the RTR frame when ConnInfo.RTR says peer-to-peer mode was agreed), the
// responder holds its FPDUs until its reader saw the initiator's first
// bytes.
package iwarp
