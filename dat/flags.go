package dat

import (
	"math"
	"time"
)

// Timeout is a DAT_TIMEOUT: a duration in microseconds, or TimeoutInfinite.
type Timeout uint32

// TimeoutInfinite waits forever (DAT_TIMEOUT_INFINITE).
const TimeoutInfinite Timeout = math.MaxUint32

// TimeoutOf converts d to a Timeout, rounding up to whole microseconds and
// saturating just below TimeoutInfinite. A negative d gives 0.
func TimeoutOf(d time.Duration) Timeout {
	if d <= 0 {
		return 0
	}
	us := (d + time.Microsecond - 1) / time.Microsecond
	if us >= time.Duration(TimeoutInfinite) {
		return TimeoutInfinite - 1
	}
	return Timeout(us)
}

// Duration converts t to a time.Duration; ok is false for TimeoutInfinite.
func (t Timeout) Duration() (d time.Duration, ok bool) {
	if t == TimeoutInfinite {
		return 0, false
	}
	return time.Duration(t) * time.Microsecond, true
}

// CompletionFlags is DAT_COMPLETION_FLAGS: both the per-post flags of a DTO
// and the EP's request/recv completion-flag attributes.
type CompletionFlags uint8

// Completion flags.
const (
	CompletionDefault            CompletionFlags = 0x00
	CompletionSuppress           CompletionFlags = 0x01 // no event if the DTO succeeds
	CompletionSolicitedWait      CompletionFlags = 0x02
	CompletionUnsignalled        CompletionFlags = 0x04
	CompletionBarrierFence       CompletionFlags = 0x08 // wait for earlier RDMA Reads
	CompletionEVDThreshold       CompletionFlags = 0x10
	CompletionLMRInvalidateFence CompletionFlags = 0x20 // kDAPL only
)

// QoS is a requested quality of service (DAT_QOS).
type QoS uint8

// Qualities of service. Both in-tree providers support only best effort.
const (
	QoSBestEffort     QoS = 0x00
	QoSHighThroughput QoS = 0x01
	QoSLowLatency     QoS = 0x02
	QoSEconomy        QoS = 0x04
	QoSPremium        QoS = 0x08
)

// ConnectFlags modify dat_ep_connect (DAT_CONNECT_FLAGS).
type ConnectFlags uint8

// Connect flags.
const (
	ConnectDefault            ConnectFlags = 0x00
	ConnectMultipathRequested ConnectFlags = 0x01
	ConnectMultipathRequired  ConnectFlags = 0x02
)

// CloseFlags select how dat_ep_disconnect closes (DAT_CLOSE_FLAGS).
type CloseFlags uint8

// Close flags.
const (
	CloseAbrupt   CloseFlags = 0x00
	CloseGraceful CloseFlags = 0x01
	CloseDefault             = CloseAbrupt
)

// ServiceType is the EP's transport service (DAT_SERVICE_TYPE).
type ServiceType uint8

// ServiceTypeRC is reliable connected, the only DAT service type.
const ServiceTypeRC ServiceType = 0

// EVDFlags say which event streams may feed an EVD (DAT_EVD_FLAGS).
type EVDFlags uint16

// EVD stream flags.
const (
	EVDSoftware   EVDFlags = 0x001
	EVDCR         EVDFlags = 0x010
	EVDDTO        EVDFlags = 0x020
	EVDConnection EVDFlags = 0x040
	EVDRMRBind    EVDFlags = 0x080
	EVDAsync      EVDFlags = 0x100
	EVDDefault    EVDFlags = 0x1F0 // every DAT stream, not software
)

// PSPFlags select who creates the EP for a request on a PSP.
type PSPFlags uint8

// PSP flags.
const (
	// PSPConsumer: requests carry no EP; the consumer supplies one to
	// dat_cr_accept (DAT_PSP_CONSUMER_FLAG).
	PSPConsumer PSPFlags = 0
	// PSPProvider: the provider creates an EP for each request, in
	// TENTATIVE_CONNECTION_PENDING (DAT_PSP_PROVIDER_FLAG).
	PSPProvider PSPFlags = 1
)

// MemPriv is a set of memory privileges (DAT_MEM_PRIV_FLAGS).
type MemPriv uint8

// Memory privileges.
const (
	MemPrivNone        MemPriv = 0x00
	MemPrivLocalRead   MemPriv = 0x01
	MemPrivRemoteRead  MemPriv = 0x02
	MemPrivLocalWrite  MemPriv = 0x10
	MemPrivRemoteWrite MemPriv = 0x20
	MemPrivAll         MemPriv = 0x33
)

// ConnQual is a connection qualifier. Both in-tree providers map it to a
// TCP or rdma_cm port, so only 1..65535 are valid.
type ConnQual uint64

// PortQual is the port qualifier of a connected endpoint.
type PortQual uint64
