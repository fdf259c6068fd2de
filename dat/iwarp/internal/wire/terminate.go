package wire

import "encoding/binary"

// Terminate body sizes (RFC 5040 §4.8, siw siw_send_terminate).
const (
	// TerminateControlLen is the 32-bit Terminate Control field.
	TerminateControlLen = 4
	// MaxTerminateAttachLen is the largest attachment: DDP Segment Length
	// (2) + untagged DDP header (18) + Read Request header (28).
	MaxTerminateAttachLen = ULPDULengthLen + (UntaggedHeaderLen - ULPDULengthLen) + ReadRequestBodyLen
)

// TermLayout selects how the Terminate Control word's fields sit in its
// four bytes.
//
// RFC 5040 puts Layer in bits 31-28, EType in 27-24, ECode in 23-16 and the
// M, D, R flags in bits 15, 14, 13. Linux siw (iwarp.h, all versions since
// the 5.3 merge) declares the field as C bit-fields that, compiled for a
// little-endian CPU, come out differently on the wire: byte 0 holds Layer in
// its LOW nibble and EType in its high nibble, byte 1 holds ECode, and M, D,
// R are bits 0, 1, 2 of byte 2. siw only logs the received fields, so the
// layout changes diagnostics, not behaviour; but a byte-exact siw peer
// needs TermLayoutSiwLE.
type TermLayout uint8

// Terminate Control layouts.
const (
	TermLayoutRFC   TermLayout = iota // RFC 5040 bit order (iWARP NICs, Wireshark)
	TermLayoutSiwLE                   // what siw on x86/arm64 actually emits and reads
)

// TermControl is the decoded Terminate Control field.
type TermControl struct {
	Layer TermLayer
	EType uint8 // 4 bits
	ECode uint8
	M     bool // DDP Segment Length field is valid
	D     bool // terminated DDP header is attached
	R     bool // terminated RDMAP (Read Request) header is attached
}

// Cause returns the (layer, type, code) triple.
func (c TermControl) Cause() TermCause { return TermCause{c.Layer, c.EType, c.ECode} }

// Word encodes the control field as the big-endian 32-bit value on the
// wire in the given layout. Layer and EType are truncated to 4 bits.
func (c TermControl) Word(layout TermLayout) uint32 {
	l, t := uint32(c.Layer&0xF), uint32(c.EType&0xF)
	w := uint32(c.ECode) << 16
	if layout == TermLayoutSiwLE {
		w |= t<<28 | l<<24
		if c.M {
			w |= 0x100
		}
		if c.D {
			w |= 0x200
		}
		if c.R {
			w |= 0x400
		}
		return w
	}
	w |= l<<28 | t<<24
	if c.M {
		w |= 0x8000
	}
	if c.D {
		w |= 0x4000
	}
	if c.R {
		w |= 0x2000
	}
	return w
}

// ParseTermControl decodes a control word in the given layout. Reserved
// bits are ignored (Terminate.Control keeps them).
func ParseTermControl(w uint32, layout TermLayout) TermControl {
	c := TermControl{ECode: uint8(w >> 16)}
	if layout == TermLayoutSiwLE {
		c.Layer, c.EType = TermLayer(w>>24&0xF), uint8(w>>28)
		c.M, c.D, c.R = w&0x100 != 0, w&0x200 != 0, w&0x400 != 0
		return c
	}
	c.Layer, c.EType = TermLayer(w>>28), uint8(w>>24&0xF)
	c.M, c.D, c.R = w&0x8000 != 0, w&0x4000 != 0, w&0x2000 != 0
	return c
}

// Terminate is the body of an OpTerminate FPDU: everything in the ULPDU
// after the 20-byte untagged header (which carries QN 2; siw always sends
// MSN 1, MO 0 and drops the connection on anything else).
type Terminate struct {
	// Control is the raw Terminate Control word (big-endian value), kept
	// raw so that reserved bits survive and the layout can be chosen when
	// decoding: see Fields and TermLayout.
	Control uint32
	// Attached is empty or, siw style, a copy of the terminated FPDU's
	// header from its ULPDU_Length slot on, with that slot overwritten by
	// the DDP Segment Length: 16 bytes (tagged), 20 (untagged) or 48
	// (Read Request with its RDMAP header). Parse aliases the input.
	Attached []byte
}

// validAttachLen reports whether n is an attachment size siw produces
// (and RFC 5040 allows): nothing, a tagged or untagged DDP header, or an
// untagged header plus a Read Request header.
func validAttachLen(n int) bool {
	return n == 0 || n == TaggedHeaderLen || n == UntaggedHeaderLen || n == ReadRequestHeaderLen
}

// Len returns the body size: control word plus attachment.
func (t *Terminate) Len() int { return TerminateControlLen + len(t.Attached) }

// Fields decodes Control in the given layout.
func (t *Terminate) Fields(layout TermLayout) TermControl { return ParseTermControl(t.Control, layout) }

