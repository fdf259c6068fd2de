package dat_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// xferPair is a connected pair whose EPs allow RDMA Reads and several
// segments, with separate EVDs per stream so tests can watch each.
type xferPair struct {
	c, s               side
	cep, sep           *dat.EP
	cReq, cRecv, cConn *dat.EVD
	sReq, sRecv, sConn *dat.EVD
}

func xferAttr(recvFlags, reqFlags dat.CompletionFlags) *dat.EPAttr {
	return &dat.EPAttr{MaxMessageSize: 1 << 22, MaxRDMASize: 1 << 22, MaxRecvDTOs: 16, MaxRequestDTOs: 16,
		MaxRecvIOV: 4, MaxRequestIOV: 4, MaxRDMAReadIn: 4, MaxRDMAReadOut: 4, MaxRDMAReadIOV: 1, MaxRDMAWriteIOV: 4,
		RecvCompletionFlags: recvFlags, RequestCompletionFlags: reqFlags}
}

func newXferPair(t *testing.T, cAttr, sAttr *dat.EPAttr) *xferPair {
	t.Helper()
	x := &xferPair{c: newSide(t, "lo"), s: newSide(t, "lo")}
	mk := func(s side) (req, recv, conn *dat.EVD) {
		var err error
		req, err = s.ia.CreateEVD(64, dat.EVDDTO)
		require.NoError(t, err)
		recv, err = s.ia.CreateEVD(64, dat.EVDDTO)
		require.NoError(t, err)
		conn, err = s.ia.CreateEVD(8, dat.EVDConnection|dat.EVDCR)
		require.NoError(t, err)
		return
	}
	x.cReq, x.cRecv, x.cConn = mk(x.c)
	x.sReq, x.sRecv, x.sConn = mk(x.s)
	var err error
	x.cep, err = x.c.ia.CreateEP(x.c.pz, x.cRecv, x.cReq, x.cConn, cAttr)
	require.NoError(t, err)
	x.sep, err = x.s.ia.CreateEP(x.s.pz, x.sRecv, x.sReq, x.sConn, sAttr)
	require.NoError(t, err)
	psp, err := x.s.ia.CreatePSPAny(x.sConn, dat.PSPConsumer, nil)
	require.NoError(t, err)
	defer psp.Free()
	require.NoError(t, x.cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, x.sConn, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(x.sep, nil))
	waitFor(t, x.sConn, dat.ConnectionEventEstablished)
	waitFor(t, x.cConn, dat.ConnectionEventEstablished)
	return x
}

// dto waits for the next DTO completion on evd and checks it succeeded.
func dto(t *testing.T, evd *dat.EVD, cookie uint64, op dat.DTOOp) dat.DTOCompletion {
	t.Helper()
	ev := waitFor(t, evd, dat.DTOCompletionEvent)
	require.Equal(t, dat.DTOSuccess, ev.DTO.Status, "cookie %d", ev.DTO.Cookie)
	require.Equal(t, cookie, ev.DTO.Cookie)
	require.Equal(t, op, ev.DTO.Op)
	return ev.DTO
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// Send/Recv with multi-segment IOVs on both sides, and a message longer
// than one FPDU: the receiver's segments fill in order and the completion
// reports the message length.
func TestDTOSendRecv(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	const n = 300_000
	src := register(t, x.c, x.c.pz, n, dat.MemPrivLocalRead)
	dst := register(t, x.s, x.s.pz, n+100, dat.MemPrivLocalWrite)
	fill(src.buf, 3)
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{dst.seg(0, 1000), dst.seg(1000, 99_000), dst.seg(100_000, n+100-100_000)}, 7, dat.CompletionDefault))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 5), src.seg(5, n-5)}, 8, dat.CompletionDefault))
	dto(t, x.cReq, 8, dat.DTOSend)
	got := dto(t, x.sRecv, 7, dat.DTOReceive)
	require.Equal(t, uint32(n), got.Length)
	require.True(t, bytes.Equal(src.buf, dst.buf[:n]))
	require.Equal(t, make([]byte, 100), dst.buf[n:], "nothing past the message is written")
}

