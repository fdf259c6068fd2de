//go:build verbs && linux && cgo

package verbs

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// These tests feed the completion mapping work completions built here, so
// they need no device and run on any host that builds the package.

// hostCQ is a CQ without an ibv_cq: Poll serves its stash only.
func hostCQ(qps ...*QP) (*CQ, map[uint32]*QP) {
	c := &CQ{ia: &IA{}, qps: make(map[uint32]*QP)}
	for i, q := range qps {
		c.qps[uint32(100+i)] = q
	}
	return c, c.qps
}

// feed maps w as pollLocked does and stashes the result.
func feed(c *CQ, w wcRec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if comp, ok := c.mapLocked(w); ok {
		c.stash = append(c.stash, comp)
	}
}

// A dat ID comes back unchanged with the QP's tag, on the right queue
// even for a failed completion, which has no opcode; a flushed one is
// dropped (package dat flushes what the provider did not finish); all
// count towards the drain.
func TestMapDatIDs(t *testing.T) {
	q := &QP{tag: 7}
	c, _ := hostCQ(q)
	send, err := encodeWRID(41, false)
	require.NoError(t, err)
	recv, err := encodeWRID(41, true)
	require.NoError(t, err)
	require.NotEqual(t, send, recv, "one ID on both queues must stay two wr_ids")
	feed(c, wcRec{wrID: send, status: wcSuccess, opcode: wcOpRDMARead, byteLen: 9, qpNum: 100})
	feed(c, wcRec{wrID: recv, status: wcRemAccess, opcode: 0xff, qpNum: 100})
	feed(c, wcRec{wrID: recv, status: wcSuccess, opcode: wcOpRecv, byteLen: 5, qpNum: 100})
	feed(c, wcRec{wrID: send, status: wcFlushErr, opcode: 0xff, qpNum: 100})
	feed(c, wcRec{wrID: recv, status: wcFlushErr, opcode: 0xff, qpNum: 100})
	var dst [8]driver.Completion
	require.Equal(t, 3, c.Poll(dst[:]))
	require.Equal(t, []driver.Completion{
		{WRID: 41, QPTag: 7, Op: driver.OpRDMARead, Length: 9},
		{WRID: 41, QPTag: 7, Op: driver.OpRecv, Status: driver.StatusRemoteAccess},
		{WRID: 41, QPTag: 7, Op: driver.OpRecv, Length: 5, Solicited: true},
	}, dst[:3])
	require.EqualValues(t, 2, q.sendDone.Load())
	require.EqualValues(t, 3, q.recvDone.Load(), "receive completions count towards the drain")
}

// The largest ID package dat may use comes back intact on both queues;
// one beyond it is refused at posting rather than mistaken for a
// provider request or a receive.
func TestWRIDLimit(t *testing.T) {
	q := &QP{tag: 3}
	c, _ := hostCQ(q)
	top := uint64(driver.MaxWRID - 1)
	send, err := encodeWRID(top, false)
	require.NoError(t, err)
	recv, err := encodeWRID(top, true)
	require.NoError(t, err)
	feed(c, wcRec{wrID: send, status: wcSuccess, opcode: wcOpSend, qpNum: 100})
	feed(c, wcRec{wrID: recv, status: wcSuccess, opcode: wcOpRecv, qpNum: 100})
	var dst [4]driver.Completion
	require.Equal(t, 2, c.Poll(dst[:]))
	require.Equal(t, driver.Completion{WRID: top, QPTag: 3, Op: driver.OpSend}, dst[0])
	require.Equal(t, driver.Completion{WRID: top, QPTag: 3, Op: driver.OpRecv, Solicited: true}, dst[1])
	for _, id := range []uint64{driver.MaxWRID, math.MaxUint64, wrHandleOf(wrBind, 1)} {
		_, err := encodeWRID(id, false)
		require.Error(t, err, "ID %#x", id)
		_, err = encodeWRID(id, true)
		require.Error(t, err, "ID %#x", id)
	}
}

