package dat_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// region is registered memory with its triplet helpers.
type region struct {
	buf []byte
	lmr *dat.LMR
	p   dat.LMRParam
}

func register(t testing.TB, s side, pz *dat.PZ, n int, priv dat.MemPriv) region {
	t.Helper()
	buf := make([]byte, n)
	lmr, err := s.ia.CreateLMR(pz, buf, priv)
	require.NoError(t, err)
	p, err := lmr.Query()
	require.NoError(t, err)
	return region{buf: buf, lmr: lmr, p: p}
}

// seg is the local triplet for bytes [off, off+n) of the region.
func (r region) seg(off, n int) dat.LMRTriplet {
	return dat.LMRTriplet{Addr: r.p.Addr + uint64(off), Length: uint32(n), Context: r.p.Context}
}

// remote is the RMR triplet a peer uses for bytes [off, off+n).
func (r region) remote(off, n int) dat.RMRTriplet {
	return dat.RMRTriplet{Addr: r.p.Addr + uint64(off), Length: uint32(n), Context: r.p.RMRContext}
}

// Local segment checks of dat_ep_post_recv / dat_ep_post_send ([MAN12]):
// DAT_PROTECTION_VIOLATION when the LMR's PZ is not the EP's,
// DAT_PRIVILEGES_VIOLATION for an invalid LMR or one without local access,
// DAT_INVALID_PARAMETER for an IOV outside its LMR, and DAT_LENGTH_ERROR
// beyond the EP's message size.
func TestDTOLocalSegmentRules(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	p, err := ep.Query()
	require.NoError(t, err)
	rw := register(t, s, s.pz, 4096, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	ro := register(t, s, s.pz, 4096, dat.MemPrivLocalRead)
	pz2, err := s.ia.CreatePZ()
	require.NoError(t, err)
	other := register(t, s, pz2, 4096, dat.MemPrivLocalWrite)
	freed := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	require.NoError(t, freed.lmr.Free())

	cases := []struct {
		rule string
		iov  []dat.LMRTriplet
		typ  dat.Return
	}{
		{"an LMR of another PZ is a protection violation", []dat.LMRTriplet{other.seg(0, 64)}, dat.ProtectionViolation},
		{"an unknown lmr_context is a privileges violation", []dat.LMRTriplet{{Addr: rw.p.Addr, Length: 8, Context: 0xdead00}}, dat.PrivilegesViolation},
		{"a freed LMR is a privileges violation", []dat.LMRTriplet{freed.seg(0, 8)}, dat.PrivilegesViolation},
		{"a receive needs local write", []dat.LMRTriplet{ro.seg(0, 64)}, dat.PrivilegesViolation},
		{"a segment past the LMR's end", []dat.LMRTriplet{rw.seg(4090, 7)}, dat.InvalidParameter},
		{"a segment before the LMR's start", []dat.LMRTriplet{{Addr: rw.p.Addr - 1, Length: 4, Context: rw.p.Context}}, dat.InvalidParameter},
		{"more segments than max_recv_iov", func() []dat.LMRTriplet {
			iov := make([]dat.LMRTriplet, p.Attr.MaxRecvIOV+1)
			for i := range iov {
				iov[i] = rw.seg(i*8, 8)
			}
			return iov
		}(), dat.InvalidParameter},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			requireCode(t, ep.PostRecv(c.iov, 1, dat.CompletionDefault), c.typ, 0)
		})
	}
	t.Run("a zero-length triplet's other fields are ignored", func(t *testing.T) {
		require.NoError(t, ep.PostRecv([]dat.LMRTriplet{{Length: 0, Context: 0xdead00}, rw.seg(0, 64)}, 2, dat.CompletionDefault))
	})
	t.Run("DAT_LENGTH_ERROR beyond max_message_size", func(t *testing.T) {
		small := p
		small.Attr.MaxMessageSize = 16
		require.NoError(t, ep.Modify(dat.FieldMaxMessageSize, &small))
		requireCode(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 17)}, 3, dat.CompletionDefault), dat.LengthError, 0)
	})
}

// Completion-flag rules of the posts: "UNSIGNALLED flag when EP
// recv/request flags aren't UNSIGNALLED" is DAT_INVALID_PARAMETER; "Recv
// posting does not support DAT_COMPLETION_SUPPRESS_FLAG or
// DAT_COMPLETION_BARRIER_FENCE_FLAG".
func TestDTOCompletionFlagRules(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	rw := register(t, s, s.pz, 256, dat.MemPrivLocalWrite)
	for _, f := range []dat.CompletionFlags{dat.CompletionUnsignalled, dat.CompletionSuppress, dat.CompletionBarrierFence, dat.CompletionSolicitedWait} {
		requireCode(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, f), dat.InvalidParameter, 0)
	}
	// On an UNSIGNALLED recv stream, UNSIGNALLED posts are allowed.
	x, err := s.ia.CreateEVD(8, dat.EVDDTO)
	require.NoError(t, err)
	uep, err := s.ia.CreateEP(s.pz, x, nil, nil, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64, MaxRecvDTOs: 2, MaxRecvIOV: 1,
		RecvCompletionFlags: dat.CompletionUnsignalled})
	require.NoError(t, err)
	require.NoError(t, uep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionUnsignalled))
}

