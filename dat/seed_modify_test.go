package dat_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Rules of dat_ep_modify(3DAT) ([SEED-modify]), transcribed here from the
// seed independently of the implementation's table, so this test checks
// that table against the seed.
const seedModify = "dat_ep_modify(3DAT)"

var (
	U   = dat.EPUnconnected
	R   = dat.EPReserved
	PCP = dat.EPPassiveConnectionPending
	TCP = dat.EPTentativeConnectionPending
	// "Can be modified when in Unconnected, Reserved, Passive Connection
	// (Request) Pending, and Tentative Connection Pending states."
	seedPreConnect = []dat.EPState{U, R, PCP, TCP}
	// "The only Endpoint states that are quiescent are
	// DAT_EP_STATE_UNCONNECTED and DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING."
	seedQuiescent = []dat.EPState{U, TCP}
)

var seedModifyRows = []struct {
	field dat.EPParamMask
	rule  string
	in    []dat.EPState // nil: "Cannot be modified."
}{
	{dat.FieldIA, "Interface Adapter: Cannot be modified.", nil},
	{dat.FieldState, "Endpoint State: Cannot be modified.", nil},
	{dat.FieldLocalAddr, "Local IA Address: Cannot be modified.", nil},
	{dat.FieldLocalPortQual, "Local Port Qualifier: Cannot be modified.", nil},
	{dat.FieldRemoteAddr, "Remote IA Address: Cannot be modified.", nil},
	{dat.FieldRemotePortQual, "Remote Port Qualifier: Cannot be modified.", nil},
	{dat.FieldPZ, "Protection Zone: Can be modified when in Quiescent, Unconnected, and Tentative Connection Pending states.", seedQuiescent},
	{dat.FieldRecvEVD, "In DTO Event Dispatcher: Unconnected, Reserved, Passive Connection Request Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldRequestEVD, "Out DTO Event Dispatcher: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldConnectEVD, "Connection Event Dispatcher: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldServiceType, "Service Type: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxMessageSize, "Maximum Message Size: Unconnected, Reserved, Passive Connection Request Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRDMASize, "Maximum RDMA Size: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldQoS, "Quality of Service: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldRecvCompletionFlags, "Recv Completion Flags: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldRequestCompletionFlags, "Request Completion Flags: Unconnected, Reserved, Passive Connection Request Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRecvDTOs, "Maximum Recv DTO: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRequestDTOs, "Maximum Request DTO: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRecvIOV, "Maximum Recv IOV: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRequestIOV, "Maximum Request IOV: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRDMAReadIn, "Maximum outstanding RDMA Read as target: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldMaxRDMAReadOut, "Maximum outstanding RDMA Read as originator: Unconnected, Reserved, Passive Connection Pending, Tentative Connection Pending.", seedPreConnect},
	{dat.FieldNumTransportAttr, "Num transport-specific attributes: Can be modified when in Quiescent (unconnected) state.", seedQuiescent},
	{dat.FieldTransportSpecificAttr, "Transport-specific endpoint attributes: Can be modified when in Quiescent (unconnected) state.", seedQuiescent},
	{dat.FieldNumProviderAttr, "Num provider-specific attributes: Can be modified when in Quiescent (unconnected) state.", seedQuiescent},
	{dat.FieldProviderSpecificAttr, "Provider-specific endpoint attributes: Can be modified when in Quiescent (unconnected) state.", seedQuiescent},
}

// epInState drives a fresh EP into one state. Each returns the EP; the
// fixtures' cleanups tear everything down.
type epInState struct {
	state dat.EPState
	make  func(t *testing.T, client, server side) *dat.EP
}

