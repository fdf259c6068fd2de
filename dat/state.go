package dat

import "fmt"

// EPState is an endpoint state (DAT 2.0 DAT_EP_STATE numbering).
type EPState int

// Endpoint states. The UNCONFIGURED_* and multipath states exist in DAT 2.0
// only; they are defined for completeness and never entered.
const (
	EPUnconnected                EPState = 0
	EPUnconfiguredUnconnected    EPState = 1
	EPReserved                   EPState = 2
	EPUnconfiguredReserved       EPState = 3
	EPPassiveConnectionPending   EPState = 4
	EPUnconfiguredPassive        EPState = 5
	EPActiveConnectionPending    EPState = 6
	EPTentativeConnectionPending EPState = 7
	EPUnconfiguredTentative      EPState = 8
	EPConnected                  EPState = 9
	EPDisconnectPending          EPState = 10
	EPDisconnected               EPState = 11
	EPCompletionPending          EPState = 12
	EPConnectedSinglePath        EPState = 13
	EPConnectedMultiPath         EPState = 14
)

var epStateNames = [...]string{
	"UNCONNECTED", "UNCONFIGURED_UNCONNECTED", "RESERVED", "UNCONFIGURED_RESERVED",
	"PASSIVE_CONNECTION_PENDING", "UNCONFIGURED_PASSIVE", "ACTIVE_CONNECTION_PENDING",
	"TENTATIVE_CONNECTION_PENDING", "UNCONFIGURED_TENTATIVE", "CONNECTED",
	"DISCONNECT_PENDING", "DISCONNECTED", "COMPLETION_PENDING",
	"CONNECTED_SINGLE_PATH", "CONNECTED_MULTI_PATH",
}

func (s EPState) String() string {
	if s >= 0 && int(s) < len(epStateNames) {
		return "DAT_EP_STATE_" + epStateNames[s]
	}
	return fmt.Sprintf("EPState(%d)", int(s))
}

// quiescent reports the states in which the PZ may change ([SEED-modify]:
// "The only Endpoint states that are quiescent are UNCONNECTED and
// TENTATIVE_CONNECTION_PENDING").
func (s EPState) quiescent() bool {
	return s == EPUnconnected || s == EPTentativeConnectionPending
}

// subtype is the DAT_INVALID_STATE subtype that names s, as DAPL's
// dapls_ep_state_subtype computes it.
func (s EPState) subtype() Subtype {
	switch s {
	case EPUnconnected:
		return StateEPUnconnected
	case EPReserved:
		return StateEPReserved
	case EPPassiveConnectionPending:
		return StateEPPassConnPend
	case EPActiveConnectionPending:
		return StateEPActConnPending
	case EPTentativeConnectionPending:
		return StateEPTentConnPend
	case EPConnected:
		return StateEPConnected
	case EPDisconnectPending:
		return StateEPDiscPending
	case EPDisconnected:
		return StateEPDisconnected
	case EPCompletionPending:
		return StateEPComplPending
	}
	return NoSubtype
}
