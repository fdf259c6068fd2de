// Package handshake is rdmanet's connection handshake codec: the Hello each
// side puts in the connection's private data, and the reject payload a
// server answers a bad Hello with. It only parses and appends bytes.
//
// Everything fits in 56 bytes, the private data an InfiniBand CM REQ
// carries, so the same handshake works on iWARP (252 bytes), RoCE and IB.
// Integers are big-endian (network order).
//
// Hello, version 1 (24 bytes):
//
//	offset size field
//	0      4    magic "RDNT" (0x52444E54)
//	4      1    version (1)
//	5      1    flags: FlagRingResize, FlagWriteImm; receivers ignore flags they
//	            do not know
//	6      2    initial credits: control receives the sender has posted
//	8      8    receive ring address (the RDMA tagged offset of byte 0)
//	16     4    receive ring STag / rkey
//	20     4    receive ring size in bytes
//
// Bytes after offset 24, up to 56, are ignored: a later revision of version
// 1 may append fields that older peers can skip. Anything that changes the
// meaning of the first 24 bytes is a new version.
//
// Reject (8 bytes):
//
//	0      4    magic
//	4      1    reject format (1)
//	5      1    reason (Reason)
//	6      1    the version the rejecting side speaks
//	7      1    the version it was offered (0 if it could not tell)
package handshake

import (
	"encoding/binary"
	"fmt"
)

// Sizes and constants of the wire format.
const (
	Magic uint32 = 0x52444E54 // "RDNT"
	// Version is the protocol version this package speaks.
	Version uint8 = 1
	// MaxLen bounds every handshake payload: the IB CM REQ private data.
	MaxLen = 56
	// HelloLen is the length of a version 1 Hello.
	HelloLen = 24
	// RejectLen is the length of a reject payload.
	RejectLen = 8

	rejectFormat = 1

	// MinRingSize and MaxRingSize bound the ring a Hello may announce.
	MinRingSize = 4096
	MaxRingSize = 1 << 30
	// MinCredits is the fewest control receives a side may post: the
	// control channel's deadlock argument needs two. MaxCredits keeps a
	// peer from claiming more than any QP can hold.
	MinCredits = 2
	MaxCredits = 4096
)

// Flags of a Hello: capabilities the sender has, which peers of an earlier
// revision of version 1 do not set and ignore.
const (
	// FlagRingResize: the sender understands ring offers and switches
	// in control messages (wire.FlagOffer, wire.FlagSwitch), so its
	// peer may offer it a new ring to write into.
	FlagRingResize uint8 = 1 << 0
	// FlagWriteImm: the sender's transport has RDMA Write with Immediate
	// and it understands data announcements carried as immediate values
	// (wire.Imm). Peers use them only when both Hellos set it.
	FlagWriteImm uint8 = 1 << 1
)

// Hello is one side's half of the handshake: where the peer may RDMA-write
// and how many control messages it may send before hearing back.
type Hello struct {
	Version  uint8
	Flags    uint8
	Credits  uint16
	RingAddr uint64
	RingKey  uint32
	RingSize uint32
}

// AppendHello appends h's encoding to b. h.Version is written as given, so
// tests can produce Hellos of other versions.
func AppendHello(b []byte, h Hello) []byte {
	b = binary.BigEndian.AppendUint32(b, Magic)
	b = append(b, h.Version, h.Flags)
	b = binary.BigEndian.AppendUint16(b, h.Credits)
	b = binary.BigEndian.AppendUint64(b, h.RingAddr)
	b = binary.BigEndian.AppendUint32(b, h.RingKey)
	return binary.BigEndian.AppendUint32(b, h.RingSize)
}