// RDMA Write lands in the peer's registered memory without a receive;
// RDMA Read fetches the peer's memory into ours. A Write's local
// completion only means the data left (as on siw); a Read posted after it
// is ordered behind it, so the Read returning the data proves placement.
func TestDTORDMAWriteRead(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	const half = 1 << 19
	local := register(t, x.c, x.c.pz, 2*half, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	remote := register(t, x.s, x.s.pz, 4096+half+4096, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead)
	fill(local.buf[:half], 9)
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{local.seg(0, half/2), local.seg(half/2, half/2)}, 1, remote.remote(4096, half), dat.CompletionDefault))
	dto(t, x.cReq, 1, dat.DTORDMAWrite)
	require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{local.seg(half, half)}, 2, remote.remote(4096, half), dat.CompletionDefault))
	got := dto(t, x.cReq, 2, dat.DTORDMARead)
	require.Equal(t, uint32(half), got.Length)
	require.True(t, bytes.Equal(local.buf[:half], local.buf[half:]), "the Read returned the written data")
	// (The server's copy is not read here: only the wire orders it after
	// the placement, which the race detector cannot see. TestDTOOrdering
	// checks placed bytes on the receiver's side of a completion.)
	require.Equal(t, make([]byte, 4096), remote.buf[:4096], "nothing before the target was written")
	require.Equal(t, make([]byte, 4096), remote.buf[4096+half:], "nothing after the target was written")
}

// RDMA Write with Immediate (the InfiniBand extension): where the
// provider offers it, the bytes land and one receive completes with the
// value and the Write's length, its buffer untouched; elsewhere the post
// is refused with DAT_MODEL_NOT_SUPPORTED and nothing is queued.
func TestDTORDMAWriteImm(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	local := register(t, x.c, x.c.pz, 8192, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	remote := register(t, x.s, x.s.pz, 8192, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite)
	slot := register(t, x.s, x.s.pz, 64, dat.MemPrivLocalWrite)
	fill(local.buf, 5)
	err := x.cep.PostRDMAWriteImm([]dat.LMRTriplet{local.seg(0, 3000)}, 1, 0xc0ffee, remote.remote(100, 3000), dat.CompletionDefault)
	_, pa, qerr := x.c.ia.Query()
	require.NoError(t, qerr)
	if !pa.WriteImmSupported {
		requireCode(t, err, dat.ModelNotSupported, dat.NoSubtype)
		_, derr := x.cReq.Dequeue()
		requireCode(t, derr, dat.QueueEmpty, dat.NoSubtype)
		return
	}
	require.NoError(t, err)
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{slot.seg(0, 64)}, 2, dat.CompletionDefault))
	dto(t, x.cReq, 1, dat.DTORDMAWriteImm)
	got := dto(t, x.sRecv, 2, dat.DTOReceive)
	require.True(t, got.WithImm, "%+v", got)
	require.Equal(t, uint32(0xc0ffee), got.Imm)
	require.Equal(t, uint32(3000), got.Length)
	require.True(t, bytes.Equal(local.buf[:3000], remote.buf[100:3100]), "the Write's bytes are in place when its receive completes")
	require.Equal(t, make([]byte, 64), slot.buf, "the receive's buffer is untouched")
	// A Send's receive carries no immediate value.
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{slot.seg(0, 64)}, 3, dat.CompletionDefault))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{local.seg(0, 8)}, 4, dat.CompletionDefault))
	dto(t, x.cReq, 4, dat.DTOSend)
	require.False(t, dto(t, x.sRecv, 3, dat.DTOReceive).WithImm)
}

