package dat_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// rmrFixture connects a pair and registers, on the server, an LMR with
// full remote rights and an RMR to bind over part of it.
func rmrFixture(t *testing.T) (x *xferPair, lmr region, rmr *dat.RMR) {
	t.Helper()
	iwarpOnly(t, "memory windows")
	x = newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	lmr = register(t, x.s, x.s.pz, 3*4096, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead)
	rmr, err := x.s.ia.CreateRMR(x.s.pz)
	require.NoError(t, err)
	return x, lmr, rmr
}

// dat_rmr_bind: the RMR exposes exactly the bound range under its own
// rmr_context; peers read and write through it; the bind completes on the
// EP's request EVD with its cookie.
func TestRMRBindExposesRange(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	ctx, err := rmr.Bind(lmr.seg(4096, 4096), dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead, x.sep, 77, dat.CompletionDefault)
	require.NoError(t, err)
	require.NotZero(t, ctx)
	require.NotEqual(t, lmr.p.RMRContext, ctx, "the window has its own rmr_context")
	ev := waitFor(t, x.sReq, dat.RMRBindCompletionEvent)
	require.Same(t, rmr, ev.RMRBind.RMR)
	require.Equal(t, uint64(77), ev.RMRBind.Cookie)
	require.Equal(t, dat.DTOSuccess, ev.RMRBind.Status)
	q, err := rmr.Query()
	require.NoError(t, err)
	require.Equal(t, ctx, q.Context)
	require.Equal(t, lmr.seg(4096, 4096), q.Target)

	// The peer writes the whole window, then reads it back: the Read is
	// ordered behind the Write, so its data proves placement.
	src := register(t, x.c, x.c.pz, 2*4096, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	fill(src.buf[:4096], 4)
	win := dat.RMRTriplet{Addr: lmr.p.Addr + 4096, Length: 4096, Context: ctx}
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, 4096)}, 1, win, dat.CompletionSuppress))
	require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{src.seg(4096, 4096)}, 2, win, dat.CompletionDefault))
	dto(t, x.cReq, 2, dat.DTORDMARead)
	require.True(t, bytes.Equal(src.buf[:4096], src.buf[4096:]))
}

// A window grants nothing outside its range, even inside its LMR: a Write
// one byte past the window terminates the connection and nothing lands.
func TestRMRBoundsEnforced(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	ctx, err := rmr.Bind(lmr.seg(4096, 4096), dat.MemPrivRemoteWrite, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	src := register(t, x.c, x.c.pz, 4097, dat.MemPrivLocalRead)
	fill(src.buf, 1)
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, 4097)}, 1,
		dat.RMRTriplet{Addr: lmr.p.Addr + 4096, Length: 4097, Context: ctx}, dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
	require.Equal(t, make([]byte, len(lmr.buf)), lmr.buf, "nothing was placed")
}

// A window grants only the rights it was bound with: Read through a
// write-only window terminates the connection.
func TestRMRRightsEnforced(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	ctx, err := rmr.Bind(lmr.seg(0, 4096), dat.MemPrivRemoteWrite, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	dst := register(t, x.c, x.c.pz, 4096, dat.MemPrivLocalWrite)
	require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{dst.seg(0, 4096)}, 1,
		dat.RMRTriplet{Addr: lmr.p.Addr, Length: 4096, Context: ctx}, dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
}

// Unbinding (a zero-length bind) withdraws the rmr_context at once; a
// rebind gets a new one.
func TestRMRUnbind(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	old, err := rmr.Bind(lmr.seg(0, 4096), dat.MemPrivRemoteWrite, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	none, err := rmr.Bind(dat.LMRTriplet{}, 0, x.sep, 2, dat.CompletionSuppress)
	require.NoError(t, err)
	require.Zero(t, none)
	q, err := rmr.Query()
	require.NoError(t, err)
	require.Zero(t, q.Context)
	require.NoError(t, lmr.lmr.Free(), "an unbound RMR no longer holds its LMR")

	src := register(t, x.c, x.c.pz, 64, dat.MemPrivLocalRead)
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, 64)}, 1,
		dat.RMRTriplet{Addr: lmr.p.Addr, Length: 64, Context: old}, dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
}

// The return values of dat_rmr_create, dat_rmr_bind and dat_rmr_free, and
// the reference rules: an LMR with a bound RMR and the RMR's PZ cannot be
// freed.
func TestRMRRules(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	readOnly := register(t, x.s, x.s.pz, 4096, dat.MemPrivLocalWrite|dat.MemPrivRemoteRead)
	pz2, err := x.s.ia.CreatePZ()
	require.NoError(t, err)
	other := register(t, x.s, pz2, 4096, dat.MemPrivRemoteWrite)

	_, err = rmr.Bind(readOnly.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 1, 0)
	requireCode(t, err, dat.PrivilegesViolation, 0)
	_, err = rmr.Bind(other.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 1, 0)
	requireCode(t, err, dat.ProtectionViolation, 0)
	_, err = rmr.Bind(lmr.seg(3*4096-8, 16), dat.MemPrivRemoteWrite, x.sep, 1, 0)
	requireCode(t, err, dat.InvalidParameter, 0)
	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivLocalWrite, x.sep, 1, 0)
	requireCode(t, err, dat.InvalidParameter, 0)
	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, nil, 1, 0)
	requireCode(t, err, dat.InvalidHandle, dat.HandleEP)

	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	requireCode(t, lmr.lmr.Free(), dat.InvalidState, dat.StateLMRInUse)
	requireCode(t, x.s.pz.Free(), dat.InvalidState, dat.StatePZInUse)
	require.NoError(t, rmr.Free())
	requireCode(t, rmr.Free(), dat.InvalidHandle, dat.HandleRMR)
	_, err = rmr.Query()
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
	require.NoError(t, lmr.lmr.Free())
	var nilRMR *dat.RMR
	_, err = nilRMR.Bind(dat.LMRTriplet{}, 0, x.sep, 0, 0)
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
}
