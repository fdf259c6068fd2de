package dat

import "fmt"

// Return is a DAT_RETURN: bits 31–30 are the class, 29–16 the type and
// 15–0 the subtype. Values are those of the DAT 2.0 headers, so codes can
// be compared with DAPL's and logged in the same hex form.
type Return uint32

// Class, type and subtype masks of a Return.
const (
	ClassError   Return = 0x80000000
	ClassWarning Return = 0x40000000
	typeMask     Return = 0x3FFF0000
	subtypeMask  Return = 0x0000FFFF
)

// Type is the type part of a Return, compared without the class bits
// because DAPL sometimes omits them.
func (r Return) Type() Return { return r & typeMask }

// Subtype is the subtype part of a Return.
func (r Return) Subtype() Subtype { return Subtype(r & subtypeMask) }

// IsError reports whether r is not DAT_SUCCESS.
func (r Return) IsError() bool { return r.Type() != Success }

// Return types (DAT 2.0 dat_error.h).
const (
	Success                 Return = 0x00000000
	Abort                   Return = 0x00010000
	ConnQualInUse           Return = 0x00020000
	InsufficientResources   Return = 0x00030000
	InternalError           Return = 0x00040000
	InvalidHandle           Return = 0x00050000
	InvalidParameter        Return = 0x00060000
	InvalidState            Return = 0x00070000
	LengthError             Return = 0x00080000
	ModelNotSupported       Return = 0x00090000
	ProviderNotFound        Return = 0x000A0000
	PrivilegesViolation     Return = 0x000B0000
	ProtectionViolation     Return = 0x000C0000
	QueueEmpty              Return = 0x000D0000
	QueueFull               Return = 0x000E0000
	TimeoutExpired          Return = 0x000F0000
	ProviderAlreadyRegisted Return = 0x00100000
	ProviderInUse           Return = 0x00110000
	InvalidAddress          Return = 0x00120000
	InterruptedCall         Return = 0x00130000
	ConnQualUnavailable     Return = 0x00140000
	PortInUse               Return = 0x00160000
	CommNotSupported        Return = 0x00170000
	NotImplemented          Return = 0x3FFF0000
)

var typeNames = map[Return]string{
	Success:                 "DAT_SUCCESS",
	Abort:                   "DAT_ABORT",
	ConnQualInUse:           "DAT_CONN_QUAL_IN_USE",
	InsufficientResources:   "DAT_INSUFFICIENT_RESOURCES",
	InternalError:           "DAT_INTERNAL_ERROR",
	InvalidHandle:           "DAT_INVALID_HANDLE",
	InvalidParameter:        "DAT_INVALID_PARAMETER",
	InvalidState:            "DAT_INVALID_STATE",
	LengthError:             "DAT_LENGTH_ERROR",
	ModelNotSupported:       "DAT_MODEL_NOT_SUPPORTED",
	ProviderNotFound:        "DAT_PROVIDER_NOT_FOUND",
	PrivilegesViolation:     "DAT_PRIVILEGES_VIOLATION",
	ProtectionViolation:     "DAT_PROTECTION_VIOLATION",
	QueueEmpty:              "DAT_QUEUE_EMPTY",
	QueueFull:               "DAT_QUEUE_FULL",
	TimeoutExpired:          "DAT_TIMEOUT_EXPIRED",
	ProviderAlreadyRegisted: "DAT_PROVIDER_ALREADY_REGISTERED",
	ProviderInUse:           "DAT_PROVIDER_IN_USE",
	InvalidAddress:          "DAT_INVALID_ADDRESS",
	InterruptedCall:         "DAT_INTERRUPTED_CALL",
	ConnQualUnavailable:     "DAT_CONN_QUAL_UNAVAILABLE",
	PortInUse:               "DAT_PORT_IN_USE",
	CommNotSupported:        "DAT_COMM_NOT_SUPPORTED",
	NotImplemented:          "DAT_NOT_IMPLEMENTED",
}

func (r Return) String() string {
	name, ok := typeNames[r.Type()]
	if !ok {
		name = fmt.Sprintf("DAT_RETURN(%#08x)", uint32(r.Type()))
	}
	if s := r.Subtype(); s != NoSubtype {
		return name + "/" + s.String()
	}
	return name
}

// Subtype refines a Return type (DAT 2.0 enum DAT_RETURN_SUBTYPE).
type Subtype uint16