// Ordering across Send, Write and Read on one connection: a Send posted
// after a Write is seen only after the Write's data landed, and a Read
// posted after a Write returns the written data. Each round uses fresh
// memory: ownership of a buffer passes between the test and the provider
// through the wire, which the race detector cannot see, so no byte is
// touched in two rounds.
func TestDTOOrdering(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	const rounds, n = 20, 4096
	local := register(t, x.c, x.c.pz, rounds*2*n, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	remote := register(t, x.s, x.s.pz, rounds*n, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite|dat.MemPrivRemoteRead)
	note := register(t, x.s, x.s.pz, rounds*64, dat.MemPrivLocalWrite)
	for r := 0; r < rounds; r++ {
		src, back, dst := 2*r*n, 2*r*n+n, r*n
		fill(local.buf[src:src+n], byte(r))
		require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{note.seg(r*64, 64)}, uint64(r), dat.CompletionDefault))
		require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{local.seg(src, n)}, 1, remote.remote(dst, n), dat.CompletionSuppress))
		require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{local.seg(src, 8)}, 2, dat.CompletionSuppress))
		require.NoError(t, x.cep.PostRDMARead([]dat.LMRTriplet{local.seg(back, n)}, 3, remote.remote(dst, n), dat.CompletionDefault))
		dto(t, x.sRecv, uint64(r), dat.DTOReceive)
		require.True(t, bytes.Equal(local.buf[src:src+n], remote.buf[dst:dst+n]), "round %d: Send seen before the Write's data", r)
		dto(t, x.cReq, 3, dat.DTORDMARead)
		require.True(t, bytes.Equal(local.buf[src:src+n], local.buf[back:back+n]), "round %d: Read did not see the Write", r)
	}
}

// Completion flags: SUPPRESS gives no event on success; on an UNSIGNALLED
// request stream an UNSIGNALLED post is queued without waking a waiter; on
// a SOLICITED_WAIT recv stream unsolicited receives are queued without
// waking a waiter, and a solicited one wakes it for all of them.
func TestDTOCompletionFlags(t *testing.T) {
	iwarpOnly(t, "verbs work completions do not say whether a receive was solicited, so the verbs provider reports every receive as solicited and a SOLICITED_WAIT stream wakes on each one (documented in dat/verbs)")
	x := newXferPair(t, xferAttr(dat.CompletionSolicitedWait, dat.CompletionUnsignalled), xferAttr(dat.CompletionSolicitedWait, 0))
	src := register(t, x.c, x.c.pz, 64, dat.MemPrivLocalRead)
	dst := register(t, x.s, x.s.pz, 64, dat.MemPrivLocalWrite)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{dst.seg(0, 64)}, i, dat.CompletionDefault))
	}
	type result struct {
		ev    dat.Event
		nmore int
		err   error
	}
	woke := make(chan result, 1)
	go func() {
		ev, nmore, err := x.sRecv.Wait(dat.TimeoutOf(eventWait), 1)
		woke <- result{ev, nmore, err}
	}()
	require.Eventually(t, func() bool { p, _ := x.sRecv.Query(); return p.Waiting }, eventWait, time.Millisecond, "the waiter blocks")

	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 8)}, 1, dat.CompletionSuppress))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 8)}, 2, dat.CompletionUnsignalled))
	require.Eventually(t, func() bool { p, _ := x.sRecv.Query(); return p.Queued == 2 }, eventWait, time.Millisecond)
	select {
	case r := <-woke:
		t.Fatalf("unsolicited receives woke the waiter: %+v", r)
	default:
	}
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 8)}, 3, dat.CompletionSolicitedWait))
	r := <-woke
	require.NoError(t, r.err)
	require.Equal(t, uint64(1), r.ev.DTO.Cookie, "the oldest event comes first")
	require.Equal(t, 2, r.nmore)

	ev := waitFor(t, x.cReq, dat.DTOCompletionEvent)
	require.Equal(t, uint64(2), ev.DTO.Cookie, "the SUPPRESSed Send left no event; the UNSIGNALLED one did")
	ev = waitFor(t, x.cReq, dat.DTOCompletionEvent)
	require.Equal(t, uint64(3), ev.DTO.Cookie)
}

