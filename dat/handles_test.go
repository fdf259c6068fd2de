package dat_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Handles and reference counting: an EP holds its PZ and EVDs, which
// cannot be freed while referenced (DAT_INVALID_STATE, PZ_IN_USE or
// EVD_IN_USE); and, from the package documentation, "Using a nil, freed or
// closed object gives DAT_INVALID_HANDLE with the subtype naming the
// object".

// openClosable opens an IA that the test closes itself; the cleanup
// closes it abruptly unless the test already did.
func openClosable(t testing.TB, name string) *dat.IA {
	t.Helper()
	ia, err := dat.OpenIA(context.Background(), name, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := ia.Close(dat.CloseAbrupt); err != nil && dat.Code(err).Type() != dat.InvalidHandle {
			t.Errorf("closing the IA: %v", err)
		}
	})
	return ia
}

// requireExact checks the whole DAT_RETURN: class ERROR, type and subtype
// (NoSubtype included).
func requireExact(t testing.TB, err error, typ dat.Return, sub dat.Subtype) {
	t.Helper()
	require.Error(t, err)
	var de *dat.Error
	require.True(t, errors.As(err, &de), "not a *dat.Error: %v", err)
	require.Equal(t, (dat.ClassError | typ | dat.Return(sub)).String(), de.Code.String(), "%v", err)
	require.Equal(t, dat.ClassError|typ|dat.Return(sub), de.Code, "%v", err)
}

// handleCase is one call on an invalid handle and the code it must give.
type handleCase struct {
	call string
	fn   func() error
	typ  dat.Return
	sub  dat.Subtype
}

func runHandleCases(t *testing.T, cases []handleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.call, func(t *testing.T) { requireExact(t, c.fn(), c.typ, c.sub) })
	}
}

func ih(call string, sub dat.Subtype, fn func() error) handleCase {
	return handleCase{call: call, fn: fn, typ: dat.InvalidHandle, sub: sub}
}

func second[T any](_ T, err error) error { return err }

func third[A, B any](_ A, _ B, err error) error { return err }

var smallSRQ = dat.SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1}

