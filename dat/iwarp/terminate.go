package iwarp

import (
	"errors"
	"fmt"

	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// TerminateError is the OnDisconnect error of a connection that ended with
// an iWARP Terminate message (RFC 5040 §4.8): either this provider found
// the peer violating the protocol and sent one (Remote false), or the peer
// sent one (Remote true). Layer, EType and ECode are the Terminate Control
// fields (RFC 5040 §7; Layer 0 RDMAP, 1 DDP, 2 LLP/MPA).
type TerminateError struct {
	Remote              bool
	Layer, EType, ECode uint8
	// Malformed is set when the peer's Terminate itself could not be
	// decoded completely (bad CRC, bad attachment); the fields are then
	// best effort.
	Malformed bool
	// Reason says what this side found wrong (Remote false), or why the
	// peer's Terminate is malformed.
	Reason string
}

func (e *TerminateError) Error() string {
	cause := describeCause(e.Layer, e.EType, e.ECode)
	if e.Remote {
		s := "iwarp: peer terminated the connection: " + cause
		if e.Malformed {
			s += " (" + e.Reason + ")"
		}
		return s
	}
	return "iwarp: protocol error from peer: " + e.Reason + "; sent Terminate " + cause
}

// describeCause names a Terminate cause, e.g. "DDP untagged buffer error 2
// (invalid MSN - no buffer available)".
func describeCause(layer, etype, ecode uint8) string {
	l, t := fmt.Sprintf("layer %d", layer), fmt.Sprintf("type %d", etype)
	var code string
	switch wire.TermLayer(layer) {
	case wire.LayerRDMAP:
		l = "RDMAP"
		t = [...]string{"catastrophic error", "remote protection error", "remote operation error"}[min(etype, 2)]
		if etype > 2 {
			t = fmt.Sprintf("error type %d", etype)
		}
		if ecode <= 9 {
			code = [...]string{"invalid STag", "base or bounds violation", "access rights violation",
				"STag not associated with RDMAP stream", "TO wrap", "invalid RDMAP version",
				"unexpected opcode", "catastrophic error localized to RDMAP stream",
				"catastrophic error global", "STag cannot be invalidated"}[ecode]
		}
	case wire.LayerDDP:
		l = "DDP"
		switch etype {
		case wire.ETypeDDPCatastrophic:
			t = "catastrophic error"
		case wire.ETypeDDPTaggedBuffer:
			t = "tagged buffer error"
			if ecode <= 4 {
				code = [...]string{"invalid STag", "base or bounds violation", "STag not associated with DDP stream",
					"TO wrap", "invalid DDP version"}[ecode]
			}
		case wire.ETypeDDPUntaggedBuffer:
			t = "untagged buffer error"
			if ecode >= 1 && ecode <= 6 {
				code = [...]string{"", "invalid QN", "invalid MSN - no buffer available", "invalid MSN - MSN range",
					"invalid MO", "DDP message too long for available buffer", "invalid DDP version"}[ecode]
			}
		}
	case wire.LayerLLP:
		l = "LLP"
		if etype == wire.ETypeLLPMPA {
			t = "MPA error"
			if ecode >= 1 && ecode <= 7 {
				code = [...]string{"", "TCP connection closed or reset", "received MPA CRC does not match",
					"FPDU length or marker does not match", "invalid MPA Request or Reply",
					"local catastrophic", "insufficient IRD", "no matching RTR"}[ecode]
			}
		}
	}
	s := fmt.Sprintf("%s %s %d", l, t, ecode)
	if code != "" {
		s += " (" + code + ")"
	}
	return s
}

// decodeTermControl reads a received Terminate Control word. RFC 5040
// layout is assumed, unless the word only makes sense in the layout Linux
// siw actually emits on little-endian hosts (see wire.TermLayout): M/D/R
// in bits 8-10 with the RFC flag bits clear, or an RFC layer that does not
// exist where the siw reading gives a valid one.
func decodeTermControl(w uint32) wire.TermControl {
	rfc := wire.ParseTermControl(w, wire.TermLayoutRFC)
	siw := wire.ParseTermControl(w, wire.TermLayoutSiwLE)
	if (w&0x0700 != 0 && w&0xE000 == 0) || (rfc.Layer > wire.LayerLLP && siw.Layer <= wire.LayerLLP) {
		return siw
	}
	return rfc
}

// reasonOf is the message of a wire.ProtocolError (or any error).
func reasonOf(err error) string {
	var pe *wire.ProtocolError
	if errors.As(err, &pe) {
		return pe.Msg
	}
	return err.Error()
}

func perr(layer wire.TermLayer, etype, ecode uint8, msg string) *wire.ProtocolError {
	return &wire.ProtocolError{Cause: wire.TermCause{Layer: layer, EType: etype, ECode: ecode}, Msg: msg}
}

// Protocol violations the data path detects itself, with the Terminate
// cause siw reports for each (siw_qp_rx.c; see the package documentation).
var (
	errStreamLost = perr(wire.LayerLLP, wire.ETypeLLPMPA, wire.ECodeLLPStreamLost, "stream ended inside an FPDU or message")

	errNoRecv        = perr(wire.LayerDDP, wire.ETypeDDPUntaggedBuffer, wire.ECodeDDPUntaggedNoBuffer, "Send arrived with no receive posted")
	errRecvTooSmall  = perr(wire.LayerDDP, wire.ETypeDDPUntaggedBuffer, wire.ECodeDDPUntaggedNoBuffer, "Send longer than the posted receive")
	errMSN           = perr(wire.LayerDDP, wire.ETypeDDPUntaggedBuffer, wire.ECodeDDPUntaggedMSNRange, "unexpected MSN")
	errMO            = perr(wire.LayerDDP, wire.ETypeDDPUntaggedBuffer, wire.ECodeDDPUntaggedInvalidMO, "unexpected MO")
	errRReqSegmented = perr(wire.LayerDDP, wire.ETypeDDPUntaggedBuffer, wire.ECodeDDPUntaggedTooLong, "Read Request not in one segment")

	errRecvProtection = perr(wire.LayerDDP, wire.ETypeDDPCatastrophic, wire.ECodeDDPCatastrophic, "posted receive names memory the adapter may not write")
	errIntersect      = perr(wire.LayerDDP, wire.ETypeDDPCatastrophic, wire.ECodeDDPCatastrophic, "segments of two messages of one class interleaved")
	errNoRead         = perr(wire.LayerDDP, wire.ETypeDDPCatastrophic, wire.ECodeDDPCatastrophic, "Read Response without an outstanding Read")

	errTInvalidSTag = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedInvalidSTag, "Write to an unknown STag")
	errTAccess      = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedInvalidSTag, "Write to a region without remote write access")
	errTNotAssoc    = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedSTagNotAssociated, "Write to a region of another protection domain")
	errTBounds      = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedBaseBounds, "Write outside the region")
	errTWrap        = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedTOWrap, "Write wraps the tagged offset")
	errRRSTag       = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedInvalidSTag, "Read Response STag does not match the Read")
	errRRTO         = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedBaseBounds, "Read Response TO does not match the Read")
	errRRLength     = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedBaseBounds, "Read Response length does not match the Read")
	errRRSink       = perr(wire.LayerDDP, wire.ETypeDDPTaggedBuffer, wire.ECodeDDPTaggedInvalidSTag, "Read sink deregistered")

	errCannotInvalidate = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteOperation, wire.ECodeRDMAPCannotInvalidate, "Send with Invalidate: remote invalidation is not supported")
	errIRD              = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteOperation, wire.ECodeRDMAPCatastrophicStream, "more outstanding Read Requests than the negotiated IRD")
	errRInvalidSTag     = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteProtection, wire.ECodeRDMAPInvalidSTag, "Read Request for an unknown STag")
	errRNotAssoc        = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteProtection, wire.ECodeRDMAPSTagNotAssociated, "Read Request for a region of another protection domain")
	errRAccess          = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteProtection, wire.ECodeRDMAPAccessRights, "Read Request for a region without remote read access")
	errRBounds          = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteProtection, wire.ECodeRDMAPBaseBounds, "Read Request outside the region")
	errRWrap            = perr(wire.LayerRDMAP, wire.ETypeRDMAPRemoteProtection, wire.ECodeRDMAPTOWrap, "Read Request wraps the tagged offset")
)
