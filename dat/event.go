package dat

import (
	"fmt"
	"net"
)

// EventNumber identifies the kind of an event (DAT_EVENT_NUMBER).
type EventNumber uint32

// Event numbers.
const (
	DTOCompletionEvent                 EventNumber = 0x00001
	RMRBindCompletionEvent             EventNumber = 0x01001
	ConnectionRequestEvent             EventNumber = 0x02001
	ConnectionEventEstablished         EventNumber = 0x04001
	ConnectionEventPeerRejected        EventNumber = 0x04002
	ConnectionEventNonPeerRejected     EventNumber = 0x04003
	ConnectionEventAcceptCompletionErr EventNumber = 0x04004
	ConnectionEventDisconnected        EventNumber = 0x04005
	ConnectionEventBroken              EventNumber = 0x04006
	ConnectionEventTimedOut            EventNumber = 0x04007
	ConnectionEventUnreachable         EventNumber = 0x04008
	AsyncErrorEVDOverflow              EventNumber = 0x08001
	AsyncErrorIACatastrophic           EventNumber = 0x08002
	AsyncErrorEPBroken                 EventNumber = 0x08003
	AsyncErrorTimedOut                 EventNumber = 0x08004
	AsyncErrorProviderInternalError    EventNumber = 0x08005
	SoftwareEvent                      EventNumber = 0x10001
)

var eventNames = map[EventNumber]string{
	DTOCompletionEvent:                 "DAT_DTO_COMPLETION_EVENT",
	RMRBindCompletionEvent:             "DAT_RMR_BIND_COMPLETION_EVENT",
	ConnectionRequestEvent:             "DAT_CONNECTION_REQUEST_EVENT",
	ConnectionEventEstablished:         "DAT_CONNECTION_EVENT_ESTABLISHED",
	ConnectionEventPeerRejected:        "DAT_CONNECTION_EVENT_PEER_REJECTED",
	ConnectionEventNonPeerRejected:     "DAT_CONNECTION_EVENT_NON_PEER_REJECTED",
	ConnectionEventAcceptCompletionErr: "DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR",
	ConnectionEventDisconnected:        "DAT_CONNECTION_EVENT_DISCONNECTED",
	ConnectionEventBroken:              "DAT_CONNECTION_EVENT_BROKEN",
	ConnectionEventTimedOut:            "DAT_CONNECTION_EVENT_TIMED_OUT",
	ConnectionEventUnreachable:         "DAT_CONNECTION_EVENT_UNREACHABLE",
	AsyncErrorEVDOverflow:              "DAT_ASYNC_ERROR_EVD_OVERFLOW",
	AsyncErrorIACatastrophic:           "DAT_ASYNC_ERROR_IA_CATASTROPHIC",
	AsyncErrorEPBroken:                 "DAT_ASYNC_ERROR_EP_BROKEN",
	AsyncErrorTimedOut:                 "DAT_ASYNC_ERROR_TIMED_OUT",
	AsyncErrorProviderInternalError:    "DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR",
	SoftwareEvent:                      "DAT_SOFTWARE_EVENT",
}

func (n EventNumber) String() string {
	if s, ok := eventNames[n]; ok {
		return s
	}
	return fmt.Sprintf("EventNumber(%#x)", uint32(n))
}

// stream reports which EVD flag an event needs on the EVD it is posted to.
func (n EventNumber) stream() EVDFlags {
	switch {
	case n == DTOCompletionEvent:
		return EVDDTO
	case n == RMRBindCompletionEvent:
		return EVDRMRBind
	case n == ConnectionRequestEvent:
		return EVDCR
	case n >= ConnectionEventEstablished && n <= ConnectionEventUnreachable:
		return EVDConnection
	case n >= AsyncErrorEVDOverflow && n <= AsyncErrorProviderInternalError:
		return EVDAsync
	case n == SoftwareEvent:
		return EVDSoftware
	}
	return 0
}

