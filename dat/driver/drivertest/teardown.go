package drivertest

import (
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// endKind is how a side ends its connection.
type endKind int

const (
	endAbrupt   endKind = iota // Disconnect(false)
	endGraceful                // Disconnect(true)
	endClose                   // QP.Close
)

// end ends ep's connection the given way; the call must return nil.
func (ep *endpoint) end(k endKind) {
	ep.e.t.Helper()
	switch k {
	case endAbrupt:
		ep.disconnect(false)
	case endGraceful:
		ep.disconnect(true)
	case endClose:
		ep.close()
	}
}

// find returns the completion of id among cs.
func find(cs []driver.Completion, id uint64) (driver.Completion, bool) {
	for _, c := range cs {
		if c.WRID == id {
			return c, true
		}
	}
	return driver.Completion{}, false
}

// checkCounts waits a quiet period and checks how often OnDisconnect was
// called on each side.
func (e *env) checkCounts(c *conn, active, passive int32) {
	e.t.Helper()
	e.sleepQuiet()
	require.Equal(e.t, active, c.a.disc.n.Load(), "OnDisconnect calls on the active side")
	require.Equal(e.t, passive, c.p.disc.n.Load(), "OnDisconnect calls on the passive side")
}

// testLocalEndQuiesces: the passive side ends its connection while the
// peer's Sends stream into its receives. Once the call returns, its CQs
// hold every completion it will ever produce, all successful (a provider
// flushes nothing itself), no byte of its receive buffers changes any
// more, and it gets no OnDisconnect; the peer gets exactly one and is
// quiescent by then.
func testLocalEndQuiesces(e *env, k endKind) {
	c := e.pair()
	n := min(8, c.a.cfg.MaxSendWR, c.p.cfg.MaxRecvWR)
	sz := int(min(64<<10, c.a.cfg.MaxMessageSize))
	rbuf := e.register(c.p.pd, n*sz, driver.AccessLocalWrite)
	src := e.register(c.a.pd, n*sz, driver.AccessLocalWrite)
	var rids []uint64
	var data [][]byte
	for i := range n {
		rids = append(rids, c.p.postRecv(rbuf.sge(i*sz, sz)))
		data = append(data, src.fill(i*sz, sz, byte(i)))
	}
	for i := range n {
		c.a.send(src.sge(i*sz, sz))
	}
	// Data is flowing once the first receive completed.
	got := []driver.Completion{c.p.rcq.awaitAny()}
	c.p.end(k)
	got = append(got, c.p.checkQuiescent(rbuf)...)
	for _, comp := range got {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "receive completed by the provider at the end of the connection: %+v", comp)
		for i, id := range rids {
			if id == comp.WRID {
				require.Equal(e.t, uint32(sz), comp.Length)
				e.checkBytes(fmt.Sprintf("receive %d", i), rbuf.buf[i*sz:(i+1)*sz], data[i])
			}
		}
	}
	c.a.awaitDisconnect()
	for _, comp := range c.a.checkQuiescent(src) {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "send completed by the provider at the end of the connection: %+v", comp)
	}
	e.checkCounts(c, 1, 0)
}

// testPeerEnd: the active side sends one message and ends its connection;
// the passive side gets exactly one OnDisconnect (nil error for a
// graceful Disconnect), is quiescent when it comes (the message's receive
// already in its CQ if the end was graceful), and its own Disconnect and
// Close afterwards return without another call.
func testPeerEnd(e *env, k endKind) {
	c := e.pair()
	const sz = 4096
	rbuf := e.register(c.p.pd, 4*sz, driver.AccessLocalWrite)
	var rids []uint64
	for i := range 4 {
		rids = append(rids, c.p.postRecv(rbuf.sge(i*sz, sz)))
	}
	src := e.register(c.a.pd, sz, driver.AccessLocalWrite)
	data := src.fill(0, sz, 17)
	sid := c.a.send(src.sge(0, sz))
	c.a.end(k)
	agot := c.a.checkQuiescent(src)
	err := c.p.awaitDisconnect()
	pgot := c.p.checkQuiescent(rbuf)
	for _, comp := range append(agot, pgot...) {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "completion made by the provider at the end of the connection: %+v", comp)
	}
	if comp, ok := find(pgot, rids[0]); ok {
		require.Equal(e.t, uint32(sz), comp.Length)
		e.checkBytes("message received before the end", rbuf.buf[:sz], data)
	}
	if k == endGraceful {
		require.NoError(e.t, err, "OnDisconnect after the peer's graceful Disconnect (an orderly close)")
		_, ok := find(agot, sid)
		require.True(e.t, ok, "graceful Disconnect returned before the Send posted ahead of it completed")
		_, ok = find(pgot, rids[0])
		require.True(e.t, ok, "OnDisconnect called before the receive of the peer's last message was in the CQ")
	}
	for _, id := range rids[1:] {
		_, ok := find(pgot, id)
		require.False(e.t, ok, "a receive no message was sent for completed")
	}
	e.checkCounts(c, 0, 1)
	c.p.disconnect(false)
	c.p.close()
	e.checkCounts(c, 0, 1)
}