// "DAT_INVALID_HANDLE: ... handle is invalid" for a NULL handle of every
// object type, with the subtype naming the object.
func TestHandlesNil(t *testing.T) {
	s := newSide(t, "lo")
	ep := s.ep(t)
	var (
		ia  *dat.IA
		pz  *dat.PZ
		evd *dat.EVD
		nep *dat.EP
		psp *dat.PSP
		rsp *dat.RSP
		cr  *dat.CR
		srq *dat.SRQ
		lmr *dat.LMR
	)
	buf := make([]byte, 64)
	runHandleCases(t, []handleCase{
		ih("IA: dat_pz_create", dat.HandleIA, func() error { return second(ia.CreatePZ()) }),
		ih("IA: dat_evd_create", dat.HandleIA, func() error { return second(ia.CreateEVD(4, dat.EVDDefault)) }),
		ih("IA: dat_ep_create", dat.HandleIA, func() error { return second(ia.CreateEP(nil, nil, nil, nil, nil)) }),
		ih("IA: dat_psp_create", dat.HandleIA, func() error { return second(ia.CreatePSP(4000, s.evd, dat.PSPConsumer, nil)) }),
		ih("IA: dat_psp_create_any", dat.HandleIA, func() error { return second(ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)) }),
		ih("IA: dat_rsp_create", dat.HandleIA, func() error { return second(ia.CreateRSP(0, ep, s.evd)) }),
		ih("IA: dat_srq_create", dat.HandleIA, func() error { return second(ia.CreateSRQ(s.pz, smallSRQ)) }),
		ih("IA: dat_lmr_create", dat.HandleIA, func() error { return second(ia.CreateLMR(s.pz, buf, dat.MemPrivLocalWrite)) }),
		ih("IA: dat_ia_query", dat.HandleIA, func() error { return third(ia.Query()) }),
		ih("IA: dat_ia_close", dat.HandleIA, func() error { return ia.Close(dat.CloseAbrupt) }),

		ih("PZ: dat_pz_free", dat.HandlePZ, func() error { return pz.Free() }),
		ih("PZ: dat_lmr_create", dat.HandlePZ, func() error { return second(s.ia.CreateLMR(pz, buf, dat.MemPrivLocalWrite)) }),
		ih("PZ: dat_srq_create", dat.HandlePZ, func() error { return second(s.ia.CreateSRQ(pz, smallSRQ)) }),

		ih("EVD: dat_evd_free", dat.NoSubtype, func() error { return evd.Free() }),
		ih("EVD: dat_evd_query", dat.NoSubtype, func() error { return second(evd.Query()) }),
		ih("EVD: dat_evd_dequeue", dat.NoSubtype, func() error { return second(evd.Dequeue()) }),
		ih("EVD: dat_evd_wait", dat.NoSubtype, func() error { return third(evd.Wait(1, 1)) }),
		ih("EVD: dat_evd_wait (context)", dat.NoSubtype, func() error { return third(evd.WaitContext(context.Background(), 1)) }),
		ih("EVD: dat_evd_post_se", dat.NoSubtype, func() error { return evd.PostSE(1) }),
		ih("EVD: dat_psp_create (CR EVD)", dat.HandleEVDCR, func() error { return second(s.ia.CreatePSPAny(evd, dat.PSPConsumer, nil)) }),
		ih("EVD: dat_rsp_create (CR EVD)", dat.HandleEVDCR, func() error { return second(s.ia.CreateRSP(0, ep, evd)) }),

		ih("EP: dat_ep_free", dat.HandleEP, func() error { return nep.Free() }),
		ih("EP: dat_ep_query", dat.HandleEP, func() error { return second(nep.Query()) }),
		ih("EP: dat_ep_get_status", dat.HandleEP, func() error { return second(nep.GetStatus()) }),
		ih("EP: dat_ep_modify", dat.HandleEP, func() error { return nep.Modify(dat.FieldPZ, &dat.EPParam{}) }),
		ih("EP: dat_ep_connect", dat.HandleEP, func() error {
			return nep.Connect(loopback, 4000, dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault)
		}),
		ih("EP: dat_ep_dup_connect", dat.HandleEP, func() error { return nep.DupConnect(ep, dat.TimeoutInfinite, nil, dat.QoSBestEffort) }),
		ih("EP: dat_ep_disconnect", dat.HandleEP, func() error { return nep.Disconnect(dat.CloseAbrupt) }),
		ih("EP: dat_ep_reset", dat.HandleEP, func() error { return nep.Reset() }),
		ih("EP: dat_rsp_create", dat.HandleEP, func() error { return second(s.ia.CreateRSP(0, nep, s.evd)) }),

		ih("PSP: dat_psp_free", dat.HandlePSP, func() error { return psp.Free() }),
		ih("RSP: dat_rsp_free", dat.HandleRSP, func() error { return rsp.Free() }),

		ih("CR: dat_cr_query", dat.HandleCR, func() error { return second(cr.Query()) }),
		ih("CR: dat_cr_accept", dat.HandleCR, func() error { return cr.Accept(ep, nil) }),
		ih("CR: dat_cr_reject", dat.HandleCR, func() error { return cr.Reject(nil) }),

		ih("SRQ: dat_srq_free", dat.HandleSRQ, func() error { return srq.Free() }),
		ih("SRQ: dat_srq_query", dat.HandleSRQ, func() error { return second(srq.Query()) }),
		ih("SRQ: dat_srq_set_lw", dat.HandleSRQ, func() error { return srq.SetLowWatermark(1) }),
		ih("SRQ: dat_ep_create_with_srq", dat.HandleSRQ, func() error {
			return second(s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, &dat.EPAttr{}))
		}),

		ih("LMR: dat_lmr_free", dat.HandleLMR, func() error { return lmr.Free() }),
		ih("LMR: dat_lmr_query", dat.HandleLMR, func() error { return second(lmr.Query()) }),
	})
}

