package dat_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// windowsExpected says whether the IA under test must offer memory
// windows: the iwarp provider has them, and so has the verbs provider on
// rxe (type 1 ibv_mw); kernel siw has none (max_mw 0). Deciding this from
// the provider and device, not from the IA's own answer, is what keeps the
// RMR tests from skipping silently where windows should work.
func windowsExpected(t *testing.T, ia *dat.IA) bool {
	t.Helper()
	a, _, err := ia.Query()
	require.NoError(t, err)
	return !(testProvider == "verbs" && strings.HasPrefix(a.AdapterName, "siw"))
}

// rmrFixture connects a pair and registers, on the server, an LMR with
// full remote rights and an RMR to bind over part of it. It skips only on
// IAs that must not have windows, which TestRMRSupport covers.
func rmrFixture(t *testing.T) (x *xferPair, lmr region, rmr *dat.RMR) {
	t.Helper()
	x = newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	if !windowsExpected(t, x.s.ia) {
		t.Skipf("the %s provider has no memory windows on this device (TestRMRSupport checks DAT_MODEL_NOT_SUPPORTED)", testProvider)
	}
	lmr = register(t, x.s, x.s.pz, 3*4096, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead)
	rmr, err := x.s.ia.CreateRMR(x.s.pz)
	require.NoError(t, err)
	return x, lmr, rmr
}

// dat_rmr_create succeeds exactly where the provider has memory windows,
// and gives DAT_MODEL_NOT_SUPPORTED elsewhere (verbs on siw).
func TestRMRSupport(t *testing.T) {
	s := newSide(t, "lo")
	rmr, err := s.ia.CreateRMR(s.pz)
	if !windowsExpected(t, s.ia) {
		requireCode(t, err, dat.ModelNotSupported, 0)
		require.Nil(t, rmr)
		return
	}
	require.NoError(t, err)
	q, err := rmr.Query()
	require.NoError(t, err)
	require.Zero(t, q.Context, "a new RMR is unbound")
	requireCode(t, s.pz.Free(), dat.InvalidState, dat.StatePZInUse)
	require.NoError(t, rmr.Free())
	require.NoError(t, s.pz.Free())
}

// writeRead has the client write src through the window, then read it
// back into the second half of src: the Read is ordered behind the Write,
// so matching data proves placement.
func writeRead(t *testing.T, x *xferPair, src region, n int, win dat.RMRTriplet, cookie uint64) {
	t.Helper()
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, n)}, cookie, win, dat.CompletionSuppress))
	require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{src.seg(n, n)}, cookie+1, win, dat.CompletionDefault))
	dto(t, x.cReq, cookie+1, dat.DTORDMARead)
	require.True(t, bytes.Equal(src.buf[:n], src.buf[n:2*n]))
}

