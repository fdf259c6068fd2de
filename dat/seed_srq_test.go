package dat_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Rules of dat_ep_create_with_srq ([SEED-srq]).

func srqFixture(t *testing.T, name string) (side, *dat.SRQ) {
	t.Helper()
	s := newSide(t, name)
	srq, err := s.ia.CreateSRQ(s.pz, dat.SRQAttr{MaxRecvDTOs: 16, MaxRecvIOV: 2})
	require.NoError(t, err)
	return s, srq
}

func srqAttr() *dat.EPAttr {
	return &dat.EPAttr{MaxMessageSize: 8192, MaxRDMASize: 65536, MaxRecvDTOs: 8, MaxRequestDTOs: 8,
		MaxRecvIOV: 1, MaxRequestIOV: 2, MaxRDMAReadIn: 2, MaxRDMAReadOut: 3}
}

// "Consumer can not specify NULL for ep_attributes."
func TestSeedSRQNullAttributes(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	_, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, nil)
	requireCode(t, err, dat.InvalidParameter, dat.Arg(7))
}

// "Handle for an instance of the Shared Receive Queue": a missing or freed
// SRQ is DAT_INVALID_HANDLE.
func TestSeedSRQHandle(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	_, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, nil, srqAttr())
	requireCode(t, err, dat.InvalidHandle, dat.HandleSRQ)
	require.NoError(t, srq.Free())
	_, err = s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, srqAttr())
	requireCode(t, err, dat.InvalidHandle, dat.HandleSRQ)
}

// "The Endpoint is created in the Unconnected state." "Created Endpoint has
// the exact Consumer requested values for max_recv_dtos, max_message_size,
// max_rdma_size, max_rdma_read_in, and max_rdma_read_out"; "at least" for
// max_request_dtos and max_request_iov; "max_recv_iov ... is ignored".
func TestSeedSRQAttributeExactness(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	want := srqAttr()
	want.MaxRecvIOV = 1 << 20 // ignored: far beyond any IA limit, yet accepted
	ep, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, want)
	require.NoError(t, err)
	require.Equal(t, dat.EPUnconnected, state(t, ep))
	p, err := ep.Query()
	require.NoError(t, err)
	got := p.Attr
	require.Equal(t, want.MaxRecvDTOs, got.MaxRecvDTOs)
	require.Equal(t, want.MaxMessageSize, got.MaxMessageSize)
	require.Equal(t, want.MaxRDMASize, got.MaxRDMASize)
	require.Equal(t, want.MaxRDMAReadIn, got.MaxRDMAReadIn)
	require.Equal(t, want.MaxRDMAReadOut, got.MaxRDMAReadOut)
	require.GreaterOrEqual(t, got.MaxRequestDTOs, want.MaxRequestDTOs)
	require.GreaterOrEqual(t, got.MaxRequestIOV, want.MaxRequestIOV)
	require.Equal(t, 2, got.MaxRecvIOV, "the EP takes the SRQ's max_recv_iov")
	require.Same(t, srq, p.SRQ)
}

// "If Provider cannot satisfy the Consumer requested attribute values the
// operation fails", and "the requested maximum RDMA Read IOV exceeds IA
// capabilities" is DAT_INVALID_PARAMETER.
func TestSeedSRQUnsatisfiable(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	iaAttr, _, err := s.ia.Query()
	require.NoError(t, err)
	for name, f := range map[string]func(a *dat.EPAttr){
		"max_rdma_read_in beyond the IA":  func(a *dat.EPAttr) { a.MaxRDMAReadIn = iaAttr.MaxRDMAReadIn + 1 },
		"max_rdma_read_iov beyond the IA": func(a *dat.EPAttr) { a.MaxRDMAReadIOV = iaAttr.MaxRDMAReadIOV + 1 },
		"max_recv_dtos beyond the IA":     func(a *dat.EPAttr) { a.MaxRecvDTOs = iaAttr.MaxDTOPerEP + 1 },
	} {
		t.Run(name, func(t *testing.T) {
			a := srqAttr()
			f(a)
			_, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, a)
			requireCode(t, err, dat.InvalidParameter, 0)
		})
	}
}