// A freed handle is as invalid as a NULL one: every call on it, freeing it
// a second time included, gives DAT_INVALID_HANDLE.
func TestHandlesFreed(t *testing.T) {
	s := newSide(t, "lo")
	buf := make([]byte, 64)

	pz, err := s.ia.CreatePZ()
	require.NoError(t, err)
	require.NoError(t, pz.Free())
	evd, err := s.ia.CreateEVD(4, dat.EVDDefault|dat.EVDSoftware)
	require.NoError(t, err)
	require.NoError(t, evd.Free())
	ep := s.ep(t)
	require.NoError(t, ep.Free())
	live := s.ep(t)
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	require.NoError(t, psp.Free())
	rsp, err := s.ia.CreateRSP(0, s.ep(t), s.evd)
	require.NoError(t, err)
	require.NoError(t, rsp.Free())
	srq, err := s.ia.CreateSRQ(s.pz, smallSRQ)
	require.NoError(t, err)
	require.NoError(t, srq.Free())
	lmr, err := s.ia.CreateLMR(s.pz, buf, dat.MemPrivLocalWrite)
	require.NoError(t, err)
	require.NoError(t, lmr.Free())
	closed, err := dat.OpenIA(context.Background(), "lo", nil)
	require.NoError(t, err)
	require.NoError(t, closed.Close(dat.CloseGraceful))

	runHandleCases(t, []handleCase{
		ih("IA: dat_ia_close twice", dat.HandleIA, func() error { return closed.Close(dat.CloseGraceful) }),
		ih("IA: dat_pz_create", dat.HandleIA, func() error { return second(closed.CreatePZ()) }),
		ih("IA: dat_evd_create", dat.HandleIA, func() error { return second(closed.CreateEVD(4, dat.EVDDefault)) }),
		ih("IA: dat_ep_create", dat.HandleIA, func() error { return second(closed.CreateEP(nil, nil, nil, nil, nil)) }),
		ih("IA: dat_ia_query", dat.HandleIA, func() error { return third(closed.Query()) }),

		ih("PZ: dat_pz_free twice", dat.HandlePZ, func() error { return pz.Free() }),
		ih("PZ: dat_ep_create", dat.HandlePZ, func() error { return second(s.ia.CreateEP(pz, nil, nil, nil, nil)) }),
		ih("PZ: dat_lmr_create", dat.HandlePZ, func() error { return second(s.ia.CreateLMR(pz, buf, dat.MemPrivLocalWrite)) }),
		ih("PZ: dat_srq_create", dat.HandlePZ, func() error { return second(s.ia.CreateSRQ(pz, smallSRQ)) }),

		ih("EVD: dat_evd_free twice", dat.NoSubtype, func() error { return evd.Free() }),
		ih("EVD: dat_evd_query", dat.NoSubtype, func() error { return second(evd.Query()) }),
		ih("EVD: dat_evd_dequeue", dat.NoSubtype, func() error { return second(evd.Dequeue()) }),
		ih("EVD: dat_evd_wait", dat.NoSubtype, func() error { return third(evd.Wait(1, 1)) }),
		ih("EVD: dat_evd_post_se", dat.NoSubtype, func() error { return evd.PostSE(1) }),
		ih("EVD: dat_ep_create (connect EVD)", dat.HandleEVDConn, func() error { return second(s.ia.CreateEP(s.pz, nil, nil, evd, nil)) }),
		ih("EVD: dat_ep_create (recv EVD)", dat.HandleEVDRecv, func() error { return second(s.ia.CreateEP(s.pz, evd, nil, nil, nil)) }),
		ih("EVD: dat_ep_create (request EVD)", dat.HandleEVDRequest, func() error { return second(s.ia.CreateEP(s.pz, nil, evd, nil, nil)) }),
		ih("EVD: dat_psp_create (CR EVD)", dat.HandleEVDCR, func() error { return second(s.ia.CreatePSPAny(evd, dat.PSPConsumer, nil)) }),

		ih("EP: dat_ep_free twice", dat.HandleEP, func() error { return ep.Free() }),
		ih("EP: dat_ep_query", dat.HandleEP, func() error { return second(ep.Query()) }),
		ih("EP: dat_ep_get_status", dat.HandleEP, func() error { return second(ep.GetStatus()) }),
		ih("EP: dat_ep_modify", dat.HandleEP, func() error { return ep.Modify(dat.FieldPZ, &dat.EPParam{PZ: s.pz}) }),
		ih("EP: dat_ep_connect", dat.HandleEP, func() error {
			return ep.Connect(loopback, 4000, dat.TimeoutInfinite, nil, dat.QoSBestEffort, dat.ConnectDefault)
		}),
		ih("EP: dat_ep_disconnect", dat.HandleEP, func() error { return ep.Disconnect(dat.CloseAbrupt) }),
		ih("EP: dat_ep_reset", dat.HandleEP, func() error { return ep.Reset() }),
		ih("EP: dat_ep_dup_connect (dup_ep_handle)", dat.HandleEP, func() error {
			return live.DupConnect(ep, dat.TimeoutInfinite, nil, dat.QoSBestEffort)
		}),
		ih("EP: dat_rsp_create", dat.HandleEP, func() error { return second(s.ia.CreateRSP(0, ep, s.evd)) }),

		ih("PSP: dat_psp_free twice", dat.HandlePSP, func() error { return psp.Free() }),
		ih("RSP: dat_rsp_free twice", dat.HandleRSP, func() error { return rsp.Free() }),

		ih("SRQ: dat_srq_free twice", dat.HandleSRQ, func() error { return srq.Free() }),
		ih("SRQ: dat_srq_query", dat.HandleSRQ, func() error { return second(srq.Query()) }),
		ih("SRQ: dat_srq_set_lw", dat.HandleSRQ, func() error { return srq.SetLowWatermark(1) }),
		ih("SRQ: dat_ep_create_with_srq", dat.HandleSRQ, func() error {
			return second(s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, &dat.EPAttr{}))
		}),

		ih("LMR: dat_lmr_free twice", dat.HandleLMR, func() error { return lmr.Free() }),
		ih("LMR: dat_lmr_query", dat.HandleLMR, func() error { return second(lmr.Query()) }),
	})
}

