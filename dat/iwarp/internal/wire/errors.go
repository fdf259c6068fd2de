package wire

import (
	"errors"
	"strconv"
)

// TermLayer is the Terminate "Layer" field: which protocol layer detected
// the error (RFC 5040 Terminate Control).
type TermLayer uint8

// Terminate layers (siw enum term_elayer).
const (
	LayerRDMAP TermLayer = 0x0
	LayerDDP   TermLayer = 0x1
	LayerLLP   TermLayer = 0x2 // the LLP is MPA on TCP
)

// Terminate error types. The meaning of an EType depends on the layer, so
// the names carry the layer.
const (
	ETypeRDMAPCatastrophic     uint8 = 0x0
	ETypeRDMAPRemoteProtection uint8 = 0x1
	ETypeRDMAPRemoteOperation  uint8 = 0x2
	ETypeDDPCatastrophic       uint8 = 0x0
	ETypeDDPTaggedBuffer       uint8 = 0x1
	ETypeDDPUntaggedBuffer     uint8 = 0x2
	ETypeLLPMPA                uint8 = 0x0
)

// RDMAP error codes (layer RDMAP).
const (
	ECodeRDMAPInvalidSTag        uint8 = 0x00
	ECodeRDMAPBaseBounds         uint8 = 0x01
	ECodeRDMAPAccessRights       uint8 = 0x02
	ECodeRDMAPSTagNotAssociated  uint8 = 0x03
	ECodeRDMAPTOWrap             uint8 = 0x04
	ECodeRDMAPVersion            uint8 = 0x05
	ECodeRDMAPOpcode             uint8 = 0x06
	ECodeRDMAPCatastrophicStream uint8 = 0x07
	ECodeRDMAPCatastrophicGlobal uint8 = 0x08
	ECodeRDMAPCannotInvalidate   uint8 = 0x09
	ECodeRDMAPUnspecified        uint8 = 0xFF
)

// DDP error codes (layer DDP). Tagged and untagged buffer errors reuse
// the same numbers, hence the separate names.
const (
	ECodeDDPCatastrophic            uint8 = 0x00
	ECodeDDPTaggedInvalidSTag       uint8 = 0x00
	ECodeDDPTaggedBaseBounds        uint8 = 0x01
	ECodeDDPTaggedSTagNotAssociated uint8 = 0x02
	ECodeDDPTaggedTOWrap            uint8 = 0x03
	ECodeDDPTaggedVersion           uint8 = 0x04
	ECodeDDPUntaggedInvalidQN       uint8 = 0x01
	ECodeDDPUntaggedNoBuffer        uint8 = 0x02 // "invalid MSN - no buffer available"
	ECodeDDPUntaggedMSNRange        uint8 = 0x03
	ECodeDDPUntaggedInvalidMO       uint8 = 0x04
	ECodeDDPUntaggedTooLong         uint8 = 0x05
	ECodeDDPUntaggedVersion         uint8 = 0x06
)

// LLP (MPA) error codes (layer LLP, type MPA). Codes 5-7 exist only with
// MPA v2 enhanced connection establishment (RFC 6581).
const (
	ECodeLLPStreamLost        uint8 = 0x01
	ECodeLLPCRC               uint8 = 0x02
	ECodeLLPFPDUStart         uint8 = 0x03 // marker/length disagreement
	ECodeLLPInvalidReqRep     uint8 = 0x04
	ECodeLLPLocalCatastrophic uint8 = 0x05
	ECodeLLPInsufficientIRD   uint8 = 0x06
	ECodeLLPNoMatchingRTR     uint8 = 0x07
)

// TermCause is the (layer, error type, error code) triple a Terminate
// message reports.
type TermCause struct {
	Layer TermLayer
	EType uint8
	ECode uint8
}

// String formats the cause for logs, e.g. "layer 2 type 0 code 2".
func (c TermCause) String() string {
	return "layer " + strconv.Itoa(int(c.Layer)) + " type " + strconv.Itoa(int(c.EType)) +
		" code " + strconv.Itoa(int(c.ECode))
}

// ProtocolError is a malformed-input error that maps to a Terminate cause.
// The sentinel values below are the only instances the package returns, so
// errors.Is works and no error path allocates.
type ProtocolError struct {
	Cause TermCause
	Msg   string
}

// Error implements error.
func (e *ProtocolError) Error() string { return "iwarp/wire: " + e.Msg + " (" + e.Cause.String() + ")" }

