package dat_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Rules of dat_ep_create(3DAT) ([SEED-create]).

// "The Endpoint is created in the Unconnected state."
func TestSeedCreateUnconnected(t *testing.T) {
	s := newSide(t, "lo")
	require.Equal(t, dat.EPUnconnected, state(t, s.ep(t)))
}

// "If the Consumer specifies NULL, the Provider fills it with its default
// Endpoint attributes." The defaults are reasonable, consistent with the
// EVDs given, and reported by dat_ep_query.
func TestSeedCreateNullAttributes(t *testing.T) {
	s := newSide(t, "lo")
	iaAttr, _, err := s.ia.Query()
	require.NoError(t, err)
	p, err := s.ep(t).Query()
	require.NoError(t, err)
	a := p.Attr
	require.Equal(t, dat.ServiceTypeRC, a.ServiceType)
	require.Positive(t, a.MaxMessageSize)
	require.LessOrEqual(t, a.MaxMessageSize, iaAttr.MaxMessageSize)
	require.Positive(t, a.MaxRDMASize)
	require.Positive(t, a.MaxRecvDTOs)
	require.Positive(t, a.MaxRequestDTOs)
	require.Positive(t, a.MaxRecvIOV)
	require.Positive(t, a.MaxRequestIOV)
	require.Zero(t, a.MaxRDMAReadIn, "RDMA Read depths default to 0, as dat_ep_create_with_srq recommends")
	require.Zero(t, a.MaxRDMAReadOut)

	// With no DTO EVDs the defaults carry no DTOs, so they stay valid.
	ep, err := s.ia.CreateEP(s.pz, nil, nil, s.evd, nil)
	require.NoError(t, err)
	p, err = ep.Query()
	require.NoError(t, err)
	require.Zero(t, p.Attr.MaxRecvDTOs)
	require.Zero(t, p.Attr.MaxRequestDTOs)
}

// "DAT_HANDLE_NULL specifies that the Consumer is not interested in events
// for ..." each of the three streams.
func TestSeedCreateNullEVDs(t *testing.T) {
	s := newSide(t, "lo")
	ep, err := s.ia.CreateEP(s.pz, nil, nil, nil, nil)
	require.NoError(t, err)
	p, err := ep.Query()
	require.NoError(t, err)
	require.Nil(t, p.RecvEVD)
	require.Nil(t, p.RequestEVD)
	require.Nil(t, p.ConnectEVD)
}