// Reference counting, as in [DAPL]: dat_pz_free and dat_evd_free fail with
// DAT_INVALID_STATE (subtypes PZ_IN_USE, EVD_IN_USE) while the object is
// referenced, and succeed once the user is gone.
func TestHandlesInUse(t *testing.T) {
	type user struct {
		name string
		// use makes an object of s that references the PZ or EVD and
		// returns how to free it.
		use func(t *testing.T, s side, pz *dat.PZ, evd *dat.EVD) (free func() error)
	}
	pzUsers := []user{
		{"EP", func(t *testing.T, s side, pz *dat.PZ, _ *dat.EVD) func() error {
			ep, err := s.ia.CreateEP(pz, nil, nil, nil, nil)
			require.NoError(t, err)
			return ep.Free
		}},
		{"LMR", func(t *testing.T, s side, pz *dat.PZ, _ *dat.EVD) func() error {
			lmr, err := s.ia.CreateLMR(pz, make([]byte, 64), dat.MemPrivLocalWrite)
			require.NoError(t, err)
			return lmr.Free
		}},
		{"SRQ", func(t *testing.T, s side, pz *dat.PZ, _ *dat.EVD) func() error {
			srq, err := s.ia.CreateSRQ(pz, smallSRQ)
			require.NoError(t, err)
			return srq.Free
		}},
		{"EP set by dat_ep_modify", func(t *testing.T, s side, pz *dat.PZ, _ *dat.EVD) func() error {
			ep, err := s.ia.CreateEP(nil, nil, nil, nil, nil)
			require.NoError(t, err)
			require.NoError(t, ep.Modify(dat.FieldPZ, &dat.EPParam{PZ: pz}))
			return ep.Free
		}},
	}
	for _, u := range pzUsers {
		t.Run("dat_pz_free: DAT_INVALID_STATE_PZ_IN_USE while used by "+u.name, func(t *testing.T) {
			s := newSide(t, "lo")
			pz, err := s.ia.CreatePZ()
			require.NoError(t, err)
			free := u.use(t, s, pz, nil)
			err = pz.Free()
			requireExact(t, err, dat.InvalidState, dat.StatePZInUse)
			require.ErrorIs(t, err, dat.ErrPZInUse)
			require.ErrorIs(t, err, dat.ErrInvalidState)
			require.NoError(t, free())
			require.NoError(t, pz.Free(), "the PZ is free once its user is")
		})
	}
	evdUsers := []user{
		{"EP (connect EVD)", func(t *testing.T, s side, _ *dat.PZ, evd *dat.EVD) func() error {
			ep, err := s.ia.CreateEP(s.pz, nil, nil, evd, nil)
			require.NoError(t, err)
			return ep.Free
		}},
		{"EP (recv and request EVD)", func(t *testing.T, s side, _ *dat.PZ, evd *dat.EVD) func() error {
			ep, err := s.ia.CreateEP(s.pz, evd, evd, nil, nil)
			require.NoError(t, err)
			return ep.Free
		}},
		{"PSP", func(t *testing.T, s side, _ *dat.PZ, evd *dat.EVD) func() error {
			psp, err := s.ia.CreatePSPAny(evd, dat.PSPConsumer, nil)
			require.NoError(t, err)
			return psp.Free
		}},
		{"RSP", func(t *testing.T, s side, _ *dat.PZ, evd *dat.EVD) func() error {
			rsp, err := s.ia.CreateRSP(0, s.ep(t), evd)
			require.NoError(t, err)
			return rsp.Free
		}},
	}
	for _, u := range evdUsers {
		t.Run("dat_evd_free: DAT_INVALID_STATE_EVD_IN_USE while used by "+u.name, func(t *testing.T) {
			s := newSide(t, "lo")
			evd, err := s.ia.CreateEVD(8, dat.EVDDefault)
			require.NoError(t, err)
			free := u.use(t, s, nil, evd)
			err = evd.Free()
			requireExact(t, err, dat.InvalidState, dat.StateEVDInUse)
			require.ErrorIs(t, err, dat.ErrEVDInUse)
			require.ErrorIs(t, err, dat.ErrInvalidState)
			require.NoError(t, free())
			require.NoError(t, evd.Free(), "the EVD is free once its user is")
		})
	}
	t.Run("dat_evd_free: an EVD released by a failed dat_psp_create is not in use", func(t *testing.T) {
		s := newSide(t, "lo")
		psp := s.psp(t)
		evd, err := s.ia.CreateEVD(8, dat.EVDCR)
		require.NoError(t, err)
		_, err = s.ia.CreatePSP(psp.Qual(), evd, dat.PSPConsumer, nil)
		requireCode(t, err, dat.ConnQualInUse, dat.NoSubtype)
		require.NoError(t, evd.Free())
	})
	t.Run("dat_evd_free: the IA's async EVD cannot be freed", func(t *testing.T) {
		s := newSide(t, "lo")
		err := s.ia.AsyncEVD().Free()
		requireExact(t, err, dat.InvalidState, dat.StateEVDInUse)
		require.ErrorIs(t, err, dat.ErrEVDInUse)
		_, err = s.ia.AsyncEVD().Query()
		require.NoError(t, err, "the async EVD is still alive")
	})
	t.Run("dat_srq_free: DAT_INVALID_STATE_SRQ_IN_USE while an EP uses it", func(t *testing.T) {
		s := newSide(t, "lo")
		srq, err := s.ia.CreateSRQ(s.pz, smallSRQ)
		require.NoError(t, err)
		ep, err := s.ia.CreateEPWithSRQ(s.pz, s.evd, s.evd, s.evd, srq, &dat.EPAttr{MaxMessageSize: 4096, MaxRDMASize: 4096, MaxRecvDTOs: 2, MaxRequestDTOs: 2, MaxRequestIOV: 1})
		require.NoError(t, err)
		err = srq.Free()
		requireExact(t, err, dat.InvalidState, dat.StateSRQInUse)
		require.ErrorIs(t, err, dat.ErrSRQInUse)
		require.NoError(t, ep.Free())
		require.NoError(t, srq.Free())
	})
}