// A receive too small for the message completes in error
// (DAT_DTO_ERR_LOCAL_LENGTH) and the connection breaks: iWARP cannot
// recover a stream with an unplaced message.
func TestDTORecvTooSmall(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	src := register(t, x.c, x.c.pz, 128, dat.MemPrivLocalRead)
	dst := register(t, x.s, x.s.pz, 128, dat.MemPrivLocalWrite)
	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{dst.seg(0, 16)}, 1, dat.CompletionDefault))
	require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 17)}, 2, dat.CompletionDefault))
	ev := waitFor(t, x.sRecv, dat.DTOCompletionEvent)
	if testProvider == "iwarp" {
		require.Equal(t, dat.DTOErrLocalLength, ev.DTO.Status)
	} else {
		// The work completion status is the device's: LOC_LEN_ERR on
		// siw, LOC_QP_OP_ERR on rxe (documented in dat/verbs).
		require.Contains(t, []dat.DTOStatus{dat.DTOErrLocalLength, dat.DTOErrLocalEP}, ev.DTO.Status)
	}
	ev = waitFor(t, x.sConn, dat.ConnectionEventBroken)
	require.Same(t, x.sep, ev.Conn.EP)
}

// One SRQ feeds three EPs: each EP's receive completion goes to its own
// recv EVD, the SRQ's posted count falls, and the low-watermark event
// fires on the async EVD.
func TestDTOSRQFeedsThreeEPs(t *testing.T) {
	s := newSide(t, "lo")
	srq, err := s.ia.CreateSRQ(s.pz, dat.SRQAttr{MaxRecvDTOs: 8, MaxRecvIOV: 1})
	require.NoError(t, err)
	buf := register(t, s, s.pz, 8*64, dat.MemPrivLocalWrite)
	for i := 0; i < 6; i++ {
		require.NoError(t, srq.PostRecv([]dat.LMRTriplet{buf.seg(i*64, 64)}, uint64(100+i)))
	}
	require.NoError(t, srq.SetLowWatermark(4))
	psp := s.psp(t)
	type peer struct {
		c        side
		cep, sep *dat.EP
		recv     *dat.EVD
	}
	var peers []peer
	for i := 0; i < 3; i++ {
		p := peer{c: newSide(t, "lo")}
		p.cep = p.c.ep(t)
		p.recv, err = s.ia.CreateEVD(8, dat.EVDDTO)
		require.NoError(t, err)
		p.sep, err = s.ia.CreateEPWithSRQ(s.pz, p.recv, nil, s.evd, srq, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64, MaxRecvDTOs: 8})
		require.NoError(t, err)
		require.NoError(t, p.cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
		ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
		require.NoError(t, ev.CR.CR.Accept(p.sep, nil))
		waitFor(t, s.evd, dat.ConnectionEventEstablished)
		waitFor(t, p.c.evd, dat.ConnectionEventEstablished)
		peers = append(peers, p)
	}
	for i, p := range peers {
		src := register(t, p.c, p.c.pz, 64, dat.MemPrivLocalRead)
		copy(src.buf, []byte{byte('a' + i)})
		require.NoError(t, p.cep.PostSend([]dat.LMRTriplet{src.seg(0, 1)}, 1, dat.CompletionSuppress))
		ev := waitFor(t, p.recv, dat.DTOCompletionEvent)
		require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
		require.Same(t, p.sep, ev.DTO.EP)
		require.Equal(t, uint64(100+i), ev.DTO.Cookie, "SRQ receives are taken in post order")
		require.Equal(t, byte('a'+i), buf.buf[i*64])
	}
	q, err := srq.Query()
	require.NoError(t, err)
	require.Equal(t, 3, q.Posted)
	ev := waitFor(t, s.ia.AsyncEVD(), dat.AsyncSRQLowWatermark)
	require.Same(t, srq, ev.Async.Handle)
	require.Equal(t, dat.SRQLowWatermark, ev.Async.Reason)
}

// The EVD threshold wait with DTO completions: a wait for 3 returns only
// once 3 completions are queued.
func TestDTOThresholdWait(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	src := register(t, x.c, x.c.pz, 64, dat.MemPrivLocalRead)
	dst := register(t, x.s, x.s.pz, 3*64, dat.MemPrivLocalWrite)
	for i := 0; i < 3; i++ {
		require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{dst.seg(i*64, 64)}, uint64(i), dat.CompletionDefault))
	}
	for i := 0; i < 3; i++ {
		require.NoError(t, x.cep.PostSend([]dat.LMRTriplet{src.seg(0, 4)}, uint64(i), dat.CompletionSuppress))
	}
	ev, nmore, err := x.sRecv.Wait(dat.TimeoutOf(eventWait), 3)
	require.NoError(t, err)
	require.Equal(t, uint64(0), ev.DTO.Cookie)
	require.Equal(t, 2, nmore)
}