// testPostsAfterEnd: posts on a QP whose connection ended (locally or by
// the peer) return nil and produce nothing.
func testPostsAfterEnd(e *env) {
	c := e.pair()
	c.a.disconnect(false)
	c.p.awaitDisconnect()
	for _, pair := range [][2]*endpoint{{c.a, c.p}, {c.p, c.a}} {
		ep, peer := pair[0], pair[1]
		ep.checkQuiescent()
		buf := e.register(ep.pd, 4096, driver.AccessLocalWrite)
		tgt := e.register(peer.pd, 4096, accessAll)
		_, err := ep.postRecvErr(buf.sge(0, 4096))
		require.NoError(e.t, err, "%s: PostRecv after the end", ep.name)
		_, err = ep.postSendErr(driver.OpSend, driver.SendSignaled, driver.RemoteSegment{}, buf.sge(0, 64))
		require.NoError(e.t, err, "%s: PostSend after the end", ep.name)
		_, err = ep.postSendErr(driver.OpRDMAWrite, driver.SendSignaled, tgt.remote(0, 64), buf.sge(0, 64))
		require.NoError(e.t, err, "%s: RDMA Write after the end", ep.name)
		_, err = ep.postSendErr(driver.OpRDMARead, driver.SendSignaled, tgt.remote(0, 64), buf.sge(64, 64))
		require.NoError(e.t, err, "%s: RDMA Read after the end", ep.name)
		ep.scq.none("posts after the end")
		ep.rcq.none("posts after the end")
		e.checkUntouched("buffer posted after the end", buf.buf)
		e.checkUntouched("peer memory named after the end", tgt.buf)
	}
	e.checkCounts(c, 0, 1)
}

// testGracefulSendFinishes: a large Send posted just before a graceful
// Disconnect completes successfully before Disconnect returns, and the
// peer receives all of it before its OnDisconnect.
func testGracefulSendFinishes(e *env) {
	c := e.pair()
	n := int(min(1<<20, c.a.cfg.MaxMessageSize))
	dst := e.register(c.p.pd, n, driver.AccessLocalWrite)
	src := e.register(c.a.pd, n, driver.AccessLocalWrite)
	data := src.fill(0, n, 23)
	rid := c.p.postRecv(dst.sge(0, n))
	sid := c.a.send(src.sge(0, n))
	c.a.disconnect(true)
	comp, ok := find(c.a.scq.drain(), sid)
	require.True(e.t, ok, "graceful Disconnect returned, the Send posted before it is not in the CQ")
	require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
	require.NoError(e.t, c.p.awaitDisconnect(), "OnDisconnect after a graceful Disconnect")
	comp, ok = find(c.p.rcq.drain(), rid)
	require.True(e.t, ok, "OnDisconnect called, the receive of the last message is not in the CQ")
	require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
	require.Equal(e.t, uint32(n), comp.Length)
	e.checkBytes("message sent before a graceful Disconnect", dst.buf, data)
}

// testDisconnectIdempotent: Disconnect again, in either mode, after a
// local or a peer's end, and Close twice, all return nil and call
// nothing.
func testDisconnectIdempotent(e *env) {
	c := e.pair()
	c.a.disconnect(true)
	c.a.disconnect(true)
	c.a.disconnect(false)
	c.p.awaitDisconnect()
	c.p.disconnect(false)
	c.p.disconnect(true)
	for range 2 {
		c.a.close()
		c.p.close()
	}
	e.checkCounts(c, 0, 1)
}
