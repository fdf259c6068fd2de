package wire

import "fmt"

// A data announcement can also travel as the 32-bit immediate value of an
// RDMA Write with Immediate, on transports that have it (InfiniBand, RoCE;
// not iWARP) and between peers whose Hellos both set the capability. The
// Write that carries it is the last of the data it announces, so one work
// request does what a Write and a control Send would. It consumes one of
// the receiver's control receives, exactly as a control message does, and
// counts as one in the control sequence and the credit scheme.
//
// The value, as the receiver reads it in host order:
//
//	bits  field
//	31-30 kind     ImmKindData (01); the other kinds are malformed
//	29-22 grant    control receives the sender re-posted since its last message
//	21-0  advance  bytes the announcement adds to prod
//
// An immediate announcement carries nothing else: a message that must say
// more (consumption, FIN, an offer, a switch, the first message, a grant
// above MaxImmGrant, an advance above MaxImmAdvance) is a control Send.
// Zero is not a valid value, so a Write with Immediate whose value was
// never set is caught.

// Limits of the immediate encoding.
const (
	// ImmKindData is the only kind defined: a data announcement.
	ImmKindData = 1
	// MaxImmGrant is the largest grant an immediate value carries.
	MaxImmGrant = 1<<8 - 1
	// MaxImmAdvance is the largest advance an immediate value carries.
	MaxImmAdvance = 1<<22 - 1

	immKindShift  = 30
	immGrantShift = 22
)

// Imm is a decoded immediate data announcement.
type Imm struct {
	// Grant returns credits, as Control.Grant does.
	Grant uint16
	// Advance is how far the announcement moves the sender's producer
	// position: prod becomes the previous prod plus Advance.
	Advance uint32
}

// AppendImm encodes m as an immediate value. It fails when a field does
// not fit: the sender then announces with a control message.
func AppendImm(m Imm) (uint32, error) {
	if m.Grant > MaxImmGrant {
		return 0, fmt.Errorf("wire: grant %d does not fit an immediate value (at most %d)", m.Grant, MaxImmGrant)
	}
	if m.Advance > MaxImmAdvance {
		return 0, fmt.Errorf("wire: advance %d does not fit an immediate value (at most %d)", m.Advance, MaxImmAdvance)
	}
	return ImmKindData<<immKindShift | uint32(m.Grant)<<immGrantShift | m.Advance, nil
}

// ParseImm decodes an immediate value. It checks the encoding only; what
// the announcement may say given the connection's state (ring space,
// credits) is the connection's to check.
func ParseImm(v uint32) (Imm, error) {
	if k := v >> immKindShift; k != ImmKindData {
		return Imm{}, fmt.Errorf("wire: immediate value %#08x of unknown kind %d", v, k)
	}
	return Imm{
		Grant:   uint16(v >> immGrantShift & MaxImmGrant),
		Advance: v & MaxImmAdvance,
	}, nil
}