// A peer's RDMA Write into a region without remote write access never
// lands: the target terminates the connection and its memory is unchanged.
func TestDTORemoteProtection(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	local := register(t, x.c, x.c.pz, 64, dat.MemPrivLocalRead)
	fill(local.buf, 1)
	guarded := register(t, x.s, x.s.pz, 64, dat.MemPrivLocalWrite|dat.MemPrivRemoteRead)
	require.NoError(t, x.cep.PostRDMAWrite([]dat.LMRTriplet{local.seg(0, 64)}, 1, guarded.remote(0, 64), dat.CompletionDefault))
	waitFor(t, x.sConn, dat.ConnectionEventBroken)
	if a, _, err := x.c.ia.Query(); err == nil && testProvider != "iwarp" && a.Transport == "iwarp" {
		// Kernel siw completes the Write successfully at the initiator
		// and then reports the target's TERMINATE and close as a plain
		// DISCONNECTED (status 0), with no QP event: the initiator
		// cannot tell it from a graceful close (documented in dat/verbs).
		ev, _, err := x.cConn.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err)
		require.Contains(t, []dat.EventNumber{dat.ConnectionEventBroken, dat.ConnectionEventDisconnected}, ev.Number)
	} else {
		waitFor(t, x.cConn, dat.ConnectionEventBroken)
	}
	require.Equal(t, make([]byte, 64), guarded.buf)
}

// An SRQ receive that an EP consumed, but that the EP was freed before
// reporting, goes back to the SRQ: no consumer will ever see that
// completion, and without it the SRQ would hold one receive fewer for
// good. The next EP on the SRQ receives into it.
func TestDTOSRQReceiveOfFreedEPRestored(t *testing.T) {
	s := newSide(t, "lo")
	srq, err := s.ia.CreateSRQ(s.pz, dat.SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1})
	require.NoError(t, err)
	buf := register(t, s, s.pz, 64, dat.MemPrivLocalWrite)
	require.NoError(t, srq.PostRecv([]dat.LMRTriplet{buf.seg(0, 64)}, 42))
	posted := func() int {
		q, err := srq.Query()
		require.NoError(t, err)
		return q.Posted
	}
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	defer psp.Free()
	connect := func(c side) (cep, sep *dat.EP, recv *dat.EVD) {
		return connectOnSRQ(t, s, psp, srq, c, 4)
	}
	send := func(c side, ep *dat.EP, b byte) {
		src := register(t, c, c.pz, 64, dat.MemPrivLocalRead)
		src.buf[0] = b
		require.NoError(t, ep.PostSend([]dat.LMRTriplet{src.seg(0, 1)}, 1, dat.CompletionDefault))
		ev := waitFor(t, c.evd, dat.DTOCompletionEvent)
		require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
	}

	c1 := newSide(t, "lo")
	cep1, sep1, recv1 := connect(c1)
	send(c1, cep1, 'a')
	// The message took the receive; its completion waits in the CQ of
	// recv1, which nobody polls before the EP goes. The iwarp provider
	// counts a receive off when it takes it; a verbs adapter's taking
	// shows only in the CQ, so there the Send's completion must do (on
	// RC over rxe it means the receive was consumed; siw completes a Send
	// once it is on TCP, so a moment more is given). If the message came
	// after the EP was freed, the receive was never taken and the checks
	// below hold all the same.
	if testProvider == "iwarp" {
		for limit := time.Now().Add(eventWait); posted() != 0; time.Sleep(time.Millisecond) {
			require.False(t, time.Now().After(limit), "the receive was not taken")
		}
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, sep1.Disconnect(dat.CloseAbrupt))
	waitFor(t, s.evd, dat.ConnectionEventDisconnected)
	require.NoError(t, sep1.Free())
	_, err = recv1.Dequeue()
	requireCode(t, err, dat.QueueEmpty, dat.NoSubtype)
	require.Equal(t, 1, posted(), "the freed EP's receive is back in the SRQ")

	c2 := newSide(t, "lo")
	cep2, _, recv2 := connect(c2)
	send(c2, cep2, 'b')
	ev := waitFor(t, recv2, dat.DTOCompletionEvent)
	require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
	require.Equal(t, uint64(42), ev.DTO.Cookie)
	require.Equal(t, byte('b'), buf.buf[0])
	require.Equal(t, 0, posted())
	require.NoError(t, cep1.Free())
}

