package wire

import "encoding/binary"

// MPA v2 (RFC 6581) block constants.
const (
	// MPAv2Len is the size of the IRD/ORD block that opens the private
	// data of an enhanced (E flag) Request or Reply.
	MPAv2Len = 4
	// MaxIRDORD is the largest IRD or ORD the 14-bit fields can carry.
	MaxIRDORD = 0x3FFF
	// NoIRDORD is the value irdma uses for "no IRD/ORD given" (all ones).
	NoIRDORD = 0x3FFF
)

// Bits of the two 16-bit words of the v2 block (siw enum mpa_v2_ctrl).
const (
	v2PeerToPeer    = 0x8000 // A, IRD word
	v2ZeroLengthRTR = 0x4000 // B, IRD word
	v2WriteRTR      = 0x8000 // C, ORD word
	v2ReadRTR       = 0x4000 // D, ORD word
)

// MPAv2 is the RFC 6581 IRD/ORD block with the peer-to-peer (RTR) control
// bits. Every one of its 32 bits is a field, so it always round-trips.
type MPAv2 struct {
	// PeerToPeer (A): the sender wants (Request) or agrees to (Reply) the
	// peer-to-peer startup where the initiator sends a ready-to-receive
	// (RTR) frame first.
	PeerToPeer bool
	// ZeroLengthRTR (B): a zero-length Send may be the RTR. siw never
	// picks it (it would need a posted Receive).
	ZeroLengthRTR bool
	// IRD is the sender's inbound RDMA Read queue depth (14 bits).
	IRD uint16
	// WriteRTR (C): a zero-length RDMA Write may be the RTR; siw's choice
	// when offered.
	WriteRTR bool
	// ReadRTR (D): a zero-length RDMA Read may be the RTR.
	ReadRTR bool
	// ORD is the sender's outbound RDMA Read depth (14 bits).
	ORD uint16
}

// Parse decodes the 4-byte block at the start of b.
func (v *MPAv2) Parse(b []byte) error {
	if len(b) < MPAv2Len {
		return ErrShortBuffer
	}
	ird := binary.BigEndian.Uint16(b)
	ord := binary.BigEndian.Uint16(b[2:])
	*v = MPAv2{
		PeerToPeer:    ird&v2PeerToPeer != 0,
		ZeroLengthRTR: ird&v2ZeroLengthRTR != 0,
		IRD:           ird & MaxIRDORD,
		WriteRTR:      ord&v2WriteRTR != 0,
		ReadRTR:       ord&v2ReadRTR != 0,
		ORD:           ord & MaxIRDORD,
	}
	return nil
}

// Append appends the 4-byte block. IRD or ORD above MaxIRDORD is an error
// rather than silently truncated, since truncation would advertise a
// different depth than the caller configured.
func (v *MPAv2) Append(b []byte) ([]byte, error) {
	if v.IRD > MaxIRDORD || v.ORD > MaxIRDORD {
		return b, ErrIRDORDRange
	}
	ird, ord := v.IRD, v.ORD
	if v.PeerToPeer {
		ird |= v2PeerToPeer
	}
	if v.ZeroLengthRTR {
		ird |= v2ZeroLengthRTR
	}
	if v.WriteRTR {
		ord |= v2WriteRTR
	}
	if v.ReadRTR {
		ord |= v2ReadRTR
	}
	b = binary.BigEndian.AppendUint16(b, ird)
	return binary.BigEndian.AppendUint16(b, ord), nil
}