// dat_ia_close: DAT_CLOSE_GRACEFUL fails with
// DAT_INVALID_STATE/IA_IN_USE while any object other than the async EVD
// exists; once they are freed it succeeds.
func TestIACloseGraceful(t *testing.T) {
	objects := []struct {
		name string
		make func(t *testing.T, ia *dat.IA) (free func() error)
	}{
		{"PZ", func(t *testing.T, ia *dat.IA) func() error {
			pz, err := ia.CreatePZ()
			require.NoError(t, err)
			return pz.Free
		}},
		{"EVD", func(t *testing.T, ia *dat.IA) func() error {
			evd, err := ia.CreateEVD(2, dat.EVDSoftware)
			require.NoError(t, err)
			return evd.Free
		}},
		{"EP", func(t *testing.T, ia *dat.IA) func() error {
			ep, err := ia.CreateEP(nil, nil, nil, nil, nil)
			require.NoError(t, err)
			return ep.Free
		}},
		{"PSP", func(t *testing.T, ia *dat.IA) func() error {
			evd, err := ia.CreateEVD(2, dat.EVDCR)
			require.NoError(t, err)
			psp, err := ia.CreatePSPAny(evd, dat.PSPConsumer, nil)
			require.NoError(t, err)
			return func() error { return errors.Join(psp.Free(), evd.Free()) }
		}},
		{"RSP", func(t *testing.T, ia *dat.IA) func() error {
			evd, err := ia.CreateEVD(2, dat.EVDCR)
			require.NoError(t, err)
			ep, err := ia.CreateEP(nil, nil, nil, nil, nil)
			require.NoError(t, err)
			rsp, err := ia.CreateRSP(0, ep, evd)
			require.NoError(t, err)
			return func() error { return errors.Join(rsp.Free(), ep.Free(), evd.Free()) }
		}},
		{"SRQ and LMR", func(t *testing.T, ia *dat.IA) func() error {
			pz, err := ia.CreatePZ()
			require.NoError(t, err)
			srq, err := ia.CreateSRQ(pz, smallSRQ)
			require.NoError(t, err)
			lmr, err := ia.CreateLMR(pz, make([]byte, 64), dat.MemPrivLocalWrite)
			require.NoError(t, err)
			return func() error { return errors.Join(srq.Free(), lmr.Free(), pz.Free()) }
		}},
	}
	for _, o := range objects {
		t.Run("DAT_INVALID_STATE_IA_IN_USE with a "+o.name, func(t *testing.T) {
			ia := openClosable(t, "lo")
			free := o.make(t, ia)
			err := ia.Close(dat.CloseGraceful)
			requireExact(t, err, dat.InvalidState, dat.StateIAInUse)
			require.ErrorIs(t, err, dat.ErrIAInUse)
			_, _, err = ia.Query()
			require.NoError(t, err, "a refused close leaves the IA open")
			require.NoError(t, free())
			require.NoError(t, ia.Close(dat.CloseGraceful))
		})
	}
	t.Run("DAT_INVALID_PARAMETER: close flags", func(t *testing.T) {
		ia := openClosable(t, "lo")
		requireCode(t, ia.Close(7), dat.InvalidParameter, dat.NoSubtype)
	})
}