// "Recv Completion Flags can be changed ... but before posting of any
// Recvs." ([SEED-modify])
func TestSeedModifyRecvFlagsAfterPost(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	rw := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	p, err := ep.Query()
	require.NoError(t, err)
	require.NoError(t, ep.Modify(dat.FieldRecvCompletionFlags, &p), "allowed before any Recv")
	require.NoError(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionDefault))
	requireCode(t, ep.Modify(dat.FieldRecvCompletionFlags, &p), dat.InvalidState, 0)
}

// Send-side posts need a connection: "valid in CONNECTED and DISCONNECTED
// ...; any other state (incl. DISCONNECT_PENDING)" is DAT_INVALID_STATE.
// Receives may be posted in every state.
func TestDTOPostStates(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	rw := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	requireCode(t, ep.PostSend([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionDefault), dat.InvalidState, dat.StateEPUnconnected)
	requireCode(t, ep.PostRDMAWrite([]dat.LMRTriplet{rw.seg(0, 8)}, 1, rw.remote(0, 8), dat.CompletionDefault), dat.InvalidState, dat.StateEPUnconnected)
	requireCode(t, ep.PostRDMARead([]dat.LMRTriplet{rw.seg(0, 8)}, 1, rw.remote(0, 8), dat.CompletionDefault), dat.InvalidState, dat.StateEPUnconnected)
	require.NoError(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionDefault))
	st, err := ep.GetStatus()
	require.NoError(t, err)
	require.False(t, st.RecvIdle, "a posted receive is outstanding")
	require.True(t, st.RequestIdle)
}

// "In DISCONNECTED it is flushed at once": both a receive and a send posted
// to a DISCONNECTED EP complete with DAT_DTO_ERR_FLUSHED on their EVDs,
// and receives posted before the disconnect are flushed too.
func TestDTOFlushWhenDisconnected(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	cep, _, _ := connected(t, c, s, nil, nil)
	rw := register(t, c, c.pz, 64, dat.MemPrivLocalWrite)
	require.NoError(t, cep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 11, dat.CompletionDefault))
	require.NoError(t, cep.Disconnect(dat.CloseAbrupt))
	got := map[dat.EventNumber]int{}
	var flushed []uint64
	for len(got) < 2 {
		ev, _, err := c.evd.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err)
		got[ev.Number]++
		if ev.Number == dat.DTOCompletionEvent {
			require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status)
			flushed = append(flushed, ev.DTO.Cookie)
		}
	}
	require.Equal(t, []uint64{11}, flushed)
	require.NoError(t, cep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 12, dat.CompletionDefault))
	ev := waitFor(t, c.evd, dat.DTOCompletionEvent)
	require.Equal(t, uint64(12), ev.DTO.Cookie)
	require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status)
	require.Equal(t, dat.DTOReceive, ev.DTO.Op)
	require.NoError(t, cep.PostSend([]dat.LMRTriplet{rw.seg(0, 8)}, 13, dat.CompletionSuppress))
	ev = waitFor(t, c.evd, dat.DTOCompletionEvent)
	require.Equal(t, uint64(13), ev.DTO.Cookie, "errors are reported even with SUPPRESS")
	require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status)
	require.Equal(t, dat.DTOSend, ev.DTO.Op)
}

// "Receive buffers cannot be posted to the created Endpoint. Receive
// buffers must be posted to the SRQ" ([SEED-srq]); the project's error is
// DAT_INVALID_STATE, as the package documentation decides (the seed gives
// no code). SRQ posts must use the SRQ's PZ.
func TestSeedSRQNoRecvOnEP(t *testing.T) {
	s, srq := srqFixture(t, "lo")
	ep, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, srqAttr())
	require.NoError(t, err)
	rw := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	requireCode(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionDefault), dat.InvalidState, 0)
	require.NoError(t, srq.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1))
	pz2, err := s.ia.CreatePZ()
	require.NoError(t, err)
	other := register(t, s, pz2, 64, dat.MemPrivLocalWrite)
	requireCode(t, srq.PostRecv([]dat.LMRTriplet{other.seg(0, 8)}, 2), dat.ProtectionViolation, 0)
	q, err := srq.Query()
	require.NoError(t, err)
	require.Equal(t, 1, q.Posted)
}

// The request queue holds max_request_dtos: one more is
// DAT_INSUFFICIENT_RESOURCES.
func TestDTOQueueFull(t *testing.T) {
	s := newSide(t, "lo")
	ep, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64,
		MaxRecvDTOs: 2, MaxRecvIOV: 1, MaxRequestDTOs: 1, MaxRequestIOV: 1})
	require.NoError(t, err)
	rw := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	require.NoError(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(0, 8)}, 1, dat.CompletionDefault))
	require.NoError(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(8, 8)}, 2, dat.CompletionDefault))
	requireCode(t, ep.PostRecv([]dat.LMRTriplet{rw.seg(16, 8)}, 3, dat.CompletionDefault), dat.InsufficientResources, 0)
}

// An RDMA Read needs an outbound Read depth: with max_rdma_read_out 0 (the
// default) the post is refused instead of stalling the queue.
func TestDTOReadNeedsReadOut(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	cep, _, _ := connected(t, c, s, nil, nil)
	rw := register(t, c, c.pz, 64, dat.MemPrivLocalWrite)
	requireCode(t, cep.PostRDMARead([]dat.LMRTriplet{rw.seg(0, 8)}, 1, rw.remote(0, 8), dat.CompletionDefault), dat.InvalidState, 0)
}
