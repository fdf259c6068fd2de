package dat_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// PostSendList: the requests run in list order, each completing as if
// posted alone (a Send behind two Writes arrives after their bytes
// landed); a list with a bad request, or longer than the queue's room,
// posts none of it; on a disconnected EP every request flushes.
func TestDTOPostSendList(t *testing.T) {
	x := newXferPair(t, xferAttr(0, 0), xferAttr(0, 0))
	local := register(t, x.c, x.c.pz, 1<<16, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
	remote := register(t, x.s, x.s.pz, 1<<16, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite)
	slot := register(t, x.s, x.s.pz, 256, dat.MemPrivLocalWrite)
	fill(local.buf, 11)

	require.NoError(t, x.sep.PostRecv([]dat.LMRTriplet{slot.seg(0, 256)}, 100, dat.CompletionDefault))
	n, err := x.cep.PostSendList([]dat.SendRequest{
		{Op: dat.DTORDMAWrite, IOV: []dat.LMRTriplet{local.seg(0, 20000)}, Cookie: 1, Remote: remote.remote(0, 20000), Flags: dat.CompletionSuppress},
		{Op: dat.DTORDMAWrite, IOV: []dat.LMRTriplet{local.seg(20000, 100), local.seg(30000, 900)}, Cookie: 2, Remote: remote.remote(20000, 1000)},
		{Op: dat.DTOSend, IOV: []dat.LMRTriplet{local.seg(40000, 64)}, Cookie: 3},
	})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	dto(t, x.cReq, 2, dat.DTORDMAWrite) // 1 was SUPPRESSed
	dto(t, x.cReq, 3, dat.DTOSend)
	got := dto(t, x.sRecv, 100, dat.DTOReceive)
	require.Equal(t, uint32(64), got.Length)
	require.True(t, bytes.Equal(local.buf[:20000], remote.buf[:20000]), "first Write in place when the Send arrived")
	require.True(t, bytes.Equal(local.buf[20000:20100], remote.buf[20000:20100]))
	require.True(t, bytes.Equal(local.buf[30000:30900], remote.buf[20100:21000]), "second Write gathered both segments")
	require.True(t, bytes.Equal(local.buf[40000:40064], slot.buf[:64]))

	// A bad request anywhere posts nothing, and the error names it.
	n, err = x.cep.PostSendList([]dat.SendRequest{
		{Op: dat.DTORDMAWrite, IOV: []dat.LMRTriplet{local.seg(0, 100)}, Cookie: 4, Remote: remote.remote(30000, 100)},
		{Op: dat.DTOSend, IOV: []dat.LMRTriplet{{Addr: 1, Length: 8, Context: 0xdead}}, Cookie: 5},
	})
	requireCode(t, err, dat.PrivilegesViolation, dat.NoSubtype)
	require.ErrorContains(t, err, "request 1")
	require.Zero(t, n)
	n, err = x.cep.PostSendList([]dat.SendRequest{{Op: dat.DTOReceive, Cookie: 6}})
	requireCode(t, err, dat.InvalidParameter, dat.Arg(2))
	require.Zero(t, n)
	// More than the queue holds (16 request DTOs): none posted.
	long := make([]dat.SendRequest, 17)
	for i := range long {
		long[i] = dat.SendRequest{Op: dat.DTORDMAWrite, IOV: []dat.LMRTriplet{local.seg(0, 8)}, Cookie: uint64(10 + i), Remote: remote.remote(40000, 8)}
	}
	n, err = x.cep.PostSendList(long)
	requireCode(t, err, dat.InsufficientResources, dat.NoSubtype)
	require.Zero(t, n)
	_, derr := x.cReq.Dequeue()
	requireCode(t, derr, dat.QueueEmpty, dat.NoSubtype)
	require.Equal(t, make([]byte, 100), remote.buf[30000:30100], "a refused list wrote nothing")

	// Disconnected: every request flushes, in order.
	require.NoError(t, x.cep.Disconnect(dat.CloseAbrupt))
	waitFor(t, x.cConn, dat.ConnectionEventDisconnected)
	n, err = x.cep.PostSendList(long[:3])
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i := range 3 {
		ev := waitFor(t, x.cReq, dat.DTOCompletionEvent)
		require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status)
		require.Equal(t, uint64(10+i), ev.DTO.Cookie)
	}
}
