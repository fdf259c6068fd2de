package wire

import (
	"encoding/binary"
	"strconv"
)

// Opcode is the 4-bit RDMAP opcode (RFC 5040; siw enum rdma_opcode).
type Opcode uint8

// RDMAP opcodes 0..7. 8 and above (RFC 7306 atomics/immediate) are not
// supported by siw and are rejected with ErrRDMAPOpcode.
const (
	OpWrite            Opcode = 0x0
	OpReadRequest      Opcode = 0x1
	OpReadResponse     Opcode = 0x2
	OpSend             Opcode = 0x3
	OpSendInvalidate   Opcode = 0x4
	OpSendSE           Opcode = 0x5
	OpSendSEInvalidate Opcode = 0x6
	OpTerminate        Opcode = 0x7
)

// Untagged DDP queue numbers used by RDMAP (siw enum rdmap_untagged_qn).
// Each queue has its own MSN sequence starting at 1.
const (
	QNSend        uint32 = 0 // Send, Send with Invalidate, Send with SE (+Invalidate)
	QNReadRequest uint32 = 1
	QNTerminate   uint32 = 2
)

// RDMAP header sizes, counted like siw's iwarp_pktinfo hdr_len: from the
// ULPDU_Length field on.
const (
	// ReadRequestBodyLen is the RDMA Read Request header that follows the
	// untagged DDP header: sink STag, sink TO, size, source STag, source TO.
	ReadRequestBodyLen = 28
	// ReadRequestHeaderLen is the whole Read Request FPDU minus its trailer.
	ReadRequestHeaderLen = UntaggedHeaderLen + ReadRequestBodyLen
	// ReadRequestULPDULength is the only ULPDU_Length a Read Request may have.
	ReadRequestULPDULength = ReadRequestHeaderLen - ULPDULengthLen
	// TerminateHeaderLen is a Terminate without attachments.
	TerminateHeaderLen = UntaggedHeaderLen + TerminateControlLen
)

// opcodeHeaderLen is HeaderLen per opcode, indexed by opcode. Zero means
// "not an opcode we know".
var opcodeHeaderLen = [8]uint8{
	OpWrite:            TaggedHeaderLen,
	OpReadRequest:      ReadRequestHeaderLen,
	OpReadResponse:     TaggedHeaderLen,
	OpSend:             UntaggedHeaderLen,
	OpSendInvalidate:   UntaggedHeaderLen,
	OpSendSE:           UntaggedHeaderLen,
	OpSendSEInvalidate: UntaggedHeaderLen,
	OpTerminate:        TerminateHeaderLen,
}

var opcodeNames = [8]string{
	"RDMA Write", "RDMA Read Request", "RDMA Read Response", "Send",
	"Send with Invalidate", "Send with SE", "Send with SE and Invalidate", "Terminate",
}

// Valid reports whether o is one of the eight RDMAP opcodes siw knows.
func (o Opcode) Valid() bool { return o <= OpTerminate }

// Tagged reports whether the opcode uses the DDP tagged buffer model
// (RDMA Write and Read Response); all others are untagged.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// QN returns the untagged queue number the opcode travels on. It is
// meaningless for tagged opcodes.
func (o Opcode) QN() uint32 {
	switch o {
	case OpReadRequest:
		return QNReadRequest
	case OpTerminate:
		return QNTerminate
	}
	return QNSend
}

// HeaderLen returns the full DDP+RDMAP header length of the opcode,
// including the ULPDU_Length field (16, 48, 16, 20, 20, 20, 20, 24), or 0
// for an invalid opcode. A reader that has the first 4 bytes of an FPDU
// reads HeaderLen()-4 more to complete the header.
func (o Opcode) HeaderLen() int {
	if !o.Valid() {
		return 0
	}
	return int(opcodeHeaderLen[o])
}

// MinULPDULength returns the smallest legal ULPDU_Length for the opcode:
// a zero-length message of that type.
func (o Opcode) MinULPDULength() int { return o.HeaderLen() - ULPDULengthLen }

// String returns the RFC 5040 message name.
func (o Opcode) String() string {
	if !o.Valid() {
		return "opcode(" + strconv.Itoa(int(o)) + ")"
	}
	return opcodeNames[o]
}

// ReadRequest is the RDMA Read Request header (RFC 5040 §4.4) that follows
// the untagged DDP header of an OpReadRequest FPDU.
type ReadRequest struct {
	SinkSTag   uint32 // requester's buffer: where the Read Response lands
	SinkTO     uint64
	Size       uint32 // RDMA Read Message Size
	SourceSTag uint32 // responder's buffer: what is read
	SourceTO   uint64
}

// Parse decodes the 28-byte Read Request body; b may be longer.
func (r *ReadRequest) Parse(b []byte) error {
	if len(b) < ReadRequestBodyLen {
		return ErrShortBuffer
	}
	*r = ReadRequest{
		SinkSTag:   binary.BigEndian.Uint32(b[0:]),
		SinkTO:     binary.BigEndian.Uint64(b[4:]),
		Size:       binary.BigEndian.Uint32(b[12:]),
		SourceSTag: binary.BigEndian.Uint32(b[16:]),
		SourceTO:   binary.BigEndian.Uint64(b[20:]),
	}
	return nil
}

// Append appends the 28-byte Read Request body.
func (r *ReadRequest) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.SinkSTag)
	b = binary.BigEndian.AppendUint64(b, r.SinkTO)
	b = binary.BigEndian.AppendUint32(b, r.Size)
	b = binary.BigEndian.AppendUint32(b, r.SourceSTag)
	return binary.BigEndian.AppendUint64(b, r.SourceTO)
}