// dat_ia_close: DAT_CLOSE_ABRUPT frees every object of the IA, tearing
// connections down; afterwards every handle of the IA is invalid, pending
// connection requests are refused, and waiters are aborted.
func TestIACloseAbrupt(t *testing.T) {
	client := newSide(t, "lo")
	ia := openClosable(t, "lo")
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	evd, err := ia.CreateEVD(16, dat.EVDDefault|dat.EVDSoftware)
	require.NoError(t, err)
	s := side{ia: ia, pz: pz, evd: evd}
	unconnected := s.ep(t)
	srq, err := ia.CreateSRQ(pz, smallSRQ)
	require.NoError(t, err)
	lmr, err := ia.CreateLMR(pz, make([]byte, 64), dat.MemPrivLocalWrite)
	require.NoError(t, err)
	rsp, err := ia.CreateRSP(0, s.ep(t), evd)
	require.NoError(t, err)
	psp, err := ia.CreatePSPAny(evd, dat.PSPConsumer, nil)
	require.NoError(t, err)

	// An established connection, and a request left pending.
	cep, sep, _ := connected(t, client, s, nil, nil)
	pending := client.ep(t)
	require.NoError(t, pending.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
	req := waitFor(t, evd, dat.ConnectionRequestEvent)
	cr := req.CR.CR

	require.NoError(t, ia.Close(dat.CloseAbrupt))

	// The two client EPs learn of it in either order.
	got := map[*dat.EP]dat.EventNumber{}
	for len(got) < 2 {
		ev, _, err := client.evd.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err)
		got[ev.Conn.EP] = ev.Number
	}
	t.Run("the peer of a torn-down connection sees it end", func(t *testing.T) {
		require.Contains(t, []dat.EventNumber{dat.ConnectionEventDisconnected, dat.ConnectionEventBroken}, got[cep])
		require.Equal(t, dat.EPDisconnected, state(t, cep))
	})
	t.Run("the initiator of a pending request is refused (NON_PEER_REJECTED)", func(t *testing.T) {
		require.Equal(t, dat.ConnectionEventNonPeerRejected, got[pending])
		require.Equal(t, dat.EPDisconnected, state(t, pending))
	})
	runHandleCases(t, []handleCase{
		ih("IA: dat_ia_close", dat.HandleIA, func() error { return ia.Close(dat.CloseAbrupt) }),
		ih("IA: dat_pz_create", dat.HandleIA, func() error { return second(ia.CreatePZ()) }),
		ih("IA: dat_ia_query", dat.HandleIA, func() error { return third(ia.Query()) }),
		ih("PZ: dat_pz_free", dat.HandlePZ, pz.Free),
		ih("EVD: dat_evd_free", dat.NoSubtype, evd.Free),
		ih("EVD: dat_evd_post_se", dat.NoSubtype, func() error { return evd.PostSE(1) }),
		ih("EVD: dat_evd_dequeue", dat.NoSubtype, func() error { return second(evd.Dequeue()) }),
		ih("EVD: dat_evd_query", dat.NoSubtype, func() error { return second(evd.Query()) }),
		ih("EVD: the async EVD", dat.NoSubtype, func() error { return second(ia.AsyncEVD().Dequeue()) }),
		ih("EP: dat_ep_free (unconnected)", dat.HandleEP, unconnected.Free),
		ih("EP: dat_ep_query (was connected)", dat.HandleEP, func() error { return second(sep.Query()) }),
		ih("PSP: dat_psp_free", dat.HandlePSP, psp.Free),
		ih("RSP: dat_rsp_free", dat.HandleRSP, rsp.Free),
		ih("CR: dat_cr_query", dat.HandleCR, func() error { return second(cr.Query()) }),
		ih("CR: dat_cr_reject", dat.HandleCR, func() error { return cr.Reject(nil) }),
		ih("SRQ: dat_srq_query", dat.HandleSRQ, func() error { return second(srq.Query()) }),
		ih("SRQ: dat_srq_free", dat.HandleSRQ, srq.Free),
		ih("LMR: dat_lmr_query", dat.HandleLMR, func() error { return second(lmr.Query()) }),
		ih("LMR: dat_lmr_free", dat.HandleLMR, lmr.Free),
	})
}