var reachableStates = []epInState{
	{dat.EPUnconnected, func(t *testing.T, c, s side) *dat.EP { return c.ep(t) }},
	{dat.EPReserved, func(t *testing.T, c, s side) *dat.EP {
		ep := s.ep(t)
		_, err := s.ia.CreateRSP(0, ep, s.evd)
		require.NoError(t, err)
		return ep
	}},
	{dat.EPPassiveConnectionPending, func(t *testing.T, c, s side) *dat.EP {
		ep := s.ep(t)
		rsp, err := s.ia.CreateRSP(0, ep, s.evd)
		require.NoError(t, err)
		require.NoError(t, c.ep(t).Connect(loopback, rsp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
		ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
		require.Nil(t, ev.CR.SP, "an RSP request event has no SP: the RSP is gone")
		return ep
	}},
	{dat.EPTentativeConnectionPending, func(t *testing.T, c, s side) *dat.EP {
		psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPProvider, nil)
		require.NoError(t, err)
		require.NoError(t, c.ep(t).Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
		ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
		p, err := ev.CR.CR.Query()
		require.NoError(t, err)
		require.NotNil(t, p.LocalEP)
		return p.LocalEP
	}},
	{dat.EPActiveConnectionPending, func(t *testing.T, c, s side) *dat.EP {
		peer := newRawPeer(t, func(_ int, conn net.Conn) { holdOpen(conn) })
		ep := c.ep(t)
		require.NoError(t, ep.Connect(loopback, peer.qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
		return ep
	}},
	{dat.EPConnected, func(t *testing.T, c, s side) *dat.EP {
		ep, _, _ := connected(t, c, s, nil, nil)
		return ep
	}},
	{dat.EPDisconnected, func(t *testing.T, c, s side) *dat.EP {
		ep, _, _ := connected(t, c, s, nil, nil)
		require.NoError(t, ep.Disconnect(dat.CloseAbrupt))
		waitFor(t, c.evd, dat.ConnectionEventDisconnected)
		return ep
	}},
}

func contains(states []dat.EPState, s dat.EPState) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

// TestSeedModifyTable: for every parameter the seed lists and every EP
// state that can be held still, modifying the parameter to its current
// value succeeds exactly in the seed's states, gives DAT_INVALID_STATE in
// the others and DAT_INVALID_PARAMETER for parameters that "Cannot be
// modified".
func TestSeedModifyTable(t *testing.T) {
	for _, st := range reachableStates {
		t.Run(st.state.String(), func(t *testing.T) {
			client, server := newSide(t, "lo"), newSide(t, "lo")
			ep := st.make(t, client, server)
			require.Equal(t, st.state, state(t, ep))
			for _, row := range seedModifyRows {
				p, err := ep.Query()
				require.NoError(t, err)
				err = ep.Modify(row.field, &p)
				switch {
				case row.in == nil:
					requireCode(t, err, dat.InvalidParameter, dat.NoSubtype)
				case contains(row.in, st.state):
					require.NoError(t, err, "%s: %s", seedModify, row.rule)
				default:
					requireCode(t, err, dat.InvalidState, dat.NoSubtype)
				}
				require.Equal(t, st.state, state(t, ep), "%s: Endpoint State cannot be changed by a dat_ep_modify() operation", seedModify)
			}
		})
	}
}

// TestSeedModifyOnlyMasked: "Providers modify values for ep_param_mask
// requested parameters only."
func TestSeedModifyOnlyMasked(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	before, err := ep.Query()
	require.NoError(t, err)
	p := before
	p.Attr.MaxRecvDTOs = 3
	p.Attr.MaxRequestDTOs = 5
	require.NoError(t, ep.Modify(dat.FieldMaxRecvDTOs, &p))
	after, err := ep.Query()
	require.NoError(t, err)
	require.Equal(t, 3, after.Attr.MaxRecvDTOs)
	require.Equal(t, before.Attr.MaxRequestDTOs, after.Attr.MaxRequestDTOs, "unmasked field changed")
}

// TestSeedModifyErrors covers the return values of dat_ep_modify.
func TestSeedModifyErrors(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	p, err := ep.Query()
	require.NoError(t, err)
	iaAttr, _, err := s.ia.Query()
	require.NoError(t, err)

	t.Run("DAT_INVALID_PARAMETER: ep_param_mask parameter is invalid", func(t *testing.T) {
		requireCode(t, ep.Modify(0, &p), dat.InvalidParameter, dat.NoSubtype)
		requireCode(t, ep.Modify(1<<40, &p), dat.InvalidParameter, dat.NoSubtype)
	})
	t.Run("DAT_INVALID_PARAMETER: missing ep_param", func(t *testing.T) {
		requireCode(t, ep.Modify(dat.FieldQoS, nil), dat.InvalidParameter, dat.Arg(3))
	})
	t.Run("DAT_INVALID_PARAMETER: requested value invalid or not supported", func(t *testing.T) {
		bad := p
		bad.Attr.MaxRecvDTOs = iaAttr.MaxDTOPerEP + 1
		requireCode(t, ep.Modify(dat.FieldMaxRecvDTOs, &bad), dat.InvalidParameter, dat.NoSubtype)
		bad = p
		bad.Attr.QoS = dat.QoSPremium
		requireCode(t, ep.Modify(dat.FieldQoS, &bad), dat.InvalidParameter, dat.NoSubtype)
		bad = p
		bad.Attr.RecvCompletionFlags = dat.CompletionSuppress
		requireCode(t, ep.Modify(dat.FieldRecvCompletionFlags, &bad), dat.InvalidParameter, dat.NoSubtype)
		bad = p
		bad.Attr.RequestCompletionFlags = dat.CompletionSolicitedWait
		requireCode(t, ep.Modify(dat.FieldRequestCompletionFlags, &bad), dat.InvalidParameter, dat.NoSubtype)
	})
	t.Run("all or nothing", func(t *testing.T) {
		bad := p
		bad.Attr.MaxRequestDTOs = 7
		bad.Attr.MaxRecvDTOs = iaAttr.MaxDTOPerEP + 1
		requireCode(t, ep.Modify(dat.FieldMaxRecvDTOs|dat.FieldMaxRequestDTOs, &bad), dat.InvalidParameter, dat.NoSubtype)
		now, err := ep.Query()
		require.NoError(t, err)
		require.Equal(t, p.Attr.MaxRequestDTOs, now.Attr.MaxRequestDTOs)
	})
	t.Run("DAT_INVALID_HANDLE: ep_handle is invalid", func(t *testing.T) {
		gone := s.ep(t)
		require.NoError(t, gone.Free())
		requireCode(t, gone.Modify(dat.FieldQoS, &p), dat.InvalidHandle, dat.HandleEP)
		var nilEP *dat.EP
		requireCode(t, nilEP.Modify(dat.FieldQoS, &p), dat.InvalidHandle, dat.HandleEP)
	})
}

// TestSeedModifyPZ: "Protection Zone can be changed only when the Endpoint
// is in quiescent state." The EP's reference moves to the new PZ.
func TestSeedModifyPZ(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	pz2, err := s.ia.CreatePZ()
	require.NoError(t, err)
	p, err := ep.Query()
	require.NoError(t, err)
	p.PZ = pz2
	require.NoError(t, ep.Modify(dat.FieldPZ, &p))
	now, err := ep.Query()
	require.NoError(t, err)
	require.Same(t, pz2, now.PZ)
	require.NoError(t, s.pz.Free(), "the old PZ is no longer in use")
	requireCode(t, pz2.Free(), dat.InvalidState, dat.StatePZInUse)
}

// TestSeedModifyEVDs: the EVD references move with dat_ep_modify.
func TestSeedModifyEVDs(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	evd2, err := s.ia.CreateEVD(8, dat.EVDDefault)
	require.NoError(t, err)
	p, err := ep.Query()
	require.NoError(t, err)
	p.RecvEVD, p.RequestEVD, p.ConnectEVD = evd2, evd2, evd2
	require.NoError(t, ep.Modify(dat.FieldRecvEVD|dat.FieldRequestEVD|dat.FieldConnectEVD, &p))
	require.NoError(t, s.evd.Free(), "the old EVD is no longer in use")
	requireCode(t, evd2.Free(), dat.InvalidState, dat.StateEVDInUse)
}

// "DAT_INVALID_HANDLE: The ep_handle parameter is invalid." That is the
// only handle dat_ep_modify reports as such: a PZ or EVD inside ep_param
// that is freed, belongs to another IA, or is an EVD lacking the flag its
// stream needs (DTO for the recv and request EVDs, CONNECTION for the
// connect EVD) is "one of the requested Endpoint parameters ... was
// invalid", DAT_INVALID_PARAMETER, with DAT_INVALID_ARG3 naming ep_param.
// Nothing changes. dat_ep_create keeps DAT_INVALID_HANDLE for the same
// handles passed as its own arguments.
func TestSeedModifyInvalidHandleInParam(t *testing.T) {
	s, other := newSide(t, "lo"), newSide(t, "lo")
	connOnly, err := s.ia.CreateEVD(4, dat.EVDConnection)
	require.NoError(t, err)
	dtoOnly, err := s.ia.CreateEVD(4, dat.EVDDTO)
	require.NoError(t, err)
	freedPZ, err := s.ia.CreatePZ()
	require.NoError(t, err)
	require.NoError(t, freedPZ.Free())
	freedEVD, err := s.ia.CreateEVD(4, dat.EVDDefault)
	require.NoError(t, err)
	require.NoError(t, freedEVD.Free())

	cases := []struct {
		rule  string
		field dat.EPParamMask
		set   func(p *dat.EPParam)
		// create is the same handle given to dat_ep_create, and the
		// handle subtype it must give there.
		create    func() (*dat.EP, error)
		createSub dat.Subtype
	}{
		{"freed PZ", dat.FieldPZ, func(p *dat.EPParam) { p.PZ = freedPZ },
			func() (*dat.EP, error) { return s.ia.CreateEP(freedPZ, s.evd, s.evd, s.evd, nil) }, dat.HandlePZ},
		{"PZ of another IA", dat.FieldPZ, func(p *dat.EPParam) { p.PZ = other.pz },
			func() (*dat.EP, error) { return s.ia.CreateEP(other.pz, s.evd, s.evd, s.evd, nil) }, dat.HandlePZ},
		{"freed recv EVD", dat.FieldRecvEVD, func(p *dat.EPParam) { p.RecvEVD = freedEVD },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, freedEVD, s.evd, s.evd, nil) }, dat.HandleEVDRecv},
		{"recv EVD of another IA", dat.FieldRecvEVD, func(p *dat.EPParam) { p.RecvEVD = other.evd },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, other.evd, s.evd, s.evd, nil) }, dat.HandleEVDRecv},
		{"recv EVD without the DTO flag", dat.FieldRecvEVD, func(p *dat.EPParam) { p.RecvEVD = connOnly },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, connOnly, s.evd, s.evd, nil) }, dat.HandleEVDRecv},
		{"freed request EVD", dat.FieldRequestEVD, func(p *dat.EPParam) { p.RequestEVD = freedEVD },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, freedEVD, s.evd, nil) }, dat.HandleEVDRequest},
		{"request EVD of another IA", dat.FieldRequestEVD, func(p *dat.EPParam) { p.RequestEVD = other.evd },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, other.evd, s.evd, nil) }, dat.HandleEVDRequest},
		{"request EVD without the DTO flag", dat.FieldRequestEVD, func(p *dat.EPParam) { p.RequestEVD = connOnly },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, connOnly, s.evd, nil) }, dat.HandleEVDRequest},
		{"freed connect EVD", dat.FieldConnectEVD, func(p *dat.EPParam) { p.ConnectEVD = freedEVD },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, s.evd, freedEVD, nil) }, dat.HandleEVDConn},
		{"connect EVD of another IA", dat.FieldConnectEVD, func(p *dat.EPParam) { p.ConnectEVD = other.evd },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, s.evd, other.evd, nil) }, dat.HandleEVDConn},
		{"connect EVD without the CONNECTION flag", dat.FieldConnectEVD, func(p *dat.EPParam) { p.ConnectEVD = dtoOnly },
			func() (*dat.EP, error) { return s.ia.CreateEP(s.pz, s.evd, s.evd, dtoOnly, nil) }, dat.HandleEVDConn},
	}
	ep := s.ep(t)
	before, err := ep.Query()
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			p := before
			c.set(&p)
			err := ep.Modify(c.field, &p)
			requireExact(t, err, dat.InvalidParameter, dat.Arg(3))
			require.NotErrorIs(t, err, dat.ErrInvalidHandle)
			// Also when the bad handle comes with valid fields: all or
			// nothing.
			p.Attr.MaxRequestDTOs = before.Attr.MaxRequestDTOs + 1
			requireExact(t, ep.Modify(c.field|dat.FieldMaxRequestDTOs, &p), dat.InvalidParameter, dat.Arg(3))
			after, err := ep.Query()
			require.NoError(t, err)
			require.Same(t, before.PZ, after.PZ)
			require.Same(t, before.RecvEVD, after.RecvEVD)
			require.Same(t, before.RequestEVD, after.RequestEVD)
			require.Same(t, before.ConnectEVD, after.ConnectEVD)
			require.Equal(t, before.Attr.MaxRequestDTOs, after.Attr.MaxRequestDTOs)

			_, err = c.create()
			requireExact(t, err, dat.InvalidHandle, c.createSub)
		})
	}
	// The EP keeps working with its own handles.
	p := before
	require.NoError(t, ep.Modify(dat.FieldPZ|dat.FieldRecvEVD|dat.FieldRequestEVD|dat.FieldConnectEVD, &p))
}