// The return values of dat_ep_create.
func TestSeedCreateErrors(t *testing.T) {
	s := newSide(t, "lo")
	iaAttr, _, err := s.ia.Query()
	require.NoError(t, err)
	connOnly, err := s.ia.CreateEVD(4, dat.EVDConnection)
	require.NoError(t, err)
	dtoOnly, err := s.ia.CreateEVD(4, dat.EVDDTO)
	require.NoError(t, err)
	freedPZ, err := s.ia.CreatePZ()
	require.NoError(t, err)
	require.NoError(t, freedPZ.Free())
	other := newSide(t, "lo")

	base := func() *dat.EPAttr {
		a := &dat.EPAttr{MaxMessageSize: 4096, MaxRDMASize: 4096, MaxRecvDTOs: 4, MaxRequestDTOs: 4, MaxRecvIOV: 1, MaxRequestIOV: 1}
		return a
	}
	with := func(f func(a *dat.EPAttr)) *dat.EPAttr { a := base(); f(a); return a }
	cases := []struct {
		rule          string
		pz            *dat.PZ
		recv, req, cn *dat.EVD
		attr          *dat.EPAttr
		typ           dat.Return
		sub           dat.Subtype
	}{
		{"DAT_INVALID_HANDLE: freed PZ", freedPZ, s.evd, s.evd, s.evd, nil, dat.InvalidHandle, dat.HandlePZ},
		{"DAT_INVALID_HANDLE: PZ of another IA", other.pz, s.evd, s.evd, s.evd, nil, dat.InvalidHandle, dat.HandlePZ},
		{"DAT_INVALID_HANDLE: recv EVD cannot take DTO completions", s.pz, connOnly, s.evd, s.evd, nil, dat.InvalidHandle, dat.HandleEVDRecv},
		{"DAT_INVALID_HANDLE: request EVD cannot take DTO completions", s.pz, s.evd, connOnly, s.evd, nil, dat.InvalidHandle, dat.HandleEVDRequest},
		{"DAT_INVALID_HANDLE: connect EVD cannot take connection events", s.pz, s.evd, s.evd, dtoOnly, nil, dat.InvalidHandle, dat.HandleEVDConn},
		{"DAT_INVALID_PARAMETER: service type other than RC", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.ServiceType = 3 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: Recv posting does not support SUPPRESS", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.RecvCompletionFlags = dat.CompletionSuppress }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: Recv posting does not support BARRIER_FENCE", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.RecvCompletionFlags = dat.CompletionBarrierFence }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: request completion flags are UNSIGNALLED or EVD_THRESHOLD", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.RequestCompletionFlags = dat.CompletionSolicitedWait }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: recv EVD NULL but max_recv_dtos set", s.pz, nil, s.evd, s.evd, base(), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: request EVD NULL but max_request_dtos set", s.pz, s.evd, nil, s.evd, base(), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: recv EVD without max_recv_dtos", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRecvDTOs = 0 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: recv EVD with zero max_recv_iov", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRecvIOV = 0 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: max_recv_dtos beyond the IA", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRecvDTOs = iaAttr.MaxDTOPerEP + 1 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: max_request_iov beyond the IA", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRequestIOV = iaAttr.MaxIOVSegments + 1 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: RDMA Read in beyond the IA", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRDMAReadIn = iaAttr.MaxRDMAReadIn + 1 }), dat.InvalidParameter, 0},
		{"DAT_INVALID_PARAMETER: negative count", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.MaxRequestDTOs = -1 }), dat.InvalidParameter, 0},
		{"DAT_MODEL_NOT_SUPPORTED: the requested Provider Model (QoS) is not supported", s.pz, s.evd, s.evd, s.evd, with(func(a *dat.EPAttr) { a.QoS = dat.QoSLowLatency }), dat.ModelNotSupported, 0},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			_, err := s.ia.CreateEP(c.pz, c.recv, c.req, c.cn, c.attr)
			requireCode(t, err, c.typ, c.sub)
		})
	}
	t.Run("DAT_INVALID_HANDLE: closed IA", func(t *testing.T) {
		var nilIA *dat.IA
		_, err := nilIA.CreateEP(nil, nil, nil, nil, nil)
		requireCode(t, err, dat.InvalidHandle, dat.HandleIA)
	})
}

// "The Consumer cannot specify a request_evd_handle (recv_evd_handle) with
// Request Completion Flags (Recv Completion Flags) that do not match the
// other Endpoint Completion Flags for the DTO/RMR completion streams that
// use the same EVD", and the rules that follow in the seed's USAGE.
func TestSeedCreateCompletionFlagRules(t *testing.T) {
	attr := func(recv, req dat.CompletionFlags, hasRecv, hasReq bool) *dat.EPAttr {
		a := &dat.EPAttr{MaxMessageSize: 4096, MaxRDMASize: 4096, RecvCompletionFlags: recv, RequestCompletionFlags: req}
		if hasRecv {
			a.MaxRecvDTOs, a.MaxRecvIOV = 2, 1
		}
		if hasReq {
			a.MaxRequestDTOs, a.MaxRequestIOV = 2, 1
		}
		return a
	}
	const (
		thr = dat.CompletionEVDThreshold
		uns = dat.CompletionUnsignalled
		sol = dat.CompletionSolicitedWait
	)
	t.Run("request flags must match the other DTO streams on the EVD", func(t *testing.T) {
		s := newSide(t, "lo")
		x, err := s.ia.CreateEVD(8, dat.EVDDTO)
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, nil, x, nil, attr(thr, uns, false, true))
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, nil, x, nil, attr(thr, thr, false, true))
		requireCode(t, err, dat.InvalidParameter, 0)
	})
	t.Run("an EVD fed by other streams only takes DAT_COMPLETION_EVD_THRESHOLD", func(t *testing.T) {
		s := newSide(t, "lo")
		x, err := s.ia.CreateEVD(8, dat.EVDDTO|dat.EVDConnection)
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, nil, x, x, attr(thr, uns, false, true))
		requireCode(t, err, dat.InvalidParameter, 0)
		_, err = s.ia.CreateEP(s.pz, nil, x, x, attr(thr, thr, false, true))
		require.NoError(t, err)
		// The same rule read from the other side: a CR stream cannot join an
		// EVD that carries UNSIGNALLED DTO streams.
		y, err := s.ia.CreateEVD(8, dat.EVDDTO|dat.EVDCR)
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, nil, y, nil, attr(thr, uns, false, true))
		require.NoError(t, err)
		_, err = s.ia.CreatePSPAny(y, dat.PSPConsumer, nil)
		requireCode(t, err, dat.InvalidParameter, 0)
	})
	t.Run("UNSIGNALLED on an EVD makes every request and recv stream on it UNSIGNALLED", func(t *testing.T) {
		s := newSide(t, "lo")
		x, err := s.ia.CreateEVD(8, dat.EVDDTO)
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, nil, x, nil, attr(thr, uns, false, true))
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, x, nil, nil, attr(thr, thr, true, false))
		requireCode(t, err, dat.InvalidParameter, 0)
		_, err = s.ia.CreateEP(s.pz, x, nil, nil, attr(uns, thr, true, false))
		require.NoError(t, err)
		_, _, err = x.Wait(dat.TimeoutOf(1000), 2)
		requireCode(t, err, dat.InvalidState, 0)
	})
	t.Run("SOLICITED_WAIT recv: same flags for every recv stream and no other stream type", func(t *testing.T) {
		s := newSide(t, "lo")
		x, err := s.ia.CreateEVD(8, dat.EVDDefault)
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, x, nil, nil, attr(sol, thr, true, false))
		require.NoError(t, err)
		_, err = s.ia.CreateEP(s.pz, x, nil, nil, attr(thr, thr, true, false))
		requireCode(t, err, dat.InvalidParameter, 0)
		_, err = s.ia.CreateEP(s.pz, nil, x, nil, attr(thr, thr, false, true))
		requireCode(t, err, dat.InvalidParameter, 0)
		_, err = s.ia.CreateEP(s.pz, nil, nil, x, attr(thr, thr, false, false))
		requireCode(t, err, dat.InvalidParameter, 0)
		_, err = s.ia.CreateEP(s.pz, x, nil, nil, attr(sol, thr, true, false))
		require.NoError(t, err)
		_, _, err = x.Wait(dat.TimeoutOf(1000), 2)
		requireCode(t, err, dat.InvalidState, 0)
	})
}

