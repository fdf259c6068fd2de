package wire

import "encoding/binary"

// DDP and RDMAP versions this package speaks (RFC 5041, RFC 5040).
const (
	DDPVersion   = 1
	RDMAPVersion = 1
)

// DDP header sizes including the 2-byte ULPDU_Length field (siw
// struct iwarp_ctrl_tagged / iwarp_ctrl_untagged).
const (
	TaggedHeaderLen   = 16
	UntaggedHeaderLen = 20
)

// Bits of the 16-bit DDP/RDMAP control word at FPDU bytes 2-3 (siw masks).
const (
	ctrlTagged       = 0x8000
	ctrlLast         = 0x4000
	ctrlDDPReserved  = 0x3C00
	ctrlDDPVersion   = 0x0300
	ctrlRDMAPVersion = 0x00C0
	ctrlRDMAPReserve = 0x0030
	ctrlOpcode       = 0x000F

	// CtrlReservedMask selects the reserved bits of the control word that
	// Header.Reserved carries.
	CtrlReservedMask = ctrlDDPReserved | ctrlRDMAPReserve
)

// Header is the DDP header plus the RDMAP control byte of one FPDU: the
// first 16 (tagged) or 20 (untagged) bytes, ULPDU_Length included. What
// follows it in the ULPDU is the payload, the Read Request body or the
// Terminate body, depending on Opcode.
type Header struct {
	// ULPDULength is the FPDU's ULPDU_Length as parsed. Append ignores it
	// and derives the field from the header size and restLen.
	ULPDULength uint16
	// Last is the DDP L flag: last segment of the RDMAP message.
	Last   bool
	Opcode Opcode
	// Reserved holds the reserved control bits (CtrlReservedMask) as
	// received, so that parse/append round-trips. Senders leave it zero;
	// siw ignores these bits.
	Reserved uint16
	// STag is, for tagged opcodes, the Data Sink STag. For untagged ones it
	// is the DDP RsvdULP field, which RDMAP uses as the Invalidate STag of
	// Send with (SE and) Invalidate and leaves zero otherwise.
	STag uint32
	// TO is the tagged offset of this segment's first payload byte
	// (tagged only).
	TO uint64
	// MSN and MO are the untagged message sequence number (per queue,
	// first message 1) and message offset (untagged only). The queue
	// number is implied by Opcode: Parse checks it, Append writes it.
	MSN uint32
	MO  uint32
}