// DDPSegLen returns the DDP Segment Length of the attachment, if there is
// one. Note that siw fills it with the terminated segment's payload length
// (ULPDU_Length minus its header), not its ULPDU_Length.
func (t *Terminate) DDPSegLen() (uint16, bool) {
	if len(t.Attached) < ULPDULengthLen {
		return 0, false
	}
	return binary.BigEndian.Uint16(t.Attached), true
}

// Parse decodes a Terminate body (the ULPDU bytes after the untagged
// header; all of them, since the attachment size is implied by the length).
func (t *Terminate) Parse(body []byte) error {
	if len(body) < TerminateControlLen {
		return ErrShortBuffer
	}
	a := body[TerminateControlLen:]
	if !validAttachLen(len(a)) {
		return ErrTerminateLength
	}
	t.Control = binary.BigEndian.Uint32(body)
	t.Attached = a
	return nil
}

// Append appends the Terminate body.
func (t *Terminate) Append(b []byte) ([]byte, error) {
	if !validAttachLen(len(t.Attached)) {
		return b, ErrTerminateLength
	}
	b = binary.BigEndian.AppendUint32(b, t.Control)
	return append(b, t.Attached...), nil
}

// SiwTerminate builds the Terminate body siw's siw_send_terminate sends
// for cause c. hdr is the offending FPDU's header as received, starting at
// its ULPDU_Length field (up to 48 bytes are used; pass nil when there is
// no offending FPDU, e.g. for MPA errors). The attachment is written into
// buf (reused from buf[:0]; a [MaxTerminateAttachLen]byte array slice
// avoids allocation) and the result aliases it.
//
// What siw attaches:
//   - LLP errors and RDMAP catastrophic errors: nothing.
//   - RDMAP remote protection: M, D, R and the whole header (48 bytes for a
//     Read Request, 20 for an untagged one; siw would send 20 for a tagged
//     one too, 4 of them stale; we send the 16 that exist).
//   - RDMAP remote operation: nothing for bad version/opcode (the layout is
//     unknown), else M, D and the 16/20-byte DDP header.
//   - DDP: nothing for bad DDP version, else M, D and the 16/20-byte header.
//
// The DDP Segment Length is ULPDU_Length minus the opcode's header length
// plus 2 (the payload size), computed modulo 2^16 as siw does. If hdr is
// too short for what would be attached, nothing is attached.
func SiwTerminate(c TermCause, hdr []byte, layout TermLayout, buf []byte) Terminate {
	ctl := TermControl{Layer: c.Layer, EType: c.EType, ECode: c.ECode}
	attach := 0
	var tagged bool
	var op Opcode
	if len(hdr) >= 4 {
		ctrl := binary.BigEndian.Uint16(hdr[2:])
		tagged = ctrl&ctrlTagged != 0
		op = Opcode(ctrl & ctrlOpcode)
	}
	ddpLen := UntaggedHeaderLen
	if tagged {
		ddpLen = TaggedHeaderLen
	}
	switch c.Layer {
	case LayerRDMAP:
		switch c.EType {
		case ETypeRDMAPCatastrophic:
		case ETypeRDMAPRemoteProtection:
			ctl.M, ctl.D, ctl.R = true, true, true
			attach = ddpLen
			if op == OpReadRequest && !tagged {
				attach = ReadRequestHeaderLen
			}
		default:
			if c.ECode != ECodeRDMAPVersion && c.ECode != ECodeRDMAPOpcode {
				ctl.M, ctl.D = true, true
				attach = ddpLen
			}
		}
	case LayerDDP:
		versionErr := (c.EType == ETypeDDPTaggedBuffer && c.ECode == ECodeDDPTaggedVersion) ||
			(c.EType == ETypeDDPUntaggedBuffer && c.ECode == ECodeDDPUntaggedVersion)
		if !versionErr {
			ctl.M, ctl.D = true, true
			attach = ddpLen
		}
	}
	if attach == 0 || len(hdr) < attach || !op.Valid() {
		ctl.M, ctl.D, ctl.R = false, false, false
		return Terminate{Control: ctl.Word(layout), Attached: buf[:0]}
	}
	segLen := binary.BigEndian.Uint16(hdr) - uint16(op.HeaderLen()-ULPDULengthLen)
	a := binary.BigEndian.AppendUint16(buf[:0], segLen)
	a = append(a, hdr[ULPDULengthLen:attach]...)
	return Terminate{Control: ctl.Word(layout), Attached: a}
}

// AppendTerminate appends a complete Terminate FPDU the way siw sends it:
// untagged header with L=1, QN 2, MSN 1, MO 0, then t, pad and CRC (zero
// when withCRC is false).
func AppendTerminate(b []byte, t *Terminate, withCRC bool) ([]byte, error) {
	f := FPDU{Header: Header{Last: true, Opcode: OpTerminate, MSN: 1}, Terminate: *t}
	return f.Append(b, withCRC)
}
