// Package wire is the codec of rdmanet's control message, the small Send
// each side posts to announce data, return ring space and credits, and
// resize its receive ring. It only parses and appends bytes: what a message
// may say given the connection's state is checked by the connection.
//
// A control message is a 24-byte header, big-endian, then the extensions
// its flags announce (in this order), then up to the slot's remaining
// bytes of inline stream data:
//
//	offset size field
//	0      8    prod    bytes the sender has written into the receiver's ring, in all
//	8      8    cons    bytes the sender has consumed from its own ring
//	16     2    grant   control receives the sender re-posted since its last message
//	18     1    flags   FlagFIN, FlagOffer, FlagSwitch
//	19     1    inline  length L of the stream data after the extensions
//	20     4    seq     the message's number (low 32 bits), to catch loss or reordering
//
// Extensions:
//
//	FlagOffer  (16 bytes)  the sender's new receive ring: address 8, STag/rkey 4, size 4
//	FlagSwitch (8 bytes)   the position from which the sender writes into the ring
//	                       the receiver offered last
//
// The inline data are the stream bytes [prod−L, prod).
//
// A message is at most SlotSize bytes: the size of every control receive
// buffer. FlagOffer and FlagSwitch exist only between peers whose Hellos
// both set the ring-resize capability; a message with a flag this package
// does not know is malformed.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of the control message.
const (
	// HeaderLen is the fixed header.
	HeaderLen = 24
	// SlotSize is the largest control message, and the size of each
	// control receive buffer (protocol version 1).
	SlotSize = 256
	// OfferLen and SwitchLen are the extensions' sizes.
	OfferLen  = 16
	SwitchLen = 8
	// MaxInline is the most inline data a message without extensions
	// can carry.
	MaxInline = SlotSize - HeaderLen
)

// Flags of the control message.
const (
	// FlagFIN: the sender will write no more; prod is final.
	FlagFIN uint8 = 1 << 0
	// FlagOffer: an Offer extension follows.
	FlagOffer uint8 = 1 << 1
	// FlagSwitch: a Switch extension follows.
	FlagSwitch uint8 = 1 << 2

	knownFlags = FlagFIN | FlagOffer | FlagSwitch
)

// Offer describes a receive ring its owner offers the writer in place of
// the current one.
type Offer struct {
	Addr uint64 // the RDMA address of byte 0
	Key  uint32 // STag / rkey
	Size uint32 // bytes
}

// Control is one decoded control message.
type Control struct {
	Prod, Cons uint64
	Grant      uint16
	// Flags holds FlagFIN; FlagOffer and FlagSwitch are set by Append
	// from HasOffer and HasSwitch, and reported by Parse through them.
	Flags uint8
	Seq   uint32
	// Offer is valid when Flags has FlagOffer.
	Offer Offer
	// Switch is valid when Flags has FlagSwitch.
	Switch uint64
	// Inline is the stream data carried in the message. Parse returns
	// a slice of its input, not a copy.
	Inline []byte
}

// HasOffer and HasSwitch report the extensions present.
func (m *Control) HasOffer() bool  { return m.Flags&FlagOffer != 0 }
func (m *Control) HasSwitch() bool { return m.Flags&FlagSwitch != 0 }

// FIN reports FlagFIN.
func (m *Control) FIN() bool { return m.Flags&FlagFIN != 0 }

// Len is the encoded length of m.
func (m *Control) Len() int { return HeaderLen + extLen(m.Flags) + len(m.Inline) }

// InlineRoom is how much inline data a message with these flags can carry.
func InlineRoom(flags uint8) int { return SlotSize - HeaderLen - extLen(flags) }

func extLen(flags uint8) int {
	n := 0
	if flags&FlagOffer != 0 {
		n += OfferLen
	}
	if flags&FlagSwitch != 0 {
		n += SwitchLen
	}
	return n
}

// ErrTooLong is returned by Append for a message that does not fit a slot.
var ErrTooLong = errors.New("wire: control message longer than a slot")

// Append appends m's encoding to b. It fails, appending nothing, when m
// does not fit in SlotSize bytes or has a flag this package does not know.
// Appending to a slice with enough capacity does not allocate, so a
// sender can encode straight into a registered send slot.
func Append(b []byte, m *Control) ([]byte, error) {
	if m.Flags&^knownFlags != 0 {
		return b, fmt.Errorf("wire: unknown flags %#02x", m.Flags&^knownFlags)
	}
	if m.Len() > SlotSize {
		return b, ErrTooLong
	}
	b = binary.BigEndian.AppendUint64(b, m.Prod)
	b = binary.BigEndian.AppendUint64(b, m.Cons)
	b = binary.BigEndian.AppendUint16(b, m.Grant)
	b = append(b, m.Flags, uint8(len(m.Inline)))
	b = binary.BigEndian.AppendUint32(b, m.Seq)
	if m.HasOffer() {
		b = binary.BigEndian.AppendUint64(b, m.Offer.Addr)
		b = binary.BigEndian.AppendUint32(b, m.Offer.Key)
		b = binary.BigEndian.AppendUint32(b, m.Offer.Size)
	}
	if m.HasSwitch() {
		b = binary.BigEndian.AppendUint64(b, m.Switch)
	}
	return append(b, m.Inline...), nil
}

// Parse decodes a control message received in full (b is exactly the
// bytes the Send carried). It checks the encoding only: lengths, flags and
// that the inline data do not start before position 0.
func Parse(b []byte) (Control, error) {
	if len(b) < HeaderLen {
		return Control{}, fmt.Errorf("wire: control message of %d bytes, shorter than its %d-byte header", len(b), HeaderLen)
	}
	if len(b) > SlotSize {
		return Control{}, fmt.Errorf("wire: control message of %d bytes, longer than a %d-byte slot", len(b), SlotSize)
	}
	m := Control{
		Prod:  binary.BigEndian.Uint64(b[0:]),
		Cons:  binary.BigEndian.Uint64(b[8:]),
		Grant: binary.BigEndian.Uint16(b[16:]),
		Flags: b[18],
		Seq:   binary.BigEndian.Uint32(b[20:]),
	}
	inline := int(b[19])
	if m.Flags&^knownFlags != 0 {
		return Control{}, fmt.Errorf("wire: control message with unknown flags %#02x", m.Flags&^knownFlags)
	}
	if want := HeaderLen + extLen(m.Flags) + inline; len(b) != want {
		return Control{}, fmt.Errorf("wire: control message of %d bytes, its header announces %d", len(b), want)
	}
	p := b[HeaderLen:]
	if m.HasOffer() {
		m.Offer = Offer{
			Addr: binary.BigEndian.Uint64(p),
			Key:  binary.BigEndian.Uint32(p[8:]),
			Size: binary.BigEndian.Uint32(p[12:]),
		}
		p = p[OfferLen:]
	}
	if m.HasSwitch() {
		m.Switch = binary.BigEndian.Uint64(p)
		p = p[SwitchLen:]
	}
	if uint64(inline) > m.Prod {
		return Control{}, fmt.Errorf("wire: %d inline bytes end at position %d", inline, m.Prod)
	}
	if inline > 0 {
		m.Inline = p[:inline:inline]
	}
	return m, nil
}
