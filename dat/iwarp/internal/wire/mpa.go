package wire

import (
	"encoding/binary"
	"time"
)

// MPA Request/Reply frame sizes and limits (RFC 5044 §7.1.1; siw iwarp.h).
const (
	// MPAKeyLen is the size of the ASCII key that opens the frame.
	MPAKeyLen = 16
	// MPAHeaderLen is key + flags + revision + PD_Length. A reader reads
	// exactly this much first, parses it with MPAHeader.Parse to learn
	// PD_Length, then reads exactly PD_Length more: siw refuses a frame
	// followed by any extra byte ("no trailing bytes"), so a reader must
	// never read ahead into FPDUs either.
	MPAHeaderLen = MPAKeyLen + 4

	// MaxPrivateDataRFC is RFC 5044's limit on PD_Length.
	MaxPrivateDataRFC = 512
	// MaxPrivateDataSiw is siw's limit on PD_Length (MPA_MAX_PRIVDATA =
	// RDMA_MAX_PRIVATE_DATA), MPA v2 block included. Larger frames make
	// siw fail the handshake with EPROTO.
	MaxPrivateDataSiw = 256
	// MaxConsumerPrivateDataSiw is what is left for the consumer's private
	// data in an MPA v2 frame to or from siw.
	MaxConsumerPrivateDataSiw = MaxPrivateDataSiw - MPAv2Len

	// MaxMPARevision is the highest revision accepted (siw accepts 0, 1, 2).
	MaxMPARevision = 2
	// MPARevision1 is RFC 5044 MPA; MPARevision2 is RFC 6581 MPA v2, the
	// only revision that may carry MPAFlagEnhanced.
	MPARevision1 = 1
	MPARevision2 = 2
)

// siw-compatible MPA handshake timeouts (siw_cm.h MPAREQ_TIMEOUT and
// MPAREP_TIMEOUT; note siw's names are the other way round).
const (
	// SiwMPARequestTimeout is how long a siw responder waits, after TCP
	// accept, for the MPA Request before dropping the connection silently.
	SiwMPARequestTimeout = 5 * time.Second
	// SiwMPAReplyTimeout is how long a siw initiator waits for the MPA
	// Reply after sending its Request before failing with ETIMEDOUT.
	SiwMPAReplyTimeout = 10 * time.Second
)

// MPAKind says whether a frame is a Request or a Reply; the two differ
// only in their key.
type MPAKind uint8

// MPA frame kinds.
const (
	MPARequest MPAKind = 1 // key "MPA ID Req Frame"
	MPAReply   MPAKind = 2 // key "MPA ID Rep Frame"
)

const (
	mpaKeyRequest = "MPA ID Req Frame"
	mpaKeyReply   = "MPA ID Rep Frame"
)

// Key is the 16-byte ASCII key that opens a frame of kind k ("" for an
// invalid kind). A reader can tell a peer that does not speak MPA from the
// first byte that differs from it.
func (k MPAKind) Key() string {
	key, _ := k.key()
	return key
}

func (k MPAKind) key() (string, bool) {
	switch k {
	case MPARequest:
		return mpaKeyRequest, true
	case MPAReply:
		return mpaKeyReply, true
	}
	return "", false
}

// MPAFlags is the flags byte of an MPA frame (byte 16).
type MPAFlags uint8

// MPA flags (siw MPA_RR_FLAG_*, upper byte of its 16-bit params word).
const (
	// MPAFlagMarkers: the sender wants markers in the FPDUs it receives.
	// siw does not support markers and rejects such a Request.
	MPAFlagMarkers MPAFlags = 0x80
	// MPAFlagCRC: the sender wants FPDU CRCs.
	MPAFlagCRC MPAFlags = 0x40
	// MPAFlagReject: the Reply rejects the connection.
	MPAFlagReject MPAFlags = 0x20
	// MPAFlagEnhanced: RFC 6581 enhanced connection establishment; the
	// private data starts with the MPAv2 block. Requires revision 2.
	MPAFlagEnhanced MPAFlags = 0x10
	// MPAFlagsReserved are the low four bits: sent as zero (siw's
	// experimental GSO bit 0x08 is never set by default builds), kept as
	// received so frames round-trip.
	MPAFlagsReserved MPAFlags = 0x0F
)

// MPAHeader is the fixed 20-byte part of an MPA Request or Reply.
type MPAHeader struct {
	Kind     MPAKind
	Flags    MPAFlags
	Revision uint8
	// PDLength is PD_Length: the private data bytes that follow, MPAv2
	// block included. MPAFrame.Append computes it.
	PDLength uint16
}

// Enhanced reports whether the frame uses MPA v2 enhanced connection
// establishment (E flag); Parse guarantees Revision 2 and PDLength >= 4
// then.
func (h *MPAHeader) Enhanced() bool { return h.Flags&MPAFlagEnhanced != 0 }