// Event is one dequeued event (DAT_EVENT). Number says which of the data
// fields is meaningful.
type Event struct {
	Number EventNumber
	// EVD is the EVD the event was dequeued from.
	EVD *EVD

	// DTO is set for DTOCompletionEvent.
	DTO DTOCompletion
	// RMRBind is set for RMRBindCompletionEvent.
	RMRBind RMRBindCompletion
	// CR is set for ConnectionRequestEvent.
	CR ConnRequestData
	// Conn is set for the ConnectionEvent* numbers.
	Conn ConnectionData
	// Async is set for the AsyncError* numbers.
	Async AsyncData
	// Software is the pointer posted with PostSE, for SoftwareEvent.
	Software any
}

func (e Event) String() string { return e.Number.String() }

// DTOOp is the operation a DTO completion reports (DAT_DTOS).
type DTOOp uint8

// DTO operations.
const (
	DTOSend      DTOOp = 0
	DTORDMAWrite DTOOp = 1
	DTORDMARead  DTOOp = 2
	DTOReceive   DTOOp = 3
	// DTORDMAWriteImm completes EP.PostRDMAWriteImm (the InfiniBand
	// extension's DAT_IB_DTO_RDMA_WRITE_IMMED).
	DTORDMAWriteImm DTOOp = 4
)

// DTOStatus is a DTO completion status (DAT_DTO_COMPLETION_STATUS).
type DTOStatus uint8

// DTO completion statuses.
const (
	DTOSuccess             DTOStatus = 0
	DTOErrFlushed          DTOStatus = 1
	DTOErrLocalLength      DTOStatus = 2
	DTOErrLocalEP          DTOStatus = 3
	DTOErrLocalProtection  DTOStatus = 4
	DTOErrBadResponse      DTOStatus = 5
	DTOErrRemoteAccess     DTOStatus = 6
	DTOErrRemoteResponder  DTOStatus = 7
	DTOErrTransport        DTOStatus = 8
	DTOErrReceiverNotReady DTOStatus = 9
	DTOErrPartialPacket    DTOStatus = 10
	RMROperationFailed     DTOStatus = 11
)

// DTOCompletion is the data of a DTO completion event.
type DTOCompletion struct {
	EP     *EP
	Cookie uint64
	Status DTOStatus
	// Length is the number of bytes transferred; undefined unless Status
	// is DTOSuccess.
	Length uint32
	Op     DTOOp
	// WithImm is set on a successful receive that the peer's RDMA Write
	// with Immediate consumed (EP.PostRDMAWriteImm) rather than a Send:
	// Imm holds the immediate value, Length the Write's length, and the
	// receive's buffer is untouched.
	WithImm bool
	Imm     uint32
}

// ConnRequestData is the data of a connection request event.
type ConnRequestData struct {
	// SP is the PSP the request arrived on, or nil for an RSP (which the
	// request consumed).
	SP *PSP
	// RSP is the RSP the request arrived on, if any.
	RSP *RSP
	// LocalAddr is the local IA address.
	LocalAddr net.Addr
	// Qual is the connection qualifier of the service point.
	Qual ConnQual
	// CR is the pending request, to accept or reject.
	CR *CR
}

// ConnectionData is the data of a connection event.
type ConnectionData struct {
	EP *EP
	// PrivateData is the peer's private data: the accept data on the active
	// side's ESTABLISHED, the reject data on PEER_REJECTED, nil otherwise.
	PrivateData []byte
	// Err describes what went wrong, for the failure events.
	Err error
}

// AsyncData is the data of an asynchronous error event.
type AsyncData struct {
	// Handle is the object the error concerns (*EVD, *EP, *IA or *SRQ).
	Handle any
	// Reason refines the error, for example SRQLowWatermark.
	Reason AsyncReason
}

// AsyncReason refines an asynchronous event.
type AsyncReason int

// Async reasons used by this implementation.
const (
	ReasonOther AsyncReason = iota
	// SRQLowWatermark: an SRQ's posted receives fell below its watermark
	// (DAT_SRQ_LOW_WATERMARK).
	SRQLowWatermark
	// EVDOverflowReason: an event was lost because its EVD was full.
	EVDOverflowReason
)
