package driver

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// IAAttr describes an adapter's limits and capabilities. Package dat uses
// it to validate consumer requests and reports it through dat_ia_query.
type IAAttr struct {
	// Name of the adapter as the provider knows it (a device name or an
	// address).
	Name string
	// Transport is the wire the adapter speaks.
	Transport Transport
	// LocalAddr is the IA's own address (an unspecified IP if the IA is
	// not bound to one).
	LocalAddr net.Addr
	// MaxQPs is the number of QPs the adapter can create.
	MaxQPs int
	// MaxWRPerQP bounds max_request_dtos and max_recv_dtos.
	MaxWRPerQP int
	// MaxSGE bounds the IOV length of any DTO.
	MaxSGE int
	// MaxReadSGE bounds the local IOV of an RDMA Read (1 on iWARP/siw).
	MaxReadSGE int
	// MaxMessageSize is the largest Send/Recv message.
	MaxMessageSize uint32
	// MaxRDMASize is the largest RDMA Read or Write.
	MaxRDMASize uint32
	// MaxIRD and MaxORD bound outstanding inbound and outbound RDMA Reads
	// per QP.
	MaxIRD, MaxORD int
	// MaxPrivateData is the largest consumer private data on connect,
	// accept and reject for this transport.
	MaxPrivateData int
	// MaxSRQWR bounds the receives posted to one SRQ. It is meaningful
	// only for an IA that implements SRQCreator.
	MaxSRQWR int
	// SRQPDDifference reports whether an EP may use a PD other than its
	// SRQ's (DAT srq_ep_pz_difference_support).
	SRQPDDifference bool
	// SRQQPLimit reports that a QP on an SRQ never holds more than its
	// QPConfig.MaxRecvWR of the SRQ's receives (counted in
	// QPConfig.SRQHeld): a Send beyond that finds no receive, as on a QP
	// with a receive queue of its own.
	SRQQPLimit bool
	// WriteImm reports that QPs carry RDMA Write with Immediate
	// (OpRDMAWriteImm): InfiniBand and RoCE do; iWARP (RFC 5040) has no
	// immediate data.
	WriteImm bool
	// MaxMR bounds registered regions; MaxMRSize bounds one region.
	MaxMR     int
	MaxMRSize uint64
	// Spin is how long a waiter should poll the adapter's CQs before it
	// sleeps, when the consumer does not say. Zero means sleep at once:
	// right for a provider whose completions are produced by goroutines
	// of this process and whose CQs are no CQProgresser, since a
	// spinning waiter would keep those goroutines from the processor (the
	// Go scheduler checks the network poller only when it runs out of
	// work). A provider whose completions come from a device, or whose
	// CQs let the spinning waiter do the work (CQProgresser), gains from a
	// spin that covers its round trip.
	Spin time.Duration
}

// Transport names the wire protocol of an adapter.
type Transport int

// Transports.
const (
	TransportIWARP Transport = iota + 1 // MPA/DDP/RDMAP over TCP
	TransportIB                         // InfiniBand
	TransportRoCE                       // RDMA over Converged Ethernet
)