// Parse decodes the first MPAHeaderLen bytes of b as a frame of the given
// kind and validates it the way siw does, in siw's order: PD_Length against
// maxPD (use MaxPrivateDataSiw for siw behaviour; values above
// MaxPrivateDataRFC act as MaxPrivateDataRFC), revision <= 2, key; and
// additionally that the E flag
// comes with revision 2 and at least 4 bytes of private data. Flag policy
// (markers, CRC, reject) is left to the caller.
func (h *MPAHeader) Parse(b []byte, kind MPAKind, maxPD int) error {
	key, ok := kind.key()
	if !ok {
		return ErrMPAKind
	}
	if len(b) < MPAHeaderLen {
		return ErrShortBuffer
	}
	pd := binary.BigEndian.Uint16(b[18:])
	if int(pd) > min(maxPD, MaxPrivateDataRFC) {
		return ErrMPAPrivateDataTooLong
	}
	rev := b[17]
	if rev > MaxMPARevision {
		return ErrMPARevision
	}
	if string(b[:MPAKeyLen]) != key {
		return ErrMPAKey
	}
	flags := MPAFlags(b[16])
	if flags&MPAFlagEnhanced != 0 {
		if rev != MPARevision2 {
			return ErrMPAEnhancedRevision
		}
		if pd < MPAv2Len {
			return ErrMPAEnhancedPrivateData
		}
	}
	*h = MPAHeader{Kind: kind, Flags: flags, Revision: rev, PDLength: pd}
	return nil
}

// appendHeader writes the header with the given PD_Length.
func (h *MPAHeader) appendHeader(b []byte, pdLen int) ([]byte, error) {
	key, ok := h.Kind.key()
	if !ok {
		return b, ErrMPAKind
	}
	if h.Revision > MaxMPARevision {
		return b, ErrMPARevision
	}
	if h.Enhanced() {
		if h.Revision != MPARevision2 {
			return b, ErrMPAEnhancedRevision
		}
		if pdLen < MPAv2Len {
			return b, ErrMPAEnhancedPrivateData
		}
	}
	if pdLen > MaxPrivateDataRFC {
		return b, ErrMPAPrivateDataTooLong
	}
	b = append(b, key...)
	b = append(b, byte(h.Flags), h.Revision)
	return binary.BigEndian.AppendUint16(b, uint16(pdLen)), nil
}

// Append appends the 20-byte header as is, PDLength included; the caller
// then appends exactly PDLength bytes of private data. MPAFrame.Append is
// the safer whole-frame form.
func (h *MPAHeader) Append(b []byte) ([]byte, error) { return h.appendHeader(b, int(h.PDLength)) }

// MPAFrame is a whole MPA Request or Reply.
type MPAFrame struct {
	Header MPAHeader
	// V2 is the MPA v2 IRD/ORD block, present on the wire iff
	// Header.Enhanced().
	V2 MPAv2
	// PrivateData is the consumer's private data (after the v2 block).
	// Parse aliases the input.
	PrivateData []byte
}

// Len returns the frame size on the wire.
func (f *MPAFrame) Len() int { return MPAHeaderLen + f.pdLen() }

func (f *MPAFrame) pdLen() int {
	if f.Header.Enhanced() {
		return MPAv2Len + len(f.PrivateData)
	}
	return len(f.PrivateData)
}

// ParsePrivateData completes a frame whose Header was parsed first: pd must
// be exactly the Header.PDLength bytes that followed the header.
func (f *MPAFrame) ParsePrivateData(pd []byte) error {
	if len(pd) != int(f.Header.PDLength) {
		return ErrShortBuffer
	}
	f.V2 = MPAv2{}
	if f.Header.Enhanced() {
		if err := f.V2.Parse(pd); err != nil {
			return err
		}
		pd = pd[MPAv2Len:]
	}
	f.PrivateData = pd
	return nil
}

// Parse decodes a whole frame from the start of b (see MPAHeader.Parse for
// the checks) and returns its size. Bytes after the frame are not looked
// at; whether they may exist is the reader's business (siw: they may not).
func (f *MPAFrame) Parse(b []byte, kind MPAKind, maxPD int) (int, error) {
	if err := f.Header.Parse(b, kind, maxPD); err != nil {
		return 0, err
	}
	n := MPAHeaderLen + int(f.Header.PDLength)
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	if err := f.ParsePrivateData(b[MPAHeaderLen:n]); err != nil {
		return 0, err
	}
	return n, nil
}

// Append appends the whole frame. PD_Length is computed from V2 (if
// Header.Enhanced()) and PrivateData; Header.PDLength is ignored. It
// refuses frames no conforming peer would accept: bad kind or revision, E
// without revision 2, IRD/ORD over 14 bits, more than MaxPrivateDataRFC
// bytes. Keeping within MaxPrivateDataSiw is the caller's job.
func (f *MPAFrame) Append(b []byte) ([]byte, error) {
	start := len(b)
	b, err := f.Header.appendHeader(b, f.pdLen())
	if err != nil {
		return b[:start], err
	}
	if f.Header.Enhanced() {
		if b, err = f.V2.Append(b); err != nil {
			return b[:start], err
		}
	}
	return append(b, f.PrivateData...), nil
}