// connectOnSRQ connects a fresh EP of c to an EP of s that receives from
// srq (max_recv_dtos maxRecv, completions on a recv EVD of its own),
// accepted on psp.
func connectOnSRQ(t *testing.T, s side, psp *dat.PSP, srq *dat.SRQ, c side, maxRecv int) (cep, sep *dat.EP, recv *dat.EVD) {
	t.Helper()
	cep = c.ep(t)
	recv, err := s.ia.CreateEVD(8, dat.EVDDTO)
	require.NoError(t, err)
	sep, err = s.ia.CreateEPWithSRQ(s.pz, recv, nil, s.evd, srq, &dat.EPAttr{MaxMessageSize: 64, MaxRDMASize: 64, MaxRecvDTOs: maxRecv})
	require.NoError(t, err)
	require.NoError(t, cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	require.NoError(t, ev.CR.CR.Accept(sep, nil))
	waitFor(t, s.evd, dat.ConnectionEventEstablished)
	waitFor(t, c.evd, dat.ConnectionEventEstablished)
	return cep, sep, recv
}

// On a provider that reports SRQEPLimit, an EP holds at most its
// max_recv_dtos of the SRQ's receives whose events were not dequeued: a
// peer that sends more breaks its own connection, and the SRQ keeps the
// rest for the other EPs, which go on receiving; an EP whose events are
// dequeued receives any number.
func TestDTOSRQEPLimit(t *testing.T) {
	s := newSide(t, "lo")
	if _, pa, err := s.ia.Query(); err != nil || !pa.SRQEPLimit {
		t.Skip("the provider does not bound an EP's share of its SRQ")
	}
	srq, err := s.ia.CreateSRQ(s.pz, dat.SRQAttr{MaxRecvDTOs: 8, MaxRecvIOV: 1})
	require.NoError(t, err)
	buf := register(t, s, s.pz, 8*64, dat.MemPrivLocalWrite)
	for i := range 8 {
		require.NoError(t, srq.PostRecv([]dat.LMRTriplet{buf.seg(i*64, 64)}, uint64(i)))
	}
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, nil)
	require.NoError(t, err)
	defer psp.Free()
	greedy := newSide(t, "lo")
	gcep, gsep, grecv := connectOnSRQ(t, s, psp, srq, greedy, 2)
	fair := newSide(t, "lo")
	fcep, _, frecv := connectOnSRQ(t, s, psp, srq, fair, 2)

	src := register(t, greedy, greedy.pz, 64, dat.MemPrivLocalRead)
	for i := range 5 {
		require.NoError(t, gcep.PostSend([]dat.LMRTriplet{src.seg(0, 8)}, uint64(i), dat.CompletionSuppress))
	}
	// Nobody dequeues from grecv: the third Send finds no receive for
	// its EP.
	ev := waitFor(t, s.evd, dat.ConnectionEventBroken)
	require.Same(t, gsep, ev.Conn.EP)
	q, err := srq.Query()
	require.NoError(t, err)
	require.Equal(t, 6, q.Posted, "the greedy peer took only its EP's two receives")

	fsrc := register(t, fair, fair.pz, 64, dat.MemPrivLocalRead)
	for i := range 4 { // twice its max_recv_dtos, each dequeued
		require.NoError(t, fcep.PostSend([]dat.LMRTriplet{fsrc.seg(0, 8)}, uint64(i), dat.CompletionSuppress))
		ev := waitFor(t, frecv, dat.DTOCompletionEvent)
		require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
	}
	// Polled, the greedy EP's two receives are reported as usual.
	for range 2 {
		ev := waitFor(t, grecv, dat.DTOCompletionEvent)
		require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
	}
}