// Subtypes. The numeric values follow the enum order of dat_error.h.
const (
	NoSubtype      Subtype = 0
	SubInterrupted Subtype = 1
	// Resources.
	ResourceMemory           Subtype = 2
	ResourceDevice           Subtype = 3
	ResourceTEP              Subtype = 4
	ResourceTEVD             Subtype = 5
	ResourceProtectionDomain Subtype = 6
	ResourceMemoryRegion     Subtype = 7
	ResourceErrorHandler     Subtype = 8
	ResourceCredits          Subtype = 9
	ResourceSRQ              Subtype = 10
	// Invalid handles.
	HandleIA         Subtype = 11
	HandleEP         Subtype = 12
	HandleLMR        Subtype = 13
	HandleRMR        Subtype = 14
	HandlePZ         Subtype = 15
	HandlePSP        Subtype = 16
	HandleRSP        Subtype = 17
	HandleCR         Subtype = 18
	HandleCNO        Subtype = 19
	HandleEVDCR      Subtype = 20
	HandleEVDRequest Subtype = 21
	HandleEVDRecv    Subtype = 22
	HandleEVDConn    Subtype = 23
	HandleEVDAsync   Subtype = 24
	HandleSRQ        Subtype = 25
	HandleCSP        Subtype = 26
	// Invalid arguments: InvalidArg1 + n-1 is the n-th argument.
	InvalidArg1 Subtype = 37
	// Invalid EP states.
	StateEPUnconnected    Subtype = 47
	StateEPActConnPending Subtype = 48
	StateEPPassConnPend   Subtype = 49
	StateEPTentConnPend   Subtype = 50
	StateEPConnected      Subtype = 51
	StateEPDisconnected   Subtype = 52
	StateEPReserved       Subtype = 53
	StateEPComplPending   Subtype = 54
	StateEPDiscPending    Subtype = 55
	StateEPProviderCtl    Subtype = 56
	StateEPNotReady       Subtype = 57
	StateEPRecvWatermark  Subtype = 58
	StateEPPZ             Subtype = 59
	StateEPEVDRequest     Subtype = 60
	StateEPEVDRecv        Subtype = 61
	StateEPEVDConnect     Subtype = 62
	// Other object states (DAT_INVALID_STATE_CNO_IN_USE and on, in enum
	// order after the EP states).
	StateCNOInUse        Subtype = 67
	StateCNODead         Subtype = 68
	StateEVDOpen         Subtype = 69
	StateEVDEnabled      Subtype = 70
	StateEVDDisabled     Subtype = 71
	StateEVDWaitable     Subtype = 72
	StateEVDUnwaitable   Subtype = 73
	StateEVDInUse        Subtype = 74
	StateEVDConfigNotify Subtype = 75
	StateEVDConfigSolic  Subtype = 76
	StateEVDConfigThresh Subtype = 77
	StateEVDWaiter       Subtype = 78
	StateEVDAsync        Subtype = 79
	StateIAInUse         Subtype = 80
	StateLMRInUse        Subtype = 81
	StateLMRFree         Subtype = 82
	StatePZInUse         Subtype = 83
	StatePZFree          Subtype = 84
	StateSRQOperational  Subtype = 85
	StateSRQError        Subtype = 86
	StateSRQInUse        Subtype = 87
	// Privileges and protection.
	PrivilegesRead       Subtype = 88
	PrivilegesWrite      Subtype = 89
	PrivilegesRDMARead   Subtype = 90
	PrivilegesRDMAWrite  Subtype = 91
	ProtectionRead       Subtype = 92
	ProtectionWrite      Subtype = 93
	ProtectionRDMARead   Subtype = 94
	ProtectionRDMAWrite  Subtype = 95
	AddressUnsupported   Subtype = 96
	AddressUnreachable   Subtype = 97
	AddressMalformed     Subtype = 98
	NameNotRegistered    Subtype = 99
	MajorNotFound        Subtype = 100
	MinorNotFound        Subtype = 101
	ThreadSafetyNotFound Subtype = 102
)

// Arg returns the subtype naming the n-th (1-based) argument of a call as
// invalid (DAT_INVALID_ARGn).
func Arg(n int) Subtype { return InvalidArg1 + Subtype(n-1) }