// "Consumer might not be able to do any posts to the Endpoint or use the
// Endpoint in connection establishment until certain Endpoint attributes
// are set": an EP without a PZ cannot connect until Modify gives it one.
func TestSeedCreateWithoutPZ(t *testing.T) {
	c, s := newSide(t, "lo"), newSide(t, "lo")
	psp := s.psp(t)
	ep, err := c.ia.CreateEP(nil, c.evd, c.evd, c.evd, nil)
	require.NoError(t, err)
	err = ep.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault)
	requireCode(t, err, dat.InvalidState, dat.StateEPNotReady)
	p, err := ep.Query()
	require.NoError(t, err)
	p.PZ = c.pz
	require.NoError(t, ep.Modify(dat.FieldPZ, &p))
	require.NoError(t, ep.Connect(loopback, psp.Qual(), dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Reject([]byte("no")))
	waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
}

// "DAT_INVALID_PARAMETER: ... exceeds IA limits" for max_message_size,
// where the IA's limit leaves room above it (a verbs device may report the
// full 32-bit range).
func TestSeedCreateMessageSizeBeyondIA(t *testing.T) {
	s := newSide(t, "lo")
	iaAttr, _, err := s.ia.Query()
	require.NoError(t, err)
	if iaAttr.MaxMessageSize == ^uint32(0) {
		t.Skip("the IA allows every 32-bit message size")
	}
	a := &dat.EPAttr{MaxMessageSize: iaAttr.MaxMessageSize + 1, MaxRDMASize: 64, MaxRecvDTOs: 1, MaxRecvIOV: 1, MaxRequestDTOs: 1, MaxRequestIOV: 1}
	_, err = s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, a)
	requireCode(t, err, dat.InvalidParameter, 0)
	srq, err := s.ia.CreateSRQ(s.pz, dat.SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1})
	require.NoError(t, err)
	_, err = s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, a)
	requireCode(t, err, dat.InvalidParameter, 0)
}

