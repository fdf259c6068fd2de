package dat

import (
	"errors"
	"fmt"
	"math/bits"
)

// Modify changes the EP parameters selected by mask to the values in p
// (dat_ep_modify). Only masked fields are read. It follows the
// parameter × state table of dat_ep_modify(3DAT) (see modifyTable):
// a field that can never change gives DAT_INVALID_PARAMETER, a field that
// cannot change in the EP's current state DAT_INVALID_STATE, and an invalid
// new value DAT_INVALID_PARAMETER. DAT_INVALID_HANDLE is only for an invalid
// ep itself: an invalid PZ or EVD in p (freed, of another IA, or an EVD
// lacking the flag its stream needs) is DAT_INVALID_PARAMETER/ARG3, where
// dat_ep_create would give DAT_INVALID_HANDLE. Either every masked field
// changes or none does.
func (ep *EP) Modify(mask EPParamMask, p *EPParam) error {
	const op = "dat_ep_modify"
	if err := ep.lock(op); err != nil {
		return err
	}
	ia := ep.ia
	unlocked := false
	defer func() {
		if !unlocked {
			ia.mu.Unlock()
		}
	}()
	if p == nil {
		return newError(op, InvalidParameter, Arg(3), "ep_param is nil")
	}
	if mask == 0 || mask&^FieldAll != 0 {
		return newError(op, InvalidParameter, Arg(2), "ep_param_mask %#x", uint64(mask))
	}
	// Parameters that can never change come first: the mask itself is
	// invalid then, whatever the state.
	var rules []modifyRule
	for m := uint64(mask); m != 0; m &= m - 1 {
		bit := EPParamMask(1) << bits.TrailingZeros64(m)
		r, ok := modifyRuleFor(bit)
		if !ok || len(r.States) == 0 {
			return newError(op, InvalidParameter, Arg(2), "%s cannot be modified", ruleName(bit, r, ok))
		}
		rules = append(rules, r)
	}
	for _, r := range rules {
		if !r.allows(ep.state) {
			return newError(op, InvalidState, ep.state.subtype(), "%s cannot be modified in %v", r.Name, ep.state)
		}
	}
	if mask&FieldRecvCompletionFlags != 0 && ep.recvPosted.Load() {
		return newError(op, InvalidState, ep.state.subtype(), "recv completion flags cannot change after a Recv was posted")
	}

	// Build the new configuration and validate it as creation would.
	pz, recv, req, conn := ep.pz, ep.recvEVD, ep.reqEVD, ep.connEVD
	a := ep.attr
	if mask&FieldPZ != 0 {
		pz = p.PZ
	}
	if mask&FieldRecvEVD != 0 {
		recv = p.RecvEVD
	}
	if mask&FieldRequestEVD != 0 {
		req = p.RequestEVD
	}
	if mask&FieldConnectEVD != 0 {
		conn = p.ConnectEVD
	}
	applyAttrMask(&a, mask, &p.Attr)
	if err := ia.checkEPHandles(op, pz, recv, req, conn, nil); err != nil {
		return handleAsParameter(err, 3)
	}
	if ep.srq != nil && pz != nil && pz != ep.srq.pz && !ia.attr.SRQPDDifference {
		return newError(op, InvalidParameter, Arg(3), "the new PZ differs from the SRQ's and the provider lacks srq_ep_pz_difference_support")
	}
	if ep.srq != nil {
		a.MaxRecvIOV = ep.srq.attr.MaxRecvIOV
	}
	if code, why := ia.attrProblem(&a, recv, req, ep.srq != nil); code != Success {
		if code == ModelNotSupported {
			code = InvalidParameter // dat_ep_modify reports unsupported values as invalid
		}
		return newError(op, code, Arg(3), "%s", why)
	}
	if why := ep.streamProblem(recv, req, conn, &a); why != "" {
		return newError(op, InvalidParameter, Arg(3), "%s", why)
	}

	// A QP completes on the CQs of the EVDs it was created with, so a new
	// recv or request EVD means a new QP; receives already posted to the
	// old one cannot move with it.
	newCQs := recv != ep.recvEVD || req != ep.reqEVD
	if newCQs && ep.qp != nil {
		ep.recvQ.mu.Lock()
		posted := ep.recvQ.outstanding()
		ep.recvQ.mu.Unlock()
		if posted > 0 {
			return newError(op, InvalidState, NoSubtype, "%d receives are posted: the recv and request EVDs can change only while none is", posted)
		}
	}

	// Apply: swap references, then reconfigure or create the QP.
	srq := ep.srq
	ep.detach()
	ep.attr = a
	ep.attach(pz, recv, req, conn, srq)
	qp, tag := ep.qp, ep.tag
	if newCQs {
		ep.qp, ep.tag = nil, 0
		ep.publishLocked()
	}
	cfg := ep.driverConfig()
	unlocked = true
	ia.mu.Unlock()
	if qp == nil || newCQs {
		if qp != nil {
			qp.Close()
			ia.untagQP(tag)
		}
		return ep.ensureQP(op)
	}
	if err := qp.Modify(cfg); err != nil {
		return providerError(op, err)
	}
	return nil
}