// Len returns the header size on the wire: 16 for tagged opcodes, 20 for
// untagged ones.
func (h *Header) Len() int {
	if h.Opcode.Tagged() {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// RestLen returns how many ULPDU bytes follow the header according to the
// parsed ULPDULength: payload, Read Request body or Terminate body.
func (h *Header) RestLen() int { return int(h.ULPDULength) + ULPDULengthLen - h.Len() }

// ParseControl validates the first 4 bytes of an FPDU (ULPDU_Length and the
// DDP/RDMAP control word) and returns the opcode and ULPDU_Length. It is
// the first thing a stream reader calls: afterwards it knows the header
// size (op.HeaderLen()) and the FPDU size (FPDULen(ulpduLen)) and can read
// exactly that, before trusting anything else. Checks run in siw's order
// (DDP version, RDMAP version, opcode), preceded by the length underflow
// check, so the returned *ProtocolError carries siw's Terminate cause.
func ParseControl(b []byte) (op Opcode, ulpduLen int, err error) {
	if len(b) < ULPDULengthLen {
		return 0, 0, ErrShortBuffer
	}
	l := int(binary.BigEndian.Uint16(b))
	// A ULPDU too short to hold even the control word: whatever follows
	// the length field belongs to the trailer, not to this segment.
	if l < 2 {
		return 0, l, ErrULPDUTooShort
	}
	if len(b) < 4 {
		return 0, l, ErrShortBuffer
	}
	ctrl := binary.BigEndian.Uint16(b[2:])
	if (ctrl&ctrlDDPVersion)>>8 != DDPVersion {
		if ctrl&ctrlTagged != 0 {
			return 0, l, ErrDDPVersionTagged
		}
		return 0, l, ErrDDPVersionUntagged
	}
	if (ctrl&ctrlRDMAPVersion)>>6 != RDMAPVersion {
		return 0, l, ErrRDMAPVersion
	}
	op = Opcode(ctrl & ctrlOpcode)
	if !op.Valid() {
		return op, l, ErrRDMAPOpcode
	}
	if (ctrl&ctrlTagged != 0) != op.Tagged() {
		return op, l, ErrTaggedMismatch
	}
	if l < op.MinULPDULength() {
		return op, l, ErrULPDUTooShort
	}
	if op == OpReadRequest && l != ReadRequestULPDULength {
		return op, l, ErrReadRequestLength
	}
	return op, l, nil
}

// Parse decodes the DDP header at the start of b (at least Len() bytes;
// more is fine) and returns the number of bytes it occupies. It runs all
// ParseControl checks and, for untagged opcodes, checks the queue number.
// MSN and MO are not checked: they need connection state.
func (h *Header) Parse(b []byte) (int, error) {
	op, l, err := ParseControl(b)
	if err != nil {
		return 0, err
	}
	ctrl := binary.BigEndian.Uint16(b[2:])
	*h = Header{
		ULPDULength: uint16(l),
		Last:        ctrl&ctrlLast != 0,
		Opcode:      op,
		Reserved:    ctrl & CtrlReservedMask,
	}
	n := h.Len()
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	h.STag = binary.BigEndian.Uint32(b[4:])
	if op.Tagged() {
		h.TO = binary.BigEndian.Uint64(b[8:])
		return n, nil
	}
	if binary.BigEndian.Uint32(b[8:]) != op.QN() {
		return 0, ErrInvalidQN
	}
	h.MSN = binary.BigEndian.Uint32(b[12:])
	h.MO = binary.BigEndian.Uint32(b[16:])
	return n, nil
}

// Append appends the header with ULPDU_Length = Len()-2+restLen, where
// restLen counts the ULPDU bytes the caller sends after the header
// (payload, the 28-byte Read Request body, or the Terminate body). It
// refuses what a receiver would refuse: an invalid opcode, a ULPDU longer
// than 65535 or shorter than the opcode's header, a Read Request body of
// the wrong size.
func (h *Header) Append(b []byte, restLen int) ([]byte, error) {
	if !h.Opcode.Valid() {
		return b, ErrRDMAPOpcode
	}
	l := h.Len() - ULPDULengthLen + restLen
	if restLen < 0 || l < h.Opcode.MinULPDULength() {
		return b, ErrULPDUTooShort
	}
	if l > MaxULPDULength {
		return b, ErrULPDUTooLong
	}
	if h.Opcode == OpReadRequest && l != ReadRequestULPDULength {
		return b, ErrReadRequestLength
	}
	ctrl := uint16(DDPVersion<<8|RDMAPVersion<<6) | uint16(h.Opcode) | h.Reserved&CtrlReservedMask
	if h.Opcode.Tagged() {
		ctrl |= ctrlTagged
	}
	if h.Last {
		ctrl |= ctrlLast
	}
	b = binary.BigEndian.AppendUint16(b, uint16(l))
	b = binary.BigEndian.AppendUint16(b, ctrl)
	b = binary.BigEndian.AppendUint32(b, h.STag)
	if h.Opcode.Tagged() {
		return binary.BigEndian.AppendUint64(b, h.TO), nil
	}
	b = binary.BigEndian.AppendUint32(b, h.Opcode.QN())
	b = binary.BigEndian.AppendUint32(b, h.MSN)
	return binary.BigEndian.AppendUint32(b, h.MO), nil
}