// ParseHello decodes a Hello of this package's version. Failures are an
// *Error whose Reason says how to reject it.
func ParseHello(b []byte) (Hello, error) {
	if len(b) > MaxLen {
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("%d bytes, more than %d", len(b), MaxLen)}
	}
	if len(b) < 5 {
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("%d bytes, too short for a header", len(b))}
	}
	if m := binary.BigEndian.Uint32(b); m != Magic {
		return Hello{}, &Error{Reason: ReasonBadMagic, Detail: fmt.Sprintf("magic %#08x", m)}
	}
	if v := b[4]; v != Version {
		return Hello{}, &Error{Reason: ReasonVersion, Offered: v, Speaks: Version}
	}
	if len(b) < HelloLen {
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("%d bytes, a version %d Hello has %d", len(b), Version, HelloLen)}
	}
	h := Hello{
		Version:  b[4],
		Flags:    b[5],
		Credits:  binary.BigEndian.Uint16(b[6:]),
		RingAddr: binary.BigEndian.Uint64(b[8:]),
		RingKey:  binary.BigEndian.Uint32(b[16:]),
		RingSize: binary.BigEndian.Uint32(b[20:]),
	}
	switch {
	case h.Credits < MinCredits || h.Credits > MaxCredits:
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("%d initial credits, not in %d..%d", h.Credits, MinCredits, MaxCredits)}
	case h.RingSize < MinRingSize || h.RingSize > MaxRingSize:
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: fmt.Sprintf("ring size %d, not in %d..%d", h.RingSize, MinRingSize, MaxRingSize)}
	case h.RingAddr+uint64(h.RingSize) < h.RingAddr:
		return Hello{}, &Error{Reason: ReasonMalformed, Detail: "ring wraps the address space"}
	}
	return h, nil
}

// Reason says why a handshake was refused.
type Reason uint8

// Reasons. The values are on the wire.
const (
	ReasonBadMagic  Reason = 1 // not an rdmanet peer
	ReasonVersion   Reason = 2 // a version the rejecting side does not speak
	ReasonMalformed Reason = 3 // an rdmanet Hello that does not parse
	ReasonResources Reason = 4 // the server could not set the connection up
)

// String names the reason as the dialer's error shows it.
func (r Reason) String() string {
	switch r {
	case ReasonBadMagic:
		return "bad magic"
	case ReasonVersion:
		return "unsupported version"
	case ReasonMalformed:
		return "malformed hello"
	case ReasonResources:
		return "server out of resources"
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// Reject is the payload of a refused handshake.
type Reject struct {
	Reason Reason
	// Speaks is the version of the rejecting side; Offered the version it
	// was sent (0 when unknown).
	Speaks, Offered uint8
}

// AppendReject appends r's encoding to b.
func AppendReject(b []byte, r Reject) []byte {
	b = binary.BigEndian.AppendUint32(b, Magic)
	return append(b, rejectFormat, byte(r.Reason), r.Speaks, r.Offered)
}

// ParseReject decodes a reject payload. ok is false for anything that is
// not one (a reject by some other software, or an empty one).
func ParseReject(b []byte) (r Reject, ok bool) {
	if len(b) < RejectLen || len(b) > MaxLen || binary.BigEndian.Uint32(b) != Magic || b[4] != rejectFormat {
		return Reject{}, false
	}
	return Reject{Reason: Reason(b[5]), Speaks: b[6], Offered: b[7]}, true
}

// RejectFor turns a ParseHello error into the payload that answers it.
func RejectFor(err error) Reject {
	if e, ok := err.(*Error); ok {
		return Reject{Reason: e.Reason, Speaks: Version, Offered: e.Offered}
	}
	return Reject{Reason: ReasonMalformed, Speaks: Version}
}

// Error is a handshake failure: a Hello that did not parse, or the peer's
// reject of ours.
type Error struct {
	Reason Reason
	// Offered and Speaks are the versions involved in ReasonVersion.
	Offered, Speaks uint8
	Detail          string
}

// Error describes the failure, e.g. "unsupported version 9 (server speaks 1)".
func (e *Error) Error() string {
	switch {
	case e.Reason == ReasonVersion:
		return fmt.Sprintf("unsupported version %d (server speaks %d)", e.Offered, e.Speaks)
	case e.Detail != "":
		return e.Reason.String() + ": " + e.Detail
	}
	return e.Reason.String()
}

// Err turns a received reject into the error the dialer reports.
func (r Reject) Err() *Error {
	return &Error{Reason: r.Reason, Offered: r.Offered, Speaks: r.Speaks}
}
