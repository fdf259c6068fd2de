package wire

import "encoding/binary"

// FPDU framing constants (RFC 5044 §4; siw MPA_HDR_SIZE, MPA_CRC_SIZE).
const (
	// ULPDULengthLen is the size of the FPDU's leading ULPDU_Length field.
	ULPDULengthLen = 2
	// CRCLen is the size of the CRC field. It is present even when CRC is
	// not negotiated; siw then sends zero and ignores it on receive.
	CRCLen = 4
	// MaxULPDULength is the largest ULPDU one FPDU can carry.
	MaxULPDULength = 65535
	// MaxFPDULen is the largest FPDU a receiver must accept:
	// 2 + 65535 + 3 pad + 4 CRC.
	MaxFPDULen = ULPDULengthLen + MaxULPDULength + 3 + CRCLen
	// MinFPDULen is the smallest valid FPDU: a zero-length RDMA Write or
	// Read Response (16-byte header) plus CRC.
	MinFPDULen = TaggedHeaderLen + CRCLen
)

// PadLen returns the number of zero pad bytes after a ULPDU of the given
// length, so that ULPDU_Length field + ULPDU + pad is a multiple of 4.
func PadLen(ulpduLen int) int { return -(ULPDULengthLen + ulpduLen) & 3 }

// TrailerLen returns pad + CRC bytes that follow a ULPDU of the given
// length: what a reader must read after the payload to finish the FPDU.
func TrailerLen(ulpduLen int) int { return PadLen(ulpduLen) + CRCLen }

// FPDULen returns the total on-wire size of an FPDU with the given
// ULPDU_Length.
func FPDULen(ulpduLen int) int { return ULPDULengthLen + ulpduLen + TrailerLen(ulpduLen) }

// ParseULPDULength returns the ULPDU_Length field at the start of b.
func ParseULPDULength(b []byte) (int, error) {
	if len(b) < ULPDULengthLen {
		return 0, ErrShortBuffer
	}
	return int(binary.BigEndian.Uint16(b)), nil
}

var zeroPad [3]byte

// AppendTrailer appends the pad and CRC trailer of an FPDU whose
// ULPDU_Length is ulpduLen. crc must cover the ULPDU_Length field and the
// ULPDU; the pad is added to it here. With withCRC false the CRC field is
// zero, as siw sends it.
func AppendTrailer(b []byte, ulpduLen int, crc CRC, withCRC bool) []byte {
	pad := zeroPad[:PadLen(ulpduLen)]
	b = append(b, pad...)
	if !withCRC {
		return append(b, 0, 0, 0, 0)
	}
	// siw emits the CRC-32C little-endian (put_unaligned_le32 of the
	// finished value); the worked examples and RFC 5044 agree.
	return binary.LittleEndian.AppendUint32(b, crc.Update(pad).Sum32())
}

// AppendFPDUTrailer appends the trailer for the FPDU made of head (which
// starts with the ULPDU_Length field, e.g. the output of Header.Append)
// followed by payload. The two pieces need not be contiguous, so the
// sender can hand net.Buffers{head, payload, trailer} to the socket and
// never copy the payload. If head already holds the whole FPDU body, pass
// a nil payload.
func AppendFPDUTrailer(b []byte, head, payload []byte, withCRC bool) []byte {
	ulpduLen := len(head) - ULPDULengthLen + len(payload)
	var crc CRC
	if withCRC {
		crc = crc.Update(head).Update(payload)
	}
	return AppendTrailer(b, ulpduLen, crc, withCRC)
}

// CheckTrailer verifies the trailer (pad + CRC, exactly TrailerLen(ulpduLen)
// bytes) of a received FPDU. crc must cover the ULPDU_Length field and the
// ULPDU as received. With withCRC false the CRC field and the pad are
// ignored, as siw ignores them; pad contents are never checked because siw
// does not check them either (they are covered by the CRC when it is on).
func CheckTrailer(trailer []byte, ulpduLen int, crc CRC, withCRC bool) error {
	pad := PadLen(ulpduLen)
	if len(trailer) != pad+CRCLen {
		return ErrTrailerLength
	}
	if !withCRC {
		return nil
	}
	if crc.Update(trailer[:pad]).Sum32() != binary.LittleEndian.Uint32(trailer[pad:]) {
		return ErrCRC
	}
	return nil
}
