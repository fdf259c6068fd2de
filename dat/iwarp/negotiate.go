package iwarp

import (
	"fmt"
	"net"

	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Limits of this provider. They mirror siw so that a Go peer and a kernel
// peer negotiate to the same values.
const (
	// MaxIRD and MaxORD bound the RDMA Read depths of a QP (siw
	// SIW_MAX_IRD_QP / SIW_MAX_ORD_QP).
	MaxIRD = 128
	MaxORD = 128
	// MaxPrivateData is the consumer private data limit on connect, accept
	// and reject (252): siw's 256-byte MPA_MAX_PRIVDATA minus the 4-byte
	// MPA v2 IRD/ORD block (see the package documentation).
	MaxPrivateData = wire.MaxConsumerPrivateDataSiw
	// maxWirePrivateData is the largest PD_Length accepted on receive
	// (siw refuses more, although RFC 5044 allows 512).
	maxWirePrivateData = wire.MaxPrivateDataSiw
)

// RTRMode is the MPA v2 peer-to-peer "ready to receive" frame agreed for a
// connection (RFC 6581): what the initiator sends as its first FPDU when
// both sides set the A bit.
type RTRMode int

// RTR modes.
const (
	// RTRNone: no P2P mode; the initiator's first FPDU is whatever its
	// consumer sends first (the net.Conn layer sends a hello).
	RTRNone RTRMode = iota
	// RTRWrite: a zero-length RDMA Write with STag 1, TO 0 (siw's choice).
	RTRWrite
	// RTRRead: a zero-length RDMA Read Request, answered by a zero-length
	// Read Response; it uses one ORD slot.
	RTRRead
)

func (m RTRMode) String() string {
	switch m {
	case RTRNone:
		return "none"
	case RTRWrite:
		return "zero-length RDMA Write"
	case RTRRead:
		return "zero-length RDMA Read"
	}
	return fmt.Sprintf("RTRMode(%d)", int(m))
}

// ConnInfo describes a QP's connection as the MPA exchange negotiated it.
// The data path builds its FPDU framing and Read queues from it.
type ConnInfo struct {
	// Initiator is true on the side that called Connect. The startup
	// rule (RFC 5044 §7.1.2) makes it transmit the first FPDU; the
	// responder may only transmit once that FPDU arrived.
	Initiator bool
	// Revision is the MPA revision of the exchange (1 or 2; 0 for a
	// pre-IETF peer).
	Revision int
	// Enhanced reports an MPA v2 exchange with the IRD/ORD block (E bit).
	Enhanced bool
	// CRC reports that FPDUs carry a CRC-32C (else the field is zero).
	CRC bool
	// IRD and ORD are the negotiated inbound and outbound RDMA Read depths.
	IRD, ORD int
	// RTR is the agreed peer-to-peer ready-to-receive frame, if any.
	RTR RTRMode
	// Local and Remote are the TCP endpoints.
	Local, Remote net.Addr
}

// responderLimits applies siw's relaxed IRD/ORD negotiation for the
// responder (siw_proc_mpareq + siw_accept, relaxed_ird_negotiation): the
// peer's IRD caps our ORD and our IRD is raised to cover the peer's ORD,
// each bounded by the device maxima. qpIRD/qpORD are the consumer's
// values, already within the maxima.
func responderLimits(qpIRD, qpORD, peerIRD, peerORD int) (ird, ord int) {
	ord = min(qpORD, peerIRD, MaxORD)
	ird = max(qpIRD, min(peerORD, MaxIRD))
	return ird, ord
}

// initiatorLimits applies siw's rule for the initiator on an MPA v2 Reply
// (siw_proc_mpareply): adopt IRD := reply ORD and ORD := reply IRD, unless
// the responder's ORD exceeds what this device could ever serve (siw then
// sends Terminate LLP/MPA "insufficient IRD" and fails). ORD is capped at
// the device maximum (siw does not cap it; reading less than allowed is
// always safe).
func initiatorLimits(qpIRD, repIRD, repORD int) (ird, ord int, err error) {
	if qpIRD < repORD && repORD > MaxIRD {
		return 0, 0, fmt.Errorf("responder ORD %d exceeds the maximum IRD %d (insufficient IRD)", repORD, MaxIRD)
	}
	return repORD, min(repIRD, MaxORD), nil
}

// chooseRTR answers a peer-to-peer request like siw: agree, preferring a
// zero-length Write, then a Read, and proposing a Write if the peer offered
// neither (a zero-length Send would need a pre-posted Receive).
func chooseRTR(p2p, writeRTR, readRTR bool) RTRMode {
	switch {
	case !p2p:
		return RTRNone
	case writeRTR:
		return RTRWrite
	case readRTR:
		return RTRRead
	}
	return RTRWrite
}