// handleAsParameter turns the DAT_INVALID_HANDLE that the EP-creation
// handle checks give into DAT_INVALID_PARAMETER/DAT_INVALID_ARGn. For
// dat_ep_modify, DAT_INVALID_HANDLE means an invalid ep_handle only; a PZ
// or EVD inside ep_param that is freed, belongs to another IA or lacks the
// EVD flag its stream needs (DTO for the recv and request EVDs, CONNECTION
// for the connect EVD) is an invalid parameter. The detail names the
// offending field of ep_param.
func handleAsParameter(err error, arg int) error {
	var de *Error
	if !errors.As(err, &de) || de.Code.Type() != InvalidHandle {
		return err
	}
	var field string
	switch sub := de.Code.Subtype(); sub {
	case HandlePZ:
		field = "PZ"
	case HandleEVDRecv:
		field = "recv EVD"
	case HandleEVDRequest:
		field = "request EVD"
	case HandleEVDConn:
		field = "connect EVD"
	default:
		field = sub.String()
	}
	return &Error{
		Code:   ClassError | InvalidParameter | Return(Arg(arg)),
		Op:     de.Op,
		Detail: fmt.Sprintf("ep_param %s: %s", field, de.Detail),
		Err:    de.Err,
	}
}

func ruleName(bit EPParamMask, r modifyRule, ok bool) string {
	if ok {
		return r.Name
	}
	return fmt.Sprintf("field %#x", uint64(bit))
}

// applyAttrMask copies the masked EP attributes from src into dst.
func applyAttrMask(dst *EPAttr, mask EPParamMask, src *EPAttr) {
	set := func(f EPParamMask) bool { return mask&f != 0 }
	if set(FieldServiceType) {
		dst.ServiceType = src.ServiceType
	}
	if set(FieldMaxMessageSize) {
		dst.MaxMessageSize = src.MaxMessageSize
	}
	if set(FieldMaxRDMASize) {
		dst.MaxRDMASize = src.MaxRDMASize
	}
	if set(FieldQoS) {
		dst.QoS = src.QoS
	}
	if set(FieldRecvCompletionFlags) {
		dst.RecvCompletionFlags = src.RecvCompletionFlags
	}
	if set(FieldRequestCompletionFlags) {
		dst.RequestCompletionFlags = src.RequestCompletionFlags
	}
	if set(FieldMaxRecvDTOs) {
		dst.MaxRecvDTOs = src.MaxRecvDTOs
	}
	if set(FieldMaxRequestDTOs) {
		dst.MaxRequestDTOs = src.MaxRequestDTOs
	}
	if set(FieldMaxRecvIOV) {
		dst.MaxRecvIOV = src.MaxRecvIOV
	}
	if set(FieldMaxRequestIOV) {
		dst.MaxRequestIOV = src.MaxRequestIOV
	}
	if set(FieldMaxRDMAReadIn) {
		dst.MaxRDMAReadIn = src.MaxRDMAReadIn
	}
	if set(FieldMaxRDMAReadOut) {
		dst.MaxRDMAReadOut = src.MaxRDMAReadOut
	}
	if set(FieldSRQSoftHW) {
		dst.SRQSoftHW = src.SRQSoftHW
	}
	if set(FieldMaxRDMAReadIOV) {
		dst.MaxRDMAReadIOV = src.MaxRDMAReadIOV
	}
	if set(FieldMaxRDMAWriteIOV) {
		dst.MaxRDMAWriteIOV = src.MaxRDMAWriteIOV
	}
	if set(FieldNumTransportAttr) || set(FieldTransportSpecificAttr) {
		dst.TransportSpecific = append([]NamedAttr(nil), src.TransportSpecific...)
	}
	if set(FieldNumProviderAttr) || set(FieldProviderSpecificAttr) {
		dst.ProviderSpecific = append([]NamedAttr(nil), src.ProviderSpecific...)
	}
}