// errors.Is matches a DAT error against the sentinels "by type, and also by
// subtype when the sentinel has one"; Code(nil) is DAT_SUCCESS; Error()
// names the operation and the code.
func TestErrorMatching(t *testing.T) {
	s := newSide(t, "lo")
	s.ep(t) // holds s.pz
	err := s.pz.Free()
	requireExact(t, err, dat.InvalidState, dat.StatePZInUse)

	matches := []struct {
		target *dat.Error
		want   bool
	}{
		{dat.ErrInvalidState, true},
		{dat.ErrPZInUse, true},
		{dat.ErrEVDInUse, false},   // same type, other subtype
		{dat.ErrIAInUse, false},    // same type, other subtype
		{dat.ErrEPNotReady, false}, // same type, other subtype
		{dat.ErrInvalidHandle, false},
		{dat.ErrInvalidParameter, false},
		{dat.ErrQueueEmpty, false},
	}
	for _, m := range matches {
		require.Equal(t, m.want, errors.Is(err, m.target), "errors.Is(%v, %v)", err, m.target.Code)
	}
	require.False(t, errors.Is(err, context.Canceled), "not a match for a non-DAT error")

	require.Equal(t, dat.Success, dat.Code(nil))
	require.False(t, dat.Code(nil).IsError())
	require.Equal(t, dat.ClassError|dat.InvalidState|dat.Return(dat.StatePZInUse), dat.Code(err))
	require.Equal(t, dat.ClassError|dat.InternalError, dat.Code(errors.New("not DAT")))
	require.True(t, strings.HasPrefix(err.Error(), "dat_pz_free: DAT_INVALID_STATE/DAT_INVALID_STATE_PZ_IN_USE: "), err.Error())

	// Wrapped DAT errors keep their code.
	wrapped := errors.Join(errors.New("context"), err)
	require.ErrorIs(t, wrapped, dat.ErrPZInUse)
	require.Equal(t, dat.Code(err), dat.Code(wrapped))

	// A provider failure keeps the provider's error as the cause.
	_, err = dat.OpenIA(context.Background(), "verbs", nil)
	var de *dat.Error
	require.ErrorAs(t, err, &de)
	require.NotNil(t, errors.Unwrap(err))
	require.Equal(t, "dat_ia_open", de.Op)
}