var subtypeNames = map[Subtype]string{
	SubInterrupted: "DAT_SUB_INTERRUPTED",
	ResourceMemory: "DAT_RESOURCE_MEMORY", ResourceDevice: "DAT_RESOURCE_DEVICE",
	ResourceTEP: "DAT_RESOURCE_TEP", ResourceTEVD: "DAT_RESOURCE_TEVD",
	ResourceProtectionDomain: "DAT_RESOURCE_PROTECTION_DOMAIN",
	ResourceMemoryRegion:     "DAT_RESOURCE_MEMORY_REGION",
	ResourceErrorHandler:     "DAT_RESOURCE_ERROR_HANDLER", ResourceCredits: "DAT_RESOURCE_CREDITS",
	ResourceSRQ: "DAT_RESOURCE_SRQ",
	HandleIA:    "DAT_INVALID_HANDLE_IA", HandleEP: "DAT_INVALID_HANDLE_EP",
	HandleLMR: "DAT_INVALID_HANDLE_LMR", HandleRMR: "DAT_INVALID_HANDLE_RMR",
	HandlePZ: "DAT_INVALID_HANDLE_PZ", HandlePSP: "DAT_INVALID_HANDLE_PSP",
	HandleRSP: "DAT_INVALID_HANDLE_RSP", HandleCR: "DAT_INVALID_HANDLE_CR",
	HandleCNO: "DAT_INVALID_HANDLE_CNO", HandleEVDCR: "DAT_INVALID_HANDLE_EVD_CR",
	HandleEVDRequest: "DAT_INVALID_HANDLE_EVD_REQUEST", HandleEVDRecv: "DAT_INVALID_HANDLE_EVD_RECV",
	HandleEVDConn: "DAT_INVALID_HANDLE_EVD_CONN", HandleEVDAsync: "DAT_INVALID_HANDLE_EVD_ASYNC",
	HandleSRQ: "DAT_INVALID_HANDLE_SRQ", HandleCSP: "DAT_INVALID_HANDLE_CSP",
	StateEPUnconnected: "DAT_INVALID_STATE_EP_UNCONNECTED", StateEPActConnPending: "DAT_INVALID_STATE_EP_ACTCONNPENDING",
	StateEPPassConnPend: "DAT_INVALID_STATE_EP_PASSCONNPENDING", StateEPTentConnPend: "DAT_INVALID_STATE_EP_TENTCONNPENDING",
	StateEPConnected: "DAT_INVALID_STATE_EP_CONNECTED", StateEPDisconnected: "DAT_INVALID_STATE_EP_DISCONNECTED",
	StateEPReserved: "DAT_INVALID_STATE_EP_RESERVED", StateEPComplPending: "DAT_INVALID_STATE_EP_COMPLPENDING",
	StateEPDiscPending: "DAT_INVALID_STATE_EP_DISCPENDING", StateEPProviderCtl: "DAT_INVALID_STATE_EP_PROVIDERCONTROL",
	StateEPNotReady: "DAT_INVALID_STATE_EP_NOTREADY", StateEPRecvWatermark: "DAT_INVALID_STATE_EP_RECV_WATERMARK",
	StateEPPZ: "DAT_INVALID_STATE_EP_PZ", StateEPEVDRequest: "DAT_INVALID_STATE_EP_EVD_REQUEST",
	StateEPEVDRecv: "DAT_INVALID_STATE_EP_EVD_RECV", StateEPEVDConnect: "DAT_INVALID_STATE_EP_EVD_CONNECT",
	StateEVDInUse: "DAT_INVALID_STATE_EVD_IN_USE", StateEVDWaiter: "DAT_INVALID_STATE_EVD_WAITER",
	StateEVDUnwaitable: "DAT_INVALID_STATE_EVD_UNWAITABLE", StateEVDConfigNotify: "DAT_INVALID_STATE_EVD_CONFIG_NOTIFY", StateEVDConfigSolic: "DAT_INVALID_STATE_EVD_CONFIG_SOLICITED", StateEVDConfigThresh: "DAT_INVALID_STATE_EVD_CONFIG_THRESHOLD", StateEVDAsync: "DAT_INVALID_STATE_EVD_ASYNC", StatePZFree: "DAT_INVALID_STATE_PZ_FREE", StateLMRFree: "DAT_INVALID_STATE_LMR_FREE",
	StateIAInUse: "DAT_INVALID_STATE_IA_IN_USE", StateLMRInUse: "DAT_INVALID_STATE_LMR_IN_USE",
	StatePZInUse: "DAT_INVALID_STATE_PZ_IN_USE", StateSRQInUse: "DAT_INVALID_STATE_SRQ_IN_USE",
	PrivilegesRead: "DAT_PRIVILEGES_READ", PrivilegesWrite: "DAT_PRIVILEGES_WRITE",
	PrivilegesRDMARead: "DAT_PRIVILEGES_RDMA_READ", PrivilegesRDMAWrite: "DAT_PRIVILEGES_RDMA_WRITE",
	ProtectionRead: "DAT_PROTECTION_READ", ProtectionWrite: "DAT_PROTECTION_WRITE",
	ProtectionRDMARead: "DAT_PROTECTION_RDMA_READ", ProtectionRDMAWrite: "DAT_PROTECTION_RDMA_WRITE",
	AddressUnsupported: "DAT_INVALID_ADDRESS_UNSUPPORTED", AddressUnreachable: "DAT_INVALID_ADDRESS_UNREACHABLE",
	AddressMalformed: "DAT_INVALID_ADDRESS_MALFORMED", NameNotRegistered: "DAT_NAME_NOT_REGISTERED",
}

func (s Subtype) String() string {
	if s >= InvalidArg1 && s < InvalidArg1+10 {
		return fmt.Sprintf("DAT_INVALID_ARG%d", s-InvalidArg1+1)
	}
	if n, ok := subtypeNames[s]; ok {
		return n
	}
	return fmt.Sprintf("DAT_SUBTYPE(%d)", uint16(s))
}
