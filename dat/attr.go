package dat

import "net/netip"

// EPAttr is DAT_EP_ATTR: the consumer-visible limits and behaviour of an
// endpoint.
type EPAttr struct {
	ServiceType ServiceType
	// MaxMessageSize is the largest Send/Recv message.
	MaxMessageSize uint32
	// MaxRDMASize is the largest RDMA Read or Write.
	MaxRDMASize uint32
	QoS         QoS
	// RecvCompletionFlags: UNSIGNALLED, SOLICITED_WAIT or EVD_THRESHOLD
	// (DEFAULT means EVD_THRESHOLD).
	RecvCompletionFlags CompletionFlags
	// RequestCompletionFlags: UNSIGNALLED or EVD_THRESHOLD (DEFAULT means
	// EVD_THRESHOLD).
	RequestCompletionFlags CompletionFlags
	// MaxRecvDTOs and MaxRequestDTOs bound outstanding DTOs; each must be 0
	// exactly when the corresponding EVD is nil.
	MaxRecvDTOs    int
	MaxRequestDTOs int
	// MaxRecvIOV and MaxRequestIOV bound the segments of one DTO.
	MaxRecvIOV    int
	MaxRequestIOV int
	// MaxRDMAReadIn and MaxRDMAReadOut bound outstanding RDMA Reads with
	// the EP as target (IRD) and as originator (ORD).
	MaxRDMAReadIn  int
	MaxRDMAReadOut int
	// SRQSoftHW is the SRQ soft high watermark.
	SRQSoftHW int
	// MaxRDMAReadIOV and MaxRDMAWriteIOV bound the local segments of one
	// RDMA Read and Write.
	MaxRDMAReadIOV  int
	MaxRDMAWriteIOV int
	// TransportSpecific and ProviderSpecific are named attributes.
	TransportSpecific []NamedAttr
	ProviderSpecific  []NamedAttr
}

// NamedAttr is a DAT_NAMED_ATTR.
type NamedAttr struct{ Name, Value string }

// EPParam is DAT_EP_PARAM: everything dat_ep_query reports, and what
// dat_ep_modify reads under its mask.
type EPParam struct {
	IA    *IA
	State EPState
	// LocalAddr and RemoteAddr are the IA addresses of the two ends.
	LocalAddr      netip.Addr
	LocalPortQual  PortQual
	RemoteAddr     netip.Addr
	RemotePortQual PortQual
	PZ             *PZ
	RecvEVD        *EVD
	RequestEVD     *EVD
	ConnectEVD     *EVD
	SRQ            *SRQ
	Attr           EPAttr
}

// EPParamMask selects EPParam fields (DAT_EP_PARAM_MASK).
type EPParamMask uint64

// EPParam fields.
const (
	FieldIA                     EPParamMask = 0x00000001
	FieldState                  EPParamMask = 0x00000002
	FieldComm                   EPParamMask = 0x00000004
	FieldLocalAddr              EPParamMask = 0x00000008
	FieldLocalPortQual          EPParamMask = 0x00000010
	FieldRemoteAddr             EPParamMask = 0x00000020
	FieldRemotePortQual         EPParamMask = 0x00000040
	FieldPZ                     EPParamMask = 0x00000080
	FieldRecvEVD                EPParamMask = 0x00000100
	FieldRequestEVD             EPParamMask = 0x00000200
	FieldConnectEVD             EPParamMask = 0x00000400
	FieldSRQ                    EPParamMask = 0x00000800
	FieldServiceType            EPParamMask = 0x00001000
	FieldMaxMessageSize         EPParamMask = 0x00002000
	FieldMaxRDMASize            EPParamMask = 0x00004000
	FieldQoS                    EPParamMask = 0x00008000
	FieldRecvCompletionFlags    EPParamMask = 0x00010000
	FieldRequestCompletionFlags EPParamMask = 0x00020000
	FieldMaxRecvDTOs            EPParamMask = 0x00040000
	FieldMaxRequestDTOs         EPParamMask = 0x00080000
	FieldMaxRecvIOV             EPParamMask = 0x00100000
	FieldMaxRequestIOV          EPParamMask = 0x00200000
	FieldMaxRDMAReadIn          EPParamMask = 0x00400000
	FieldMaxRDMAReadOut         EPParamMask = 0x00800000
	FieldSRQSoftHW              EPParamMask = 0x01000000
	FieldMaxRDMAReadIOV         EPParamMask = 0x02000000
	FieldMaxRDMAWriteIOV        EPParamMask = 0x04000000
	FieldNumTransportAttr       EPParamMask = 0x08000000
	FieldTransportSpecificAttr  EPParamMask = 0x10000000
	FieldNumProviderAttr        EPParamMask = 0x20000000
	FieldProviderSpecificAttr   EPParamMask = 0x40000000
	FieldEPAttrAll              EPParamMask = 0x7FFFF000
	FieldAll                    EPParamMask = 0x7FFFFFFF
)

// ProviderAttr is the part of DAT_PROVIDER_ATTR this implementation
// reports.
type ProviderAttr struct {
	ProviderName string
	// QoSSupported lists the supported qualities of service.
	QoSSupported []QoS
	// CompletionFlagsSupported is the union of supported flags.
	CompletionFlagsSupported CompletionFlags
	// MaxPrivateDataSize bounds connect, accept and reject private data.
	MaxPrivateDataSize int
	SupportsMultipath  bool
	SRQSupported       bool
	// SRQEPPZDifferenceSupported: an EP may use a PZ other than its SRQ's.
	SRQEPPZDifferenceSupported bool
	// SRQEPLimit reports that an EP never holds more than its
	// max_recv_dtos of its SRQ's receives whose events the consumer has
	// not dequeued: a message beyond that finds no receive, as on an EP
	// with its own queue, and breaks that connection only. Without it
	// (an adapter takes SRQ receives for any QP), a peer that sends more
	// than it was granted can empty the SRQ that other connections depend
	// on. An rdmanet extension.
	SRQEPLimit bool
	// WriteImmSupported reports that EP.PostRDMAWriteImm works: the
	// transport has RDMA Write with Immediate (InfiniBand and RoCE; not
	// iWARP). DAT 2.0 offers it as an InfiniBand extension
	// (dat_ib_post_rdma_write_immed).
	WriteImmSupported bool
	// PSPCreatesEP reports whether the provider can create EPs for PSPs
	// (DAT_PSP_CREATES_EP_IFASKED).
	PSPCreatesEP bool
}

// IAAttr is the part of DAT_IA_ATTR this implementation reports.
type IAAttr struct {
	AdapterName    string
	Transport      string
	MaxEPs         int
	MaxDTOPerEP    int
	MaxRDMAReadIn  int
	MaxRDMAReadOut int
	MaxIOVSegments int
	MaxRDMAReadIOV int
	MaxMessageSize uint32
	MaxRDMASize    uint32
	MaxLMRs        int
	MaxLMRSize     uint64
	MaxSRQDTOs     int
	MaxPrivateData int
	LocalAddr      netip.Addr
}