// CauseOf returns the Terminate cause carried by err, if err is (or wraps)
// a *ProtocolError.
func CauseOf(err error) (TermCause, bool) {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Cause, true
	}
	return TermCause{}, false
}

var (
	causeFPDUStart     = TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPFPDUStart}
	causeInvalidReqRep = TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPInvalidReqRep}
)

// ErrShortBuffer means the input is shorter than the structure being
// parsed, or than the length it announces: the reader must supply more
// bytes. It is not a protocol violation by itself.
var ErrShortBuffer = errors.New("iwarp/wire: buffer too short")

// MPA Request/Reply errors. siw treats all of them as protocol errors
// (EPROTO); an initiator that gets a bad Reply sends LLP/MPA/4.
var (
	ErrMPAKey                 = &ProtocolError{causeInvalidReqRep, "MPA: wrong key"}
	ErrMPARevision            = &ProtocolError{causeInvalidReqRep, "MPA: revision > 2"}
	ErrMPAPrivateDataTooLong  = &ProtocolError{causeInvalidReqRep, "MPA: private data longer than the limit"}
	ErrMPAEnhancedRevision    = &ProtocolError{causeInvalidReqRep, "MPA: enhanced flag needs revision 2"}
	ErrMPAEnhancedPrivateData = &ProtocolError{causeInvalidReqRep, "MPA: enhanced flag needs 4 bytes of private data"}
)

// FPDU, DDP and RDMAP header errors, with the cause siw reports.
var (
	// ErrULPDUTooShort: ULPDU_Length is smaller than the header of the
	// opcode (the siw FPDU length underflow fix reports LLP/MPA/3).
	ErrULPDUTooShort = &ProtocolError{causeFPDUStart, "ULPDU_Length shorter than the header"}
	// ErrReadRequestLength: a Read Request must have ULPDU_Length 46
	// exactly; siw refuses payload on a Read Request.
	ErrReadRequestLength = &ProtocolError{causeFPDUStart, "Read Request ULPDU_Length is not 46"}
	// ErrTerminateLength: a Terminate's attachments are not 0, 16, 20 or 48 bytes.
	ErrTerminateLength = &ProtocolError{causeFPDUStart, "Terminate length does not match its attachments"}
	// ErrCRC: the FPDU's CRC-32C does not match.
	ErrCRC = &ProtocolError{TermCause{LayerLLP, ETypeLLPMPA, ECodeLLPCRC}, "MPA CRC mismatch"}
	// ErrDDPVersionTagged / ErrDDPVersionUntagged: DV is not 1.
	ErrDDPVersionTagged   = &ProtocolError{TermCause{LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedVersion}, "DDP version is not 1"}
	ErrDDPVersionUntagged = &ProtocolError{TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedVersion}, "DDP version is not 1"}
	// ErrRDMAPVersion: RV is not 1.
	ErrRDMAPVersion = &ProtocolError{TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPVersion}, "RDMAP version is not 1"}
	// ErrRDMAPOpcode: opcode > 7 (RFC 7306 extensions are not supported by siw).
	ErrRDMAPOpcode = &ProtocolError{TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPOpcode}, "unsupported RDMAP opcode"}
	// ErrTaggedMismatch: the DDP T bit disagrees with the opcode's buffer
	// model (siw does not check this and would parse by opcode; we refuse
	// because the header layout is ambiguous).
	ErrTaggedMismatch = &ProtocolError{TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPOpcode}, "DDP tagged flag does not match opcode"}
	// ErrInvalidQN: the untagged queue number is not the one for the opcode.
	ErrInvalidQN = &ProtocolError{TermCause{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedInvalidQN}, "invalid DDP queue number"}
)

// Caller errors: the caller asked for something that cannot be put on the
// wire, or passed an invalid argument. They indicate a bug in the caller,
// not a peer problem, and carry no Terminate cause.
var (
	ErrMPAKind       = errors.New("iwarp/wire: MPA frame kind must be MPARequest or MPAReply")
	ErrIRDORDRange   = errors.New("iwarp/wire: MPA v2 IRD/ORD exceeds 14 bits")
	ErrULPDUTooLong  = errors.New("iwarp/wire: ULPDU longer than 65535 bytes")
	ErrTrailerLength = errors.New("iwarp/wire: trailer length does not match ULPDU_Length")
)
