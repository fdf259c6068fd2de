package dat

import "fmt"

// Provider defaults for an EP created with nil attributes. dat_ep_create
// asks for "reasonable defaults"; these follow DAPL's except for the RDMA
// Read depths, which default to 0 as dat_ep_create_with_srq recommends so
// that connection establishment never fails for lack of Read resources.
const (
	defaultMaxDTOs = 16
	defaultMaxIOV  = 4
)

// defaultEPAttr returns the attributes an EP gets when the consumer passes
// nil: DTO limits only for the streams that have an EVD, so the defaults
// always pass validation.
func (ia *IA) defaultEPAttr(recv, req *EVD) EPAttr {
	a := EPAttr{
		ServiceType:            ServiceTypeRC,
		MaxMessageSize:         ia.attr.MaxMessageSize,
		MaxRDMASize:            ia.attr.MaxRDMASize,
		QoS:                    QoSBestEffort,
		RecvCompletionFlags:    CompletionEVDThreshold,
		RequestCompletionFlags: CompletionEVDThreshold,
	}
	if recv != nil {
		a.MaxRecvDTOs = min(defaultMaxDTOs, ia.attr.MaxWRPerQP)
		a.MaxRecvIOV = min(defaultMaxIOV, ia.attr.MaxSGE)
	}
	if req != nil {
		a.MaxRequestDTOs = min(defaultMaxDTOs, ia.attr.MaxWRPerQP)
		a.MaxRequestIOV = min(defaultMaxIOV, ia.attr.MaxSGE)
		a.MaxRDMAWriteIOV = a.MaxRequestIOV
		a.MaxRDMAReadIOV = min(1, ia.attr.MaxReadSGE)
	}
	return a
}

// attrProblem validates EP attributes against the IA's limits and the EVDs
// the EP will use. It returns the DAT return type and a description, or
// Success. withSRQ skips max_recv_iov, which dat_ep_create_with_srq
// ignores.
func (ia *IA) attrProblem(a *EPAttr, recv, req *EVD, withSRQ bool) (Return, string) {
	lim := ia.attr
	if a.ServiceType != ServiceTypeRC {
		return InvalidParameter, fmt.Sprintf("service type %d: only DAT_SERVICE_TYPE_RC exists", a.ServiceType)
	}
	if a.QoS != QoSBestEffort {
		return ModelNotSupported, fmt.Sprintf("QoS %#x: only DAT_QOS_BEST_EFFORT is supported", a.QoS)
	}
	switch a.RecvCompletionFlags {
	case CompletionDefault, CompletionUnsignalled, CompletionSolicitedWait, CompletionEVDThreshold:
	default:
		return InvalidParameter, fmt.Sprintf("recv completion flags %#x: allowed are UNSIGNALLED, SOLICITED_WAIT or EVD_THRESHOLD", a.RecvCompletionFlags)
	}
	switch a.RequestCompletionFlags {
	case CompletionDefault, CompletionUnsignalled, CompletionEVDThreshold:
	default:
		return InvalidParameter, fmt.Sprintf("request completion flags %#x: allowed are UNSIGNALLED or EVD_THRESHOLD", a.RequestCompletionFlags)
	}
	type bound struct {
		name     string
		v, limit int
	}
	bounds := []bound{
		{"max_recv_dtos", a.MaxRecvDTOs, lim.MaxWRPerQP},
		{"max_request_dtos", a.MaxRequestDTOs, lim.MaxWRPerQP},
		{"max_request_iov", a.MaxRequestIOV, lim.MaxSGE},
		{"max_rdma_read_in", a.MaxRDMAReadIn, lim.MaxIRD},
		{"max_rdma_read_out", a.MaxRDMAReadOut, lim.MaxORD},
		{"max_rdma_read_iov", a.MaxRDMAReadIOV, lim.MaxReadSGE},
		{"max_rdma_write_iov", a.MaxRDMAWriteIOV, lim.MaxSGE},
		{"srq_soft_hw", a.SRQSoftHW, lim.MaxSRQWR},
	}
	if !withSRQ {
		bounds = append(bounds, bound{"max_recv_iov", a.MaxRecvIOV, lim.MaxSGE})
	}
	for _, b := range bounds {
		if b.v < 0 || b.v > b.limit {
			return InvalidParameter, fmt.Sprintf("%s %d not in 0..%d", b.name, b.v, b.limit)
		}
	}
	if a.MaxMessageSize > lim.MaxMessageSize {
		return InvalidParameter, fmt.Sprintf("max_message_size %d exceeds the IA's %d", a.MaxMessageSize, lim.MaxMessageSize)
	}
	if a.MaxRDMASize > lim.MaxRDMASize {
		return InvalidParameter, fmt.Sprintf("max_rdma_size %d exceeds the IA's %d", a.MaxRDMASize, lim.MaxRDMASize)
	}
	// An EVD-less stream has no DTOs, and a stream with an EVD can carry
	// some (DAPL's dapl_ep_check_attrs).
	if (recv == nil) != (a.MaxRecvDTOs == 0) {
		return InvalidParameter, fmt.Sprintf("max_recv_dtos %d with recv EVD %v: must be 0 exactly when there is no recv EVD", a.MaxRecvDTOs, recv != nil)
	}
	if (req == nil) != (a.MaxRequestDTOs == 0) {
		return InvalidParameter, fmt.Sprintf("max_request_dtos %d with request EVD %v: must be 0 exactly when there is no request EVD", a.MaxRequestDTOs, req != nil)
	}
	if recv != nil && !withSRQ && a.MaxRecvIOV == 0 {
		return InvalidParameter, "max_recv_iov must be positive when there is a recv EVD"
	}
	if req == nil && a.MaxRequestIOV != 0 {
		return InvalidParameter, "max_request_iov must be 0 when there is no request EVD"
	}
	return Success, ""
}