func (t Transport) String() string {
	switch t {
	case TransportIWARP:
		return "iwarp"
	case TransportIB:
		return "ib"
	case TransportRoCE:
		return "roce"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// Access is a set of memory access rights.
type Access uint8

// Access rights. Local read is always granted to the owner.
const (
	AccessLocalWrite  Access = 1 << iota // the adapter may write (Recv, Read sink)
	AccessRemoteWrite                    // peers may RDMA Write
	AccessRemoteRead                     // peers may RDMA Read
)

// CQConfig sizes a completion queue.
type CQConfig struct {
	// Size is the number of completions the consumer expects to hold at
	// once. A CQ never loses a completion: a provider whose queues are of
	// fixed size makes room for the work queues attached to it as they
	// attach, and where it cannot (a device that cannot resize a CQ),
	// CreateQP fails with an error wrapping ErrResources.
	Size int
}

// QPConfig configures a queue pair. Package dat derives it from the EP
// attributes.
type QPConfig struct {
	PD  PD
	SRQ SRQ // nil: the QP has its own receive queue
	// SRQHeld, with an SRQ, counts the SRQ receives the QP holds: a
	// provider that reports IAAttr.SRQQPLimit adds one when it takes a
	// receive for the QP (and takes it off again if it never completes
	// it), package dat subtracts one when the completion's event leaves
	// the consumer's EVD, and the provider refuses a receive to a QP
	// whose count has reached MaxRecvWR.
	SRQHeld *atomic.Int32
	// SendCQ and RecvCQ are where the QP's send-side and receive work
	// requests complete (receives from SRQ included). Either may be nil
	// when nothing will ever be posted to that queue.
	SendCQ, RecvCQ CQ
	// Tag is copied into every Completion of this QP, so package dat can
	// tell which endpoint a completion belongs to.
	Tag uint32
	// OnDisconnect reports that an established connection ended without a
	// local Disconnect or Close: err is nil for an orderly close by the
	// peer and describes the failure when the connection broke. It is
	// called at most once per connection, after the QP is quiescent, from
	// a goroutine of the provider, and must not block for long.
	OnDisconnect func(err error)
	// MaxSendWR and MaxRecvWR bound outstanding work requests.
	MaxSendWR, MaxRecvWR int
	// MaxSendSGE and MaxRecvSGE bound IOV lengths.
	MaxSendSGE, MaxRecvSGE int
	// IRD and ORD are the RDMA Read depths: inbound (as target) and
	// outbound (as originator).
	IRD, ORD int
	// MaxMessageSize and MaxRDMASize bound a single Send and RDMA.
	MaxMessageSize, MaxRDMASize uint32
}

// SRQConfig sizes a shared receive queue.
type SRQConfig struct {
	MaxRecvWR  int
	MaxRecvSGE int
	// LowWatermark arms the low-watermark event at creation (0: off).
	LowWatermark int
	// OnLowWatermark reports that the posted count fell below the armed
	// watermark (see SRQ.SetLowWatermark). It must not block for long.
	OnLowWatermark func()
}

// ListenConfig describes a listener.
type ListenConfig struct {
	// Port is the connection qualifier (the TCP or rdma_cm port). Zero asks
	// the provider to pick one.
	Port uint16
	// Backlog bounds requests that have arrived but are not yet accepted or
	// rejected; arrivals beyond it are refused as non-peer rejects.
	Backlog int
	// SharePort asks for SO_REUSEPORT so several listeners (processes) may
	// share the port.
	SharePort bool
	// Fallback, when non-nil, lets the port serve plain TCP clients too: a
	// TCP connection that turns out not to be a connection request of
	// this transport (its first bytes are something else, or it stays
	// silent; each provider documents how it decides) is handed to
	// Fallback instead of being dropped, wrapped so that reads return
	// every byte the client sent, those the provider read to decide
	// included. c is Fallback's from then on: it must close it. Calls may
	// run concurrently, and Listener.Close waits for those in progress,
	// so Fallback should hand c off (queue it, start a goroutine) rather
	// than serve it. Providers whose connections are not set up over a
	// TCP socket of their own (verbs: rdma_cm) ignore it.
	Fallback func(c net.Conn)
	// Control, if not nil, is called on the listening socket after it is
	// created and before it is bound, with the network ("tcp4" or "tcp6")
	// and the listen address, as net.ListenConfig's Control. An error it
	// returns fails Listen. Providers that do not listen on a socket of
	// their own (verbs) ignore it.
	Control func(network, address string, c syscall.RawConn) error
	// KeepAlive and KeepAliveConfig set up dead-peer detection on the
	// connections accepted through the listener, as they do on
	// net.ListenConfig's; see ResolveKeepAlive.
	KeepAlive       time.Duration
	KeepAliveConfig net.KeepAliveConfig
}

// ConnectResult describes an established connection.
type ConnectResult struct {
	// PrivateData is the peer's accept private data (nil on the accepting
	// side).
	PrivateData []byte
	// Local and Remote are the connection's addresses.
	Local, Remote net.Addr
}

// RequestInfo describes an incoming connection request.
type RequestInfo struct {
	// Remote is the address of the requesting peer; Local the local
	// address the request arrived on.
	Remote, Local net.Addr
	// PrivateData is the requester's private data.
	PrivateData []byte
	// IRD and ORD are the requester's advertised RDMA Read depths: its
	// inbound and outbound limits.
	IRD, ORD int
}

// SGE is one local segment of a work request: DAT's LMR triplet.
type SGE struct {
	Addr   uint64 // registered virtual address
	Length uint32
	LKey   uint32
}

// RemoteSegment names peer memory for RDMA: DAT's RMR triplet.
type RemoteSegment struct {
	Addr   uint64
	Length uint32
	RKey   uint32
}

// Opcode is a work request or completion type. Values match DAT_DTOS.
type Opcode uint8

// Opcodes.
const (
	OpSend      Opcode = 0
	OpRDMAWrite Opcode = 1
	OpRDMARead  Opcode = 2
	OpRecv      Opcode = 3
	// OpRDMAWriteImm is an RDMA Write with Immediate: the Write, then a
	// 32-bit value (SendWR.Imm) delivered to the peer in the completion
	// of a receive the Write consumes (Completion.WithImm). It is the
	// InfiniBand extension DAT 2.0 exposes as dat_ib_post_rdma_write_immed,
	// offered only by providers that report IAAttr.WriteImm.
	OpRDMAWriteImm Opcode = 4
)

// SendFlags modify a send-side work request.
type SendFlags uint8

// Send flags.
const (
	// SendSignaled asks for a completion on success. A successful Send or
	// RDMA Write posted without it may produce no completion: the
	// completion of a later request of the same QP implies its success.
	// Package dat posts every RDMA Read signalled, since a Read may
	// complete after requests posted behind it. Failed requests always
	// complete.
	SendSignaled SendFlags = 1 << iota
	// SendSolicited marks a Send as solicited (Send with SE).
	SendSolicited
	// SendFence delays the request until earlier RDMA Reads completed.
	SendFence
)

// SendWR is a Send, RDMA Write or RDMA Read work request.
type SendWR struct {
	// ID is package dat's number for the request, returned in its
	// Completion.
	ID     uint64
	Op     Opcode
	Flags  SendFlags
	Local  []SGE
	Remote RemoteSegment // RDMA Write and Read only
	// Imm is the immediate value of an OpRDMAWriteImm.
	Imm uint32
}

// RecvWR is a receive work request.
type RecvWR struct {
	// ID is package dat's number for the request, returned in its
	// Completion.
	ID    uint64
	Local []SGE
}

// Status is a completion status. Values match DAT_DTO_COMPLETION_STATUS.
type Status uint8

// Completion statuses.
const (
	StatusSuccess          Status = 0
	StatusFlushed          Status = 1
	StatusLocalLength      Status = 2
	StatusLocalEP          Status = 3
	StatusLocalProtection  Status = 4
	StatusBadResponse      Status = 5
	StatusRemoteAccess     Status = 6
	StatusRemoteResponder  Status = 7
	StatusTransport        Status = 8
	StatusReceiverNotReady Status = 9
)

// MaxWRID bounds the IDs package dat gives work requests: every ID is
// below it, so a provider may use IDs with either of the top two bits set
// for requests of its own (drain markers, window binds) and tell them
// apart from dat's in its CQ.
const MaxWRID = 1 << 62

// Completion reports a finished work request.
type Completion struct {
	// WRID is the ID the request was posted with.
	WRID uint64
	// QPTag is the Tag of the QP the request ran on (for a receive from
	// an SRQ, the QP that consumed it).
	QPTag uint32
	// Op is the request's operation. Package dat does not rely on it (it
	// knows what it posted): a device that does not say on a failed or
	// flushed completion may report OpRecv for any receive and OpSend for
	// any send-side request, and any provider OpRDMAWrite for an
	// OpRDMAWriteImm (a verbs work completion does not tell them apart).
	Op     Opcode
	Status Status
	// Length is the length of the message a successful receive took.
	// Package dat ignores it for send-side requests, whose length it
	// knows.
	Length uint32
	// Solicited is set on a receive completed by a Send with SE. A
	// provider that cannot tell (verbs work completions do not say) sets
	// it on every successful receive, so a SOLICITED_WAIT stream wakes too
	// often rather than never.
	Solicited bool
	// WithImm is set on a successful receive that an RDMA Write with
	// Immediate consumed instead of a Send: Imm holds the immediate value
	// and Length the Write's length; the receive's buffer is untouched.
	WithImm bool
	Imm     uint32
}

// Provider errors. Providers wrap these (fmt.Errorf("...: %w", ErrX)) so
// package dat can map them to DAT return codes and connection events.
var (
	// ErrPortInUse: the connection qualifier is taken (DAT_CONN_QUAL_IN_USE).
	ErrPortInUse = errors.New("port in use")
	// ErrUnreachable: the remote host cannot be reached
	// (DAT_CONNECTION_EVENT_UNREACHABLE).
	ErrUnreachable = errors.New("remote host unreachable")
	// ErrNotSupported: the adapter lacks the feature (DAT_MODEL_NOT_SUPPORTED).
	ErrNotSupported = errors.New("not supported by the provider")
	// ErrResources: out of adapter resources (DAT_INSUFFICIENT_RESOURCES).
	ErrResources = errors.New("insufficient resources")
	// ErrQueueFull: no room to post (DAT_INSUFFICIENT_RESOURCES).
	ErrQueueFull = errors.New("work queue full")
	// ErrNotConnected: the QP cannot carry the request in its state
	// (DAT_INVALID_STATE).
	ErrNotConnected = errors.New("queue pair not connected")
	// ErrInvalidAddress: the address cannot be used (DAT_INVALID_ADDRESS).
	ErrInvalidAddress = errors.New("invalid address")
	// ErrAccessRefused: the adapter refused a memory window bind over
	// the region, range or rights asked for (DAT_PRIVILEGES_VIOLATION).
	ErrAccessRefused = errors.New("memory access refused by the adapter")
	// ErrNotRDMAPeer: the remote port answered a connection request with
	// something that is not this transport's reply (a plain TCP server,
	// say an HTTP server answering with an error page), so the caller may
	// fall back to another protocol at once rather than wait for a
	// timeout. Package dat reports it as a non-peer reject.
	ErrNotRDMAPeer = errors.New("remote port is not an RDMA peer")
)

// RejectError reports that the peer consumer refused a connection; it
// carries the peer's reject private data. Failures that are not a peer's
// decision (nobody listening, backlog full, protocol errors) are plain
// errors and become non-peer rejects.
type RejectError struct {
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("connection rejected by peer (%d bytes of private data)", len(e.PrivateData))
}
