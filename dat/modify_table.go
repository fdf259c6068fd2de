package dat

// modifyRule is one row of dat_ep_modify(3DAT)'s list of parameters: which
// EP states allow the field named by Field to change. A rule with no states
// forbids the change outright (DAT_INVALID_PARAMETER); a state outside the
// list gives DAT_INVALID_STATE.
type modifyRule struct {
	Field  EPParamMask
	Name   string // the seed's name for the parameter
	States []EPState
	// Seed is the sentence of the seed the row comes from.
	Seed string
}

// States named by the seed. "Quiescent" is UNCONNECTED and
// TENTATIVE_CONNECTION_PENDING; "Unconnected, Reserved, Passive Connection
// (Request) Pending, and Tentative Connection Pending" is preConnect.
var (
	never      []EPState
	quiescent  = []EPState{EPUnconnected, EPTentativeConnectionPending}
	preConnect = []EPState{EPUnconnected, EPReserved, EPPassiveConnectionPending, EPTentativeConnectionPending}
)

// modifyTable is dat_ep_modify's table, in the seed's order. Fields the
// DAT 1.2 seed does not list follow project rules: the communicator and the
// SRQ handle never change (an EP's SRQ is fixed for its life per
// dat_ep_create_with_srq); the DAT 2.0 attributes (SRQ soft high watermark,
// RDMA Read/Write IOV limits) change in the pre-connection states, like the
// attributes the seed lists.
var modifyTable = []modifyRule{
	{FieldIA, "Interface Adapter", never, "Endpoint belongs to an open instance of IA and that association cannot be changed."},
	{FieldState, "Endpoint State", never, "State of Endpoint cannot be changed by a dat_ep_modify() operation."},
	{FieldLocalAddr, "Local IA Address", never, "Local IA Address cannot be changed by a dat_ep_modify() operation."},
	{FieldLocalPortQual, "Local Port Qualifier", never, "Local port qualifier cannot be changed by a dat_ep_modify() operation."},
	{FieldRemoteAddr, "Remote IA Address", never, "Remote IA Address cannot be changed by a dat_ep_modify() operation."},
	{FieldRemotePortQual, "Remote Port Qualifier", never, "Remote port qualifier cannot be changed by a dat_ep_modify() operation"},
	{FieldPZ, "Protection Zone", quiescent, "Protection Zone can be changed only when the Endpoint is in quiescent state."},
	{FieldRecvEVD, "In DTO Event Dispatcher", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Request Pending, and Tentative Connection Pending states."},
	{FieldRequestEVD, "Out DTO Event Dispatcher", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldConnectEVD, "Connection Event Dispatcher", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldServiceType, "Service Type", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxMessageSize, "Maximum Message Size", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Request Pending, and Tentative Connection Pending states."},
	{FieldMaxRDMASize, "Maximum RDMA Size", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldQoS, "Quality of Service", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldRecvCompletionFlags, "Recv Completion Flags", preConnect, "Recv Completion Flags can be changed only prior to a request for a connection for an Active side or accepting a Connection Request for a Passive side, but before posting of any Recvs."},
	{FieldRequestCompletionFlags, "Request Completion Flags", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Request Pending, and Tentative Connection Pending states."},
	{FieldMaxRecvDTOs, "Maximum Recv DTO", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxRequestDTOs, "Maximum Request DTO", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxRecvIOV, "Maximum Recv IOV", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxRequestIOV, "Maximum Request IOV", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxRDMAReadIn, "Maximum outstanding RDMA Read as target", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldMaxRDMAReadOut, "Maximum outstanding RDMA Read as originator", preConnect, "Can be modified when in Unconnected, Reserved, Passive Connection Pending, and Tentative Connection Pending states."},
	{FieldNumTransportAttr, "Num transport-specific attributes", quiescent, "Can be modified when in Quiescent (unconnected) state."},
	{FieldTransportSpecificAttr, "Transport-specific endpoint attributes", quiescent, "Can be modified when in Quiescent (unconnected) state."},
	{FieldNumProviderAttr, "Num provider-specific attributes", quiescent, "Can be modified when in Quiescent (unconnected) state."},
	{FieldProviderSpecificAttr, "Provider-specific endpoint attributes", quiescent, "Can be modified when in Quiescent (unconnected) state."},
	// Project rules for fields the DAT 1.2 seed does not list.
	{FieldComm, "Communicator (DAT 2.0)", never, "project rule: the communicator is fixed at creation"},
	{FieldSRQ, "Shared Receive Queue", never, "SRQ can not be disassociated or replaced from created EP. (dat_ep_create_with_srq)"},
	{FieldSRQSoftHW, "SRQ soft high watermark (DAT 2.0)", preConnect, "project rule: follows the pre-connection attribute rows"},
	{FieldMaxRDMAReadIOV, "Maximum RDMA Read IOV (DAT 2.0)", preConnect, "project rule: follows the pre-connection attribute rows"},
	{FieldMaxRDMAWriteIOV, "Maximum RDMA Write IOV (DAT 2.0)", preConnect, "project rule: follows the pre-connection attribute rows"},
}

// modifyRuleFor returns the table row for one mask bit.
func modifyRuleFor(bit EPParamMask) (modifyRule, bool) {
	for _, r := range modifyTable {
		if r.Field == bit {
			return r, true
		}
	}
	return modifyRule{}, false
}

// allows reports whether the rule lets the field change in state s.
func (r modifyRule) allows(s EPState) bool {
	for _, x := range r.States {
		if x == s {
			return true
		}
	}
	return false
}