// "If request_evd_handle (recv_evd_handle) is used for an EVD that is fed
// by any event stream other than DTO or RMR completion event streams, only
// DAT_COMPLETION_THRESHOLD is valid for Request/Recv Completion Flags for
// the Endpoint completion streams that use that EVD." A software event
// stream (dat_evd_post_se) is such a stream, and an EVD created with the
// software flag counts as fed by it from its creation. dat_ep_create,
// dat_ep_create_with_srq and dat_ep_modify all refuse other flags with
// DAT_INVALID_PARAMETER, so dat_evd_post_se never meets them.
func TestSeedCreateSoftwareEVD(t *testing.T) {
	const (
		def = dat.CompletionDefault
		thr = dat.CompletionEVDThreshold
		uns = dat.CompletionUnsignalled
		sol = dat.CompletionSolicitedWait
	)
	// Each case breaks no rule but the software one: the same streams are
	// accepted on an EVD without the software flag.
	type streams struct {
		name          string
		recv, req     dat.CompletionFlags
		onRecv, onReq bool // which of the EP's streams use the EVD
	}
	refused := []streams{
		{"UNSIGNALLED request stream", thr, uns, false, true},
		{"UNSIGNALLED recv and request streams", uns, uns, true, true},
		{"UNSIGNALLED recv stream", uns, thr, true, false},
		{"SOLICITED_WAIT recv stream", sol, thr, true, false},
	}
	accepted := []streams{
		{"EVD_THRESHOLD recv and request streams", thr, thr, true, true},
		{"default flags (EVD_THRESHOLD)", def, def, true, true},
	}
	attr := func(c streams) *dat.EPAttr {
		a := &dat.EPAttr{MaxMessageSize: 4096, MaxRDMASize: 4096, RecvCompletionFlags: c.recv, RequestCompletionFlags: c.req}
		if c.onRecv {
			a.MaxRecvDTOs, a.MaxRecvIOV = 2, 1
		}
		if c.onReq {
			a.MaxRequestDTOs, a.MaxRequestIOV = 2, 1
		}
		return a
	}
	evds := func(c streams, e *dat.EVD) (recv, req *dat.EVD) {
		if c.onRecv {
			recv = e
		}
		if c.onReq {
			req = e
		}
		return recv, req
	}
	// Nothing is posted to the software EVDs before the checks: the flag
	// alone makes an EVD software-fed.
	newEVDs := func(t *testing.T, s side) (sw, plain *dat.EVD) {
		t.Helper()
		sw, err := s.ia.CreateEVD(8, dat.EVDDTO|dat.EVDSoftware)
		require.NoError(t, err)
		plain, err = s.ia.CreateEVD(8, dat.EVDDTO)
		require.NoError(t, err)
		return sw, plain
	}

	t.Run("dat_ep_create", func(t *testing.T) {
		for _, c := range refused {
			t.Run(c.name, func(t *testing.T) {
				s := newSide(t, "lo")
				sw, plain := newEVDs(t, s)
				recv, req := evds(c, sw)
				_, err := s.ia.CreateEP(s.pz, recv, req, nil, attr(c))
				requireExact(t, err, dat.InvalidParameter, dat.NoSubtype)
				recv, req = evds(c, plain)
				_, err = s.ia.CreateEP(s.pz, recv, req, nil, attr(c))
				require.NoError(t, err)
			})
		}
		for _, c := range accepted {
			t.Run(c.name, func(t *testing.T) {
				s := newSide(t, "lo")
				sw, _ := newEVDs(t, s)
				recv, req := evds(c, sw)
				_, err := s.ia.CreateEP(s.pz, recv, req, nil, attr(c))
				require.NoError(t, err)
			})
		}
	})

	t.Run("dat_ep_create_with_srq", func(t *testing.T) {
		srqAttrFor := func(c streams) *dat.EPAttr {
			a := srqAttr()
			a.RecvCompletionFlags, a.RequestCompletionFlags = c.recv, c.req
			if !c.onReq {
				a.MaxRequestDTOs, a.MaxRequestIOV = 0, 0
			}
			return a
		}
		for _, c := range refused {
			if !c.onRecv {
				continue // an SRQ EP always has a recv stream here
			}
			t.Run(c.name, func(t *testing.T) {
				s, srq := srqFixture(t, "lo")
				sw, plain := newEVDs(t, s)
				recv, req := evds(c, sw)
				_, err := s.ia.CreateEPWithSRQ(s.pz, recv, req, nil, srq, srqAttrFor(c))
				requireExact(t, err, dat.InvalidParameter, dat.NoSubtype)
				recv, req = evds(c, plain)
				_, err = s.ia.CreateEPWithSRQ(s.pz, recv, req, nil, srq, srqAttrFor(c))
				require.NoError(t, err)
			})
		}
		t.Run("UNSIGNALLED request stream", func(t *testing.T) {
			s, srq := srqFixture(t, "lo")
			sw, plain := newEVDs(t, s)
			a := srqAttr()
			a.RequestCompletionFlags = uns
			_, err := s.ia.CreateEPWithSRQ(s.pz, plain, sw, nil, srq, a)
			requireExact(t, err, dat.InvalidParameter, dat.NoSubtype)
		})
		for _, c := range accepted {
			t.Run(c.name, func(t *testing.T) {
				s, srq := srqFixture(t, "lo")
				sw, _ := newEVDs(t, s)
				recv, req := evds(c, sw)
				_, err := s.ia.CreateEPWithSRQ(s.pz, recv, req, nil, srq, srqAttrFor(c))
				require.NoError(t, err)
			})
		}
	})

	t.Run("dat_ep_modify", func(t *testing.T) {
		const (
			evdMask   = dat.FieldRecvEVD | dat.FieldRequestEVD
			flagsMask = dat.FieldRecvCompletionFlags | dat.FieldRequestCompletionFlags
			sizeMask  = dat.FieldMaxRecvDTOs | dat.FieldMaxRecvIOV | dat.FieldMaxRequestDTOs | dat.FieldMaxRequestIOV
		)
		for _, c := range refused {
			t.Run(c.name, func(t *testing.T) {
				s := newSide(t, "lo")
				sw, plain := newEVDs(t, s)

				// Giving an EP without DTO streams streams with these flags
				// on sw.
				ep, err := s.ia.CreateEP(s.pz, nil, nil, nil, nil)
				require.NoError(t, err)
				p, err := ep.Query()
				require.NoError(t, err)
				p.RecvEVD, p.RequestEVD = evds(c, sw)
				p.Attr = *attr(c)
				requireExact(t, ep.Modify(evdMask|flagsMask|sizeMask, &p), dat.InvalidParameter, dat.Arg(3))
				now, err := ep.Query()
				require.NoError(t, err)
				require.Nil(t, now.RecvEVD)
				require.Nil(t, now.RequestEVD)

				// Moving streams with these flags from a plain EVD to sw.
				recv, req := evds(c, plain)
				ep, err = s.ia.CreateEP(s.pz, recv, req, nil, attr(c))
				require.NoError(t, err)
				p, err = ep.Query()
				require.NoError(t, err)
				p.RecvEVD, p.RequestEVD = evds(c, sw)
				requireExact(t, ep.Modify(evdMask, &p), dat.InvalidParameter, dat.Arg(3))
				now, err = ep.Query()
				require.NoError(t, err)
				require.Equal(t, recv, now.RecvEVD)
				require.Equal(t, req, now.RequestEVD)

				// Changing to these flags streams already on sw.
				ep, err = s.ia.CreateEP(s.pz, recv, req, nil, attr(c))
				require.NoError(t, err)
				p, err = ep.Query()
				require.NoError(t, err)
				p.RecvEVD, p.RequestEVD = evds(c, sw)
				p.Attr.RecvCompletionFlags, p.Attr.RequestCompletionFlags = thr, thr
				require.NoError(t, ep.Modify(evdMask|flagsMask, &p))
				p.Attr.RecvCompletionFlags, p.Attr.RequestCompletionFlags = c.recv, c.req
				requireExact(t, ep.Modify(flagsMask, &p), dat.InvalidParameter, dat.Arg(3))
				now, err = ep.Query()
				require.NoError(t, err)
				require.Equal(t, thr, now.Attr.RecvCompletionFlags)
				require.Equal(t, thr, now.Attr.RequestCompletionFlags)
			})
		}
	})

	t.Run("dat_evd_post_se", func(t *testing.T) {
		// The reverse direction: every EP stream that reaches an EVD with
		// the software flag is EVD_THRESHOLD, so posting software events
		// is always allowed, and so is waiting with a threshold above 1
		// (which an UNSIGNALLED or SOLICITED_WAIT stream would forbid).
		s := newSide(t, "lo")
		sw, _ := newEVDs(t, s)
		_, err := s.ia.CreateEP(s.pz, sw, sw, nil, attr(accepted[0]))
		require.NoError(t, err)
		require.NoError(t, sw.PostSE(1))
		require.NoError(t, sw.PostSE(2))
		ev, nmore, err := sw.Wait(dat.TimeoutOf(eventWait), 2)
		require.NoError(t, err)
		require.Equal(t, dat.SoftwareEvent, ev.Number)
		require.Equal(t, 1, ev.Software)
		require.Equal(t, 1, nmore)
	})
}