// settle makes the server's view of its memory current: a Send from the
// client, received after everything the client did before (one ordered
// stream), so the test may read what peers placed on the server (and the
// race detector sees why).
func settle(t *testing.T, x *xferPair) {
	t.Helper()
	box := register(t, x.s, x.s.pz, 1, dat.MemPrivLocalWrite)
	one := register(t, x.c, x.c.pz, 1, dat.MemPrivLocalRead)
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{box.seg(0, 1)}, 99, dat.CompletionDefault))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{one.seg(0, 1)}, 99, dat.CompletionSuppress))
	dto(t, x.sRecv, 99, dat.DTOReceive)
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
	require.Equal(t, dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead, q.Priv)

	src := register(t, x.c, x.c.pz, 2*4096, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	fill(src.buf[:4096], 4)
	writeRead(t, x, src, 4096, dat.RMRTriplet{Addr: lmr.p.Addr + 4096, Length: 4096, Context: ctx}, 1)
	settle(t, x)
	require.Equal(t, src.buf[:4096], lmr.buf[4096:8192])
	require.Equal(t, make([]byte, 4096), lmr.buf[:4096], "nothing lands before the window")
	require.Equal(t, make([]byte, 4096), lmr.buf[8192:], "nothing lands after the window")
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

// Binding a bound RMR elsewhere moves it: the new rmr_context reaches the
// new range, the old one stops working at once.
func TestRMRRebind(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	first, err := rmr.Bind(lmr.seg(0, 4096), dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	second, err := rmr.Bind(lmr.seg(8192, 4096), dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead, x.sep, 2, dat.CompletionSuppress)
	require.NoError(t, err)
	require.NotEqual(t, first, second)
	q, err := rmr.Query()
	require.NoError(t, err)
	require.Equal(t, second, q.Context)
	require.Equal(t, lmr.seg(8192, 4096), q.Target)

	src := register(t, x.c, x.c.pz, 2*512, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	fill(src.buf[:512], 9)
	writeRead(t, x, src, 512, dat.RMRTriplet{Addr: lmr.p.Addr + 8192, Length: 512, Context: second}, 1)

	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, 64)}, 3,
		dat.RMRTriplet{Addr: lmr.p.Addr, Length: 64, Context: first}, dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
	require.Equal(t, src.buf[:512], lmr.buf[8192:8192+512])
	require.Equal(t, make([]byte, 8192), lmr.buf[:8192], "the old rmr_context placed nothing")
}

// dat_rmr_free withdraws the rmr_context at once, and needs no EP; the
// LMR is free to go afterwards.
func TestRMRFreeRevokes(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	ctx, err := rmr.Bind(lmr.seg(0, 4096), dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	src := register(t, x.c, x.c.pz, 2*256, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	fill(src.buf[:256], 5)
	win := dat.RMRTriplet{Addr: lmr.p.Addr, Length: 256, Context: ctx}
	writeRead(t, x, src, 256, win, 1)
	settle(t, x)

	require.NoError(t, rmr.Free())
	before := append([]byte(nil), lmr.buf...)
	require.Equal(t, src.buf[:256], before[:256])
	fill(src.buf[:256], 6)
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{src.seg(0, 256)}, 3, win, dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
	require.Equal(t, before, lmr.buf, "the freed RMR's rmr_context placed nothing")
	require.NoError(t, lmr.lmr.Free())
}

// dat_rmr_bind posts through the EP's request queue, so the EP must be
// CONNECTED: an unconnected or disconnected EP gives DAT_INVALID_STATE
// with the EP's state as subtype, for a bind and an unbind alike. A bound
// RMR outlives its EP's connection (scope PZ) and is freed without one.
func TestRMRBindNeedsConnection(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	idle, err := x.s.ia.CreateEP(x.s.pz, x.sRecv, x.sReq, x.sConn, xferAttr(0, 0))
	require.NoError(t, err)
	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, idle, 1, dat.CompletionDefault)
	requireCode(t, err, dat.InvalidState, dat.StateEPUnconnected)

	ctx, err := rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 2, dat.CompletionSuppress)
	require.NoError(t, err)
	require.NoError(t, x.sep.Disconnect(dat.CloseAbrupt))
	waitFor(t, x.sConn, dat.ConnectionEventDisconnected)
	_, err = rmr.Bind(lmr.seg(64, 64), dat.MemPrivRemoteWrite, x.sep, 3, dat.CompletionDefault)
	requireCode(t, err, dat.InvalidState, dat.StateEPDisconnected)
	_, err = rmr.Bind(dat.LMRTriplet{}, 0, x.sep, 4, dat.CompletionDefault)
	requireCode(t, err, dat.InvalidState, dat.StateEPDisconnected)
	_, err = rmr.Bind(dat.LMRTriplet{}, 0, idle, 5, dat.CompletionDefault)
	requireCode(t, err, dat.InvalidState, dat.StateEPUnconnected)
	_, err = x.sReq.Dequeue()
	requireCode(t, err, dat.QueueEmpty, 0) // failed binds complete nothing

	q, err := rmr.Query()
	require.NoError(t, err)
	require.Equal(t, ctx, q.Context, "the binding survives the connection")
	requireCode(t, lmr.lmr.Free(), dat.InvalidState, dat.StateLMRInUse)
	require.NoError(t, rmr.Free())
	require.NoError(t, lmr.lmr.Free())
}

// Binds interleaved with DTOs on one EP leave the DTO stream intact: every
// DTO completes once, in post order, with its own cookie and SUPPRESS
// honoured, and each bind yields exactly its RMR bind event (none when
// suppressed), never a DTO completion.
func TestRMRBindAmongDTOs(t *testing.T) {
	x, lmr, rmr := rmrFixture(t)
	src := register(t, x.s, x.s.pz, 64, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	dst := register(t, x.c, x.c.pz, 6*64, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	// An MPA responder sends nothing before the initiator's first FPDU:
	// the client opens the way.
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{src.seg(0, 64)}, 1, dat.CompletionDefault))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{dst.seg(5*64, 1)}, 1, dat.CompletionSuppress))
	dto(t, x.sRecv, 1, dat.DTOReceive)
	for i := 0; i < 5; i++ {
		require.NoError(t, x.cep.PostRecv([]dat.LMRTriplet{dst.seg(i*64, 64)}, uint64(10+i), dat.CompletionDefault))
	}
	send := func(cookie uint64, f dat.CompletionFlags) {
		t.Helper()
		src.buf[cookie] = byte(cookie)
		require.NoError(t, x.sep.PostSend([]dat.LMRTriplet{src.seg(int(cookie), 1)}, cookie, f))
	}
	send(1, dat.CompletionDefault)
	send(2, dat.CompletionSuppress)
	_, err := rmr.Bind(lmr.seg(0, 4096), dat.MemPrivRemoteWrite, x.sep, 77, dat.CompletionDefault)
	require.NoError(t, err)
	send(3, dat.CompletionDefault)
	_, err = rmr.Bind(lmr.seg(4096, 4096), dat.MemPrivRemoteRead, x.sep, 78, dat.CompletionSuppress)
	require.NoError(t, err)
	send(4, dat.CompletionSuppress)
	_, err = rmr.Bind(dat.LMRTriplet{}, 0, x.sep, 79, dat.CompletionDefault)
	require.NoError(t, err)
	send(5, dat.CompletionDefault)

	var dtos, binds []uint64
	for len(dtos) < 3 || len(binds) < 2 {
		ev, _, err := x.sReq.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err, "have DTOs %v, binds %v", dtos, binds)
		switch ev.Number {
		case dat.DTOCompletionEvent:
			require.Equal(t, dat.DTOSuccess, ev.DTO.Status, "cookie %d", ev.DTO.Cookie)
			require.Equal(t, dat.DTOSend, ev.DTO.Op, "cookie %d", ev.DTO.Cookie)
			dtos = append(dtos, ev.DTO.Cookie)
		case dat.RMRBindCompletionEvent:
			require.Same(t, rmr, ev.RMRBind.RMR)
			require.Equal(t, dat.DTOSuccess, ev.RMRBind.Status)
			binds = append(binds, ev.RMRBind.Cookie)
		default:
			t.Fatalf("unexpected event %v", ev.Number)
		}
	}
	require.Equal(t, []uint64{1, 3, 5}, dtos)
	require.Equal(t, []uint64{77, 79}, binds)
	for i := 0; i < 5; i++ {
		got := dto(t, x.cRecv, uint64(10+i), dat.DTOReceive)
		require.Equal(t, uint32(1), got.Length)
		require.Equal(t, byte(i+1), dst.buf[i*64])
	}
	_, err = x.sReq.Dequeue()
	requireCode(t, err, dat.QueueEmpty, 0)
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
	_, err = x.s.ia.CreateRMR(nil)
	requireCode(t, err, dat.InvalidHandle, dat.HandlePZ)

	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 1, dat.CompletionSuppress)
	require.NoError(t, err)
	requireCode(t, lmr.lmr.Free(), dat.InvalidState, dat.StateLMRInUse)
	requireCode(t, x.s.pz.Free(), dat.InvalidState, dat.StatePZInUse)
	require.NoError(t, rmr.Free())
	requireCode(t, rmr.Free(), dat.InvalidHandle, dat.HandleRMR)
	_, err = rmr.Query()
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
	_, err = rmr.Bind(lmr.seg(0, 64), dat.MemPrivRemoteWrite, x.sep, 1, 0)
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
	require.NoError(t, lmr.lmr.Free())
	var nilRMR *dat.RMR
	_, err = nilRMR.Bind(dat.LMRTriplet{}, 0, x.sep, 0, 0)
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
	requireCode(t, nilRMR.Free(), dat.InvalidHandle, dat.HandleRMR)
}

// dat_ia_close(ABRUPT) frees the RMRs with everything else (the provider's
// windows before the regions and PDs they live in).
func TestRMRFreedByIAClose(t *testing.T) {
	ia, err := dat.OpenIA(context.Background(), "lo", nil)
	require.NoError(t, err)
	if !windowsExpected(t, ia) {
		require.NoError(t, ia.Close(dat.CloseAbrupt))
		t.Skipf("the %s provider has no memory windows on this device", testProvider)
	}
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	_, err = ia.CreateLMR(pz, make([]byte, 4096), dat.MemPrivRemoteWrite)
	require.NoError(t, err)
	rmr, err := ia.CreateRMR(pz)
	require.NoError(t, err)
	requireCode(t, ia.Close(dat.CloseGraceful), dat.InvalidState, dat.StateIAInUse)
	require.NoError(t, ia.Close(dat.CloseAbrupt))
	_, err = rmr.Query()
	requireCode(t, err, dat.InvalidHandle, dat.HandleRMR)
	requireCode(t, rmr.Free(), dat.InvalidHandle, dat.HandleRMR)
}