// "The SRQ PZ might or might not be the same as the EP one. Check Provider
// attribute for the support of different PZs between SRQ and its EPs."
// "pz_handle specified does not match the one for SRQ" is
// DAT_INVALID_PARAMETER when the provider lacks the support.
func TestSeedSRQPZDifference(t *testing.T) {
	for _, c := range []struct {
		ia      string
		support bool
	}{{"lo", true}, {"lo-samepz", false}} {
		t.Run(c.ia, func(t *testing.T) {
			s, srq := srqFixture(t, c.ia)
			_, prov, err := s.ia.Query()
			require.NoError(t, err)
			if c.ia == "lo" && testProvider != "iwarp" {
				// Whether an SRQ may serve EPs of another PZ is the
				// provider's choice (verbs says no); check that it
				// honours what it reports.
				c.support = prov.SRQEPPZDifferenceSupported
			}
			require.Equal(t, c.support, prov.SRQEPPZDifferenceSupported)
			pz2, err := s.ia.CreatePZ()
			require.NoError(t, err)
			_, err = s.ia.CreateEPWithSRQ(pz2, s.evd, s.evd, s.evd, srq, srqAttr())
			if c.support {
				require.NoError(t, err)
			} else {
				requireCode(t, err, dat.InvalidParameter, 0)
			}
			_, err = s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, srqAttr())
			require.NoError(t, err, "the SRQ's own PZ is always allowed")
		})
	}
}

// "SRQ can not be disassociated or replaced from created EP. The only way to
// disassociate SRQ from EP is to destroy EP." "The relationship between SRQ
// and EP is not effected by dat_ep_reset."
func TestSeedSRQBinding(t *testing.T) {
	c, srq := srqFixture(t, "lo")
	s := newSide(t, "lo")
	ep, err := c.ia.CreateEPWithSRQ(c.pz, c.evd, c.evd, c.evd, srq, srqAttr())
	require.NoError(t, err)
	p, err := ep.Query()
	require.NoError(t, err)
	p.SRQ = nil
	requireCode(t, ep.Modify(dat.FieldSRQ, &p), dat.InvalidParameter, 0)
	requireCode(t, srq.Free(), dat.InvalidState, dat.StateSRQInUse)

	// Connect, disconnect, reset: the SRQ stays.
	psp := s.psp(t)
	require.NoError(t, ep.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Reject([]byte("no")))
	waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
	require.Equal(t, dat.EPDisconnected, state(t, ep))
	require.NoError(t, ep.Reset())
	p, err = ep.Query()
	require.NoError(t, err)
	require.Same(t, srq, p.SRQ)
	require.NoError(t, ep.Free())
	require.NoError(t, srq.Free(), "freeing the EP released the SRQ")
}

// "If recv_evd_handle is used for Recv completions of an Endpoint that uses
// SRQ and whose Recv Completion Flag attribute is
// DAT_COMPLETION_EVD_THRESHOLD then all Endpoint DTO completion streams ...
// that use that recv_evd_handle must specify DAT_COMPLETION_EVD_THRESHOLD.
// Other event stream types can also use the same EVD."
func TestSeedSRQThresholdEVD(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	x, err := s.ia.CreateEVD(16, dat.EVDDefault)
	require.NoError(t, err)
	_, err = s.ia.CreateEPWithSRQ(s.pz, x, nil, x, srq, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64, MaxRecvDTOs: 1,
		RecvCompletionFlags: dat.CompletionEVDThreshold})
	require.NoError(t, err, "a connection stream may share the EVD")
	_, err = s.ia.CreateEP(s.pz, nil, x, nil, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64, MaxRequestDTOs: 1, MaxRequestIOV: 1,
		RequestCompletionFlags: dat.CompletionUnsignalled})
	requireCode(t, err, dat.InvalidParameter, 0)
}