// Binds are the provider's: they reach their waiter and never package
// dat, even when a dat request carries the same number; completions of
// QPs no longer on the CQ are dropped.
func TestMapFiltersProviderRequests(t *testing.T) {
	q := &QP{tag: 5}
	bw := &bindWait{seq: 2, done: make(chan struct{})}
	q.bind.Store(bw)
	c, _ := hostCQ(q)
	feed(c, wcRec{wrID: 1, status: wcSuccess, opcode: wcOpSend, qpNum: 100})             // dat's ID 1
	feed(c, wcRec{wrID: wrHandleOf(wrBind, 1), status: wcSuccess, qpNum: 100})           // a stale bind
	feed(c, wcRec{wrID: wrHandleOf(wrBind, 2), status: wcRemAccess, qpNum: 100})         // the bind
	feed(c, wcRec{wrID: 2 | wrRecvBit, status: wcSuccess, opcode: wcOpRecv, qpNum: 101}) // no such QP
	select {
	case <-bw.done:
		require.EqualValues(t, wcRemAccess, bw.status)
	default:
		t.Fatal("the bind's completion did not reach its waiter")
	}
	var dst [8]driver.Completion
	require.Equal(t, 1, c.Poll(dst[:]))
	require.Equal(t, driver.Completion{WRID: 1, QPTag: 5, Op: driver.OpSend}, dst[0])
	require.EqualValues(t, 3, q.sendDone.Load(), "dat's request and both binds")
}

// SRQ receives take the consuming QP's tag and count down the SRQ's
// posted receives, not the QP's own receive queue.
func TestMapSRQ(t *testing.T) {
	s := &SRQ{}
	a, b := &QP{tag: 1, srq: s}, &QP{tag: 2, srq: s}
	c, _ := hostCQ(a, b)
	w1, err := encodeWRID(10, true)
	require.NoError(t, err)
	w2, err := encodeWRID(driver.MaxWRID-1, true)
	require.NoError(t, err)
	s.posted.Store(2)
	feed(c, wcRec{wrID: w1, status: wcSuccess, opcode: wcOpRecv, byteLen: 3, qpNum: 101})
	feed(c, wcRec{wrID: w2, status: wcSuccess, opcode: wcOpRecv, byteLen: 4, qpNum: 100})
	var dst [4]driver.Completion
	require.Equal(t, 2, c.Poll(dst[:]))
	require.Equal(t, driver.Completion{WRID: 10, QPTag: 2, Op: driver.OpRecv, Length: 3, Solicited: true}, dst[0])
	require.Equal(t, driver.Completion{WRID: driver.MaxWRID - 1, QPTag: 1, Op: driver.OpRecv, Length: 4, Solicited: true}, dst[1])
	require.Zero(t, s.Posted())
	require.Zero(t, a.recvDone.Load()+b.recvDone.Load())
}

// Poll hands out the stash oldest first, in pieces as small as dst.
func TestPollStashOrder(t *testing.T) {
	q := &QP{tag: 9}
	c, _ := hostCQ(q)
	for id := uint64(0); id < 5; id++ {
		feed(c, wcRec{wrID: id | wrRecvBit, status: wcSuccess, opcode: wcOpRecv, qpNum: 100})
	}
	var got []uint64
	for {
		var dst [2]driver.Completion
		n := c.Poll(dst[:])
		for _, x := range dst[:n] {
			got = append(got, x.WRID)
		}
		if n == 0 {
			break
		}
	}
	require.Equal(t, []uint64{0, 1, 2, 3, 4}, got)
	require.Zero(t, c.Poll(make([]driver.Completion, 1)))
}

// A request posted unsignalled (wrQuiet) reports only a failure, with
// dat's ID and QP tag, on the send queue; its flush is dropped like any
// other. Neither counts towards the drain, which waits on signalled
// requests only (their posts alone are counted).
func TestMapQuietRequests(t *testing.T) {
	q := &QP{tag: 4}
	c, _ := hostCQ(q)
	feed(c, wcRec{wrID: wrHandleOf(wrQuiet, 12), status: wcRemAccess, opcode: 0xff, qpNum: 100})
	feed(c, wcRec{wrID: wrHandleOf(wrQuiet, 13), status: wcFlushErr, opcode: 0xff, qpNum: 100})
	feed(c, wcRec{wrID: wrHandleOf(wrDrain, 0), status: wcSuccess, opcode: wcOpRDMAWrite, qpNum: 100})
	var dst [4]driver.Completion
	require.Equal(t, 1, c.Poll(dst[:]))
	require.Equal(t, driver.Completion{WRID: 12, QPTag: 4, Op: driver.OpSend, Status: driver.StatusRemoteAccess}, dst[0])
	require.EqualValues(t, 1, q.sendDone.Load(), "only the drain marker counts")
	// dat's largest ID that fits a wrQuiet wr_id maps back whole.
	feed(c, wcRec{wrID: wrHandleOf(wrQuiet, wrIdxMask), status: wcRemAccess, opcode: 0xff, qpNum: 100})
	require.Equal(t, 1, c.Poll(dst[:]))
	require.EqualValues(t, wrIdxMask, dst[0].WRID)
}
