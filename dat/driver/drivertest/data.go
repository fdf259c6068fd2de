package drivertest

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

const accessAll = driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead

// checkBytes fails unless b equals want.
func (e *env) checkBytes(what string, b, want []byte) {
	e.t.Helper()
	if !bytes.Equal(b, want) {
		i := 0
		for i < len(b) && i < len(want) && b[i] == want[i] {
			i++
		}
		e.t.Fatalf("%s: %d bytes differ from byte %d on", what, len(want), i)
	}
}

// checkUntouched fails unless b holds only the guard byte.
func (e *env) checkUntouched(what string, b []byte) {
	e.t.Helper()
	for i, x := range b {
		if x != guardByte {
			e.t.Fatalf("%s: byte %d of %d was written (%#x)", what, i, len(b), x)
		}
	}
}

// sendOne sends n bytes from `from` to a receive of `to`, checks both
// completions and the bytes, and that the receive buffer past the
// message is untouched.
func (e *env) sendOne(from, to *endpoint, n int, seed byte) {
	e.t.Helper()
	src := e.register(from.pd, max(n, 1), driver.AccessLocalWrite)
	dst := e.register(to.pd, n+200, driver.AccessLocalWrite)
	data := src.fill(0, n, seed)
	rid := to.postRecv(dst.sge(100, n+50))
	var segs []driver.SGE // an empty message has no segment, as dat posts it
	if n > 0 {
		segs = append(segs, src.sge(0, n))
	}
	sid := from.send(segs...)
	from.scq.awaitOK(sid, uint32(n))
	to.rcq.awaitOK(rid, uint32(n))
	e.checkBytes(fmt.Sprintf("%d-byte message", n), dst.buf[100:100+n], data)
	e.checkUntouched("receive buffer before the SGE", dst.buf[:100])
	e.checkUntouched("receive buffer past the message", dst.buf[100+n:])
}

// testSendRecv: a Send lands in the peer's receive, both ways.
func testSendRecv(e *env) {
	c := e.pair()
	e.sendOne(c.a, c.p, 4000, 1)
	e.sendOne(c.p, c.a, 4000, 2)
}

// testSendLengths: receives report the message length, from empty to
// many segments long.
func testSendLengths(e *env) {
	c := e.pair()
	for i, n := range []int{0, 1, 7, 4096, 65537, 300000} {
		if uint32(n) > c.a.cfg.MaxMessageSize {
			continue
		}
		e.sendOne(c.a, c.p, n, byte(i))
	}
}

// testRecvTooSmall: a Send longer than its receive never completes it
// successfully and writes nothing past it.
func testRecvTooSmall(e *env) {
	c := e.pair()
	dst := e.register(c.p.pd, 4096, driver.AccessLocalWrite)
	rid := c.p.postRecv(dst.sge(0, 16))
	src := e.register(c.a.pd, 100, driver.AccessLocalWrite)
	src.fill(0, 100, 1)
	c.a.send(src.sge(0, 100))
	if comp, ok := c.p.waitCompletionOrEnd(rid); ok {
		require.NotEqual(e.t, driver.StatusSuccess, comp.Status, "a receive too small for its message completed successfully: %+v", comp)
	}
	e.checkUntouched("receive buffer past a too-small receive", dst.buf[16:])
}

// waitCompletionOrEnd waits until id completes (true) or the connection
// ends without completing it (OnDisconnect; false).
func (ep *endpoint) waitCompletionOrEnd(id uint64) (driver.Completion, bool) {
	ep.e.t.Helper()
	r := ep.rcq
	if p := ep.e.lookup(id); p != nil && p.op != driver.OpRecv {
		r = ep.scq
	}
	deadline := deadlineAfter(ep.e.timeout)
	for {
		if c, ok := r.take(id); ok {
			return c, true
		}
		if ep.disc.n.Load() > 0 {
			// Quiescence: whatever the QP produced is in its CQs now.
			r.poll()
			c, ok := r.take(id)
			return c, ok
		}
		if !r.waitMore(minTime(deadline, deadlineAfter(ep.e.quiet/4))) && pastDeadline(deadline) {
			ep.e.t.Fatalf("%s: WRID %d neither completed nor ended by a disconnect within %v", ep.name, id, ep.e.timeout)
		}
	}
}

func (e *env) lookup(id uint64) *postRec {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.posted[id]
}

// testWrite: an RDMA Write lands where its RemoteSegment says and
// nowhere else, without a completion on the target.
func testWrite(e *env) {
	c := e.pair()
	dst := e.register(c.p.pd, 16384, accessAll)
	src := e.register(c.a.pd, 10000, driver.AccessLocalWrite)
	data := src.fill(0, 10000, 9)
	wid := c.a.postSend(driver.OpRDMAWrite, driver.SendSignaled, dst.remote(333, 10000), src.sge(0, 10000))
	c.a.scq.awaitOK(wid, 10000)
	e.notify(c.a, c.p)
	e.checkBytes("RDMA Write target", dst.buf[333:10333], data)
	e.checkUntouched("before the Write target", dst.buf[:333])
	e.checkUntouched("after the Write target", dst.buf[10333:])
	c.p.scq.none("target of a Write")
}

// testWriteImm: where the provider reports IAAttr.WriteImm, an RDMA Write
// with Immediate places its bytes, then completes one of the peer's
// receives with the immediate value and the Write's length, leaving the
// receive's buffer untouched; an empty one carries the value alone. A
// provider without it refuses the post with ErrNotSupported, and the
// connection goes on.
func testWriteImm(e *env) {
	c := e.pair()
	src := e.register(c.a.pd, 5000, driver.AccessLocalWrite)
	if !e.aattr.WriteImm || !e.pattr.WriteImm {
		_, err := c.a.postSendImm(0xfeed, driver.RemoteSegment{}, src.sge(0, 10))
		require.ErrorIs(e.t, err, driver.ErrNotSupported, "RDMA Write with Immediate on a provider without IAAttr.WriteImm")
		e.notify(c.a, c.p) // still connected
		return
	}
	dst := e.register(c.p.pd, 8192, accessAll)
	rbuf := e.register(c.p.pd, 64, driver.AccessLocalWrite)
	data := src.fill(0, 5000, 21)
	for i, imm := range []uint32{0xdeadbeef, 0, 1 << 31} {
		rid := c.p.postRecv(rbuf.sge(0, 64))
		wid, err := c.a.postSendImm(imm, dst.remote(100, 5000), src.sge(0, 5000))
		require.NoError(e.t, err, "post RDMA Write with Immediate %d", i)
		c.a.scq.awaitOK(wid, 5000)
		rc := c.p.rcq.awaitOK(rid, 5000)
		require.True(e.t, rc.WithImm, "receive consumed by a Write with Immediate: %+v", rc)
		require.Equal(e.t, imm, rc.Imm, "immediate value")
		e.checkBytes("Write with Immediate target", dst.buf[100:5100], data)
		e.checkUntouched("before the target", dst.buf[:100])
		e.checkUntouched("after the target", dst.buf[5100:])
		e.checkUntouched("the receive a Write with Immediate consumed", rbuf.buf)
	}
	// An empty Write: the value alone.
	rid := c.p.postRecv(rbuf.sge(0, 64))
	wid, err := c.a.postSendImm(7, dst.remote(0, 0))
	require.NoError(e.t, err, "post an empty RDMA Write with Immediate")
	c.a.scq.awaitOK(wid, 0)
	rc := c.p.rcq.awaitOK(rid, 0)
	require.True(e.t, rc.WithImm && rc.Imm == 7, "empty Write with Immediate: %+v", rc)
	// A Send still completes a receive without it.
	rid = c.p.postRecv(rbuf.sge(0, 64))
	sid := c.a.send(src.sge(0, 10))
	c.a.scq.awaitOK(sid, 10)
	rc = c.p.rcq.awaitOK(rid, 10)
	require.False(e.t, rc.WithImm, "a Send's receive reported immediate data: %+v", rc)
}

// testPostSendList: a provider that takes lists (driver.SendListPoster)
// runs them in order, each request as if posted alone; a list with a
// request it refuses posts at most those before it, which complete, and
// the connection goes on.
func testPostSendList(e *env) {
	c := e.pair()
	lp, ok := c.a.qp.(driver.SendListPoster)
	if !ok {
		e.t.Skip("the provider posts one request at a time (no driver.SendListPoster)")
	}
	dst := e.register(c.p.pd, 16384, accessAll)
	rbuf := e.register(c.p.pd, 256, driver.AccessLocalWrite)
	src := e.register(c.a.pd, 16384, driver.AccessLocalWrite)
	data := src.fill(0, 16384, 33)
	rid := c.p.postRecv(rbuf.sge(0, 256))
	ids := [3]uint64{e.id(), e.id(), e.id()}
	c.a.record(ids[0], driver.OpRDMAWrite, true)
	c.a.record(ids[1], driver.OpRDMAWrite, false)
	c.a.record(ids[2], driver.OpSend, false)
	n, err := lp.PostSendList([]driver.SendWR{
		{ID: ids[0], Op: driver.OpRDMAWrite, Local: []driver.SGE{src.sge(0, 8000)}, Remote: dst.remote(0, 8000)},
		{ID: ids[1], Op: driver.OpRDMAWrite, Flags: driver.SendSignaled, Local: []driver.SGE{src.sge(8000, 100), src.sge(9000, 900)}, Remote: dst.remote(8000, 1000)},
		{ID: ids[2], Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{src.sge(12000, 200)}},
	})
	require.NoError(e.t, err)
	require.Equal(e.t, 3, n)
	c.a.scq.awaitOK(ids[1], 1000)
	c.a.scq.awaitOK(ids[2], 200)
	c.p.rcq.awaitOK(rid, 200)
	e.checkBytes("first Write of a list", dst.buf[:8000], data[:8000])
	e.checkBytes("second Write of a list", dst.buf[8000:9000], append(append([]byte{}, data[8000:8100]...), data[9000:9900]...))
	e.checkBytes("Send of a list", rbuf.buf[:200], data[12000:12200])

	// A request the provider refuses, second in its list.
	rid = c.p.postRecv(rbuf.sge(0, 256))
	bad := [2]uint64{e.id(), e.id()}
	c.a.record(bad[0], driver.OpSend, false)
	n, err = lp.PostSendList([]driver.SendWR{
		{ID: bad[0], Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{src.sge(0, 10)}},
		{ID: bad[1], Op: driver.Opcode(99), Flags: driver.SendSignaled},
	})
	require.ErrorIs(e.t, err, driver.ErrNotSupported, "opcode 99")
	require.LessOrEqual(e.t, n, 1)
	if n == 0 {
		bad[0] = c.a.send(src.sge(0, 10)) // the Send the list did not post
	}
	c.a.scq.awaitOK(bad[0], 10)
	c.p.rcq.awaitOK(rid, 10)
	e.notify(c.a, c.p) // still connected
}

// notify sends a one-byte Send from one side to the other and waits for
// it: RC places every earlier Write of the sender before the Send's
// receive completes.
func (e *env) notify(from, to *endpoint) {
	e.t.Helper()
	rid := to.postRecv(to.ctl.sge(3000, 16))
	from.ctl.fill(3500, 1, 77)
	sid := from.send(from.ctl.sge(3500, 1))
	from.scq.awaitOK(sid, 1)
	to.rcq.awaitOK(rid, 1)
}

// testRead: an RDMA Read fetches the peer's bytes into the local segment
// and nowhere else.
func testRead(e *env) {
	c := e.pair()
	srcR := e.register(c.p.pd, 30000, accessAll)
	data := srcR.fill(500, 20000, 4)
	sink := e.register(c.a.pd, 21000, driver.AccessLocalWrite)
	id := c.a.postSend(driver.OpRDMARead, driver.SendSignaled, srcR.remote(500, 20000), sink.sge(50, 20000))
	c.a.scq.awaitOK(id, 20000)
	e.checkBytes("RDMA Read sink", sink.buf[50:20050], data)
	e.checkUntouched("before the Read sink", sink.buf[:50])
	e.checkUntouched("after the Read sink", sink.buf[20050:])
	c.p.scq.none("target of a Read")
	c.p.rcq.none("target of a Read")
}

// testMultiSGE: a Send gathers several SGEs and its receive scatters
// into several; a Write gathers several.
func testMultiSGE(e *env) {
	c := e.pair()
	ns, nr := min(3, c.a.cfg.MaxSendSGE), min(2, c.p.cfg.MaxRecvSGE)
	src := e.register(c.a.pd, 8192, driver.AccessLocalWrite)
	sizes := []int{100, 2000, 37}[:ns]
	var segs []driver.SGE
	var want []byte
	off := 0
	for i, n := range sizes {
		want = append(want, src.fill(off, n, byte(10*i))...)
		segs = append(segs, src.sge(off, n))
		off += n + 500 // gaps the Send must skip
	}
	total := len(want)

	dst := e.register(c.p.pd, 8192, driver.AccessLocalWrite)
	rsegs := []driver.SGE{dst.sge(0, 1000), dst.sge(3000, 4000)}[:nr]
	rid := c.p.postRecv(rsegs...)
	sid := c.a.send(segs...)
	c.a.scq.awaitOK(sid, uint32(total))
	c.p.rcq.awaitOK(rid, uint32(total))
	var got []byte
	rest := total
	for _, s := range rsegs {
		k := min(rest, int(s.Length))
		o := int(s.Addr - dst.mr.Addr())
		got = append(got, dst.buf[o:o+k]...)
		rest -= k
	}
	e.checkBytes("scattered receive", got, want)
	if nr > 1 {
		e.checkUntouched("gap between receive SGEs", dst.buf[1000:3000])
	}

	tgt := e.register(c.p.pd, 8192, accessAll)
	wid := c.a.postSend(driver.OpRDMAWrite, driver.SendSignaled, tgt.remote(10, total), segs...)
	c.a.scq.awaitOK(wid, uint32(total))
	e.notify(c.a, c.p)
	e.checkBytes("gathered Write", tgt.buf[10:10+total], want)
	e.checkUntouched("after the gathered Write", tgt.buf[10+total:])
}

// testManyPosts: a full send queue of Sends, Writes and Reads, and as
// many receives, each complete exactly once (the ledger refuses a second
// completion), and RC delivers the Sends to the receives in order.
func testManyPosts(e *env) {
	c := e.pair()
	n := min(c.a.cfg.MaxSendWR, c.p.cfg.MaxRecvWR)
	const sz = 512
	src := e.register(c.a.pd, n*sz, driver.AccessLocalWrite)
	rbuf := e.register(c.p.pd, n*sz, driver.AccessLocalWrite)
	tgt := e.register(c.p.pd, n*sz, accessAll)
	rsrc := e.register(c.p.pd, n*sz, accessAll)
	sink := e.register(c.a.pd, n*sz, driver.AccessLocalWrite)

	var rids, sids []uint64
	var sendData [][]byte
	reads := map[int][]byte{}
	writes := map[int][]byte{}
	for i := range n {
		d := src.fill(i*sz, sz, byte(i))
		switch i % 3 {
		case 0, 2:
			if i%3 == 0 {
				rids = append(rids, c.p.postRecv(rbuf.sge(len(rids)*sz, sz)))
				sendData = append(sendData, d)
				sids = append(sids, c.a.send(src.sge(i*sz, sz)))
			} else {
				writes[i] = d
				sids = append(sids, c.a.postSend(driver.OpRDMAWrite, driver.SendSignaled, tgt.remote(i*sz, sz), src.sge(i*sz, sz)))
			}
		case 1:
			reads[i] = rsrc.fill(i*sz, sz, byte(i+100))
			sids = append(sids, c.a.postSend(driver.OpRDMARead, driver.SendSignaled, rsrc.remote(i*sz, sz), sink.sge(i*sz, sz)))
		}
	}
	for _, comp := range c.a.scq.await(sids...) {
		// Length is undefined on send-side completions (the contract).
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
	}
	for i, comp := range c.p.rcq.await(rids...) {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
		e.checkBytes(fmt.Sprintf("receive %d (in post order)", i), rbuf.buf[i*sz:(i+1)*sz], sendData[i])
	}
	for i, d := range reads {
		e.checkBytes(fmt.Sprintf("Read %d", i), sink.buf[i*sz:(i+1)*sz], d)
	}
	e.notify(c.a, c.p)
	for i, d := range writes {
		e.checkBytes(fmt.Sprintf("Write %d", i), tgt.buf[i*sz:(i+1)*sz], d)
	}
	c.a.scq.none("after every WR completed")
	c.p.rcq.none("after every WR completed")
}

// testUnsignaled: unsignalled Sends and Writes followed by a signalled
// one: the signalled one completes, the others at most once and only
// successfully, their data arrives, and the send queue is free again
// (the later completion implies theirs), so a full queue can be posted.
func testUnsignaled(e *env) {
	c := e.pair()
	n := c.a.cfg.MaxSendWR
	const sz = 256
	src := e.register(c.a.pd, n*sz, driver.AccessLocalWrite)
	tgt := e.register(c.p.pd, n*sz, accessAll)
	rbuf := e.register(c.p.pd, 8*sz, driver.AccessLocalWrite)
	var rids []uint64
	var sent [][]byte
	var writes [][]byte
	for i := range n - 1 {
		d := src.fill(i*sz, sz, byte(i))
		if i < 4 {
			rids = append(rids, c.p.postRecv(rbuf.sge(i*sz, sz)))
			sent = append(sent, d)
			c.a.postSend(driver.OpSend, 0, driver.RemoteSegment{}, src.sge(i*sz, sz))
		} else {
			writes = append(writes, d)
			c.a.postSend(driver.OpRDMAWrite, 0, tgt.remote(i*sz, sz), src.sge(i*sz, sz))
		}
	}
	rids = append(rids, c.p.postRecv(rbuf.sge(4*sz, sz)))
	sent = append(sent, src.fill((n-1)*sz, sz, 200))
	last := c.a.send(src.sge((n-1)*sz, sz))
	c.a.scq.awaitOK(last, sz)
	for i, comp := range c.p.rcq.await(rids...) {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "%+v", comp)
		e.checkBytes(fmt.Sprintf("receive %d", i), rbuf.buf[i*sz:(i+1)*sz], sent[i])
	}
	for i, d := range writes {
		e.checkBytes(fmt.Sprintf("unsignalled Write %d", i), tgt.buf[(i+4)*sz:(i+5)*sz], d)
	}
	// Unsignalled WRs may complete, successfully and once each.
	e.sleepQuiet()
	for _, comp := range c.a.scq.drain() {
		require.Equal(e.t, driver.StatusSuccess, comp.Status, "unsignalled WR: %+v", comp)
	}
	// Their success is implied: the whole queue is free.
	var ids []uint64
	for i := range n {
		id, err := c.a.postSendErr(driver.OpRDMAWrite, driver.SendSignaled, tgt.remote(i*sz, sz), src.sge(i*sz, sz))
		if errors.Is(err, driver.ErrQueueFull) {
			e.t.Fatalf("PostSend %d of %d after the signalled completion: queue still full: unsignalled WRs hold slots after a later completion", i+1, n)
		}
		require.NoError(e.t, err)
		ids = append(ids, id)
	}
	c.a.scq.await(ids...)
}

// testSharedCQ: QPs of two connections share one CQ on the passive side
// for both queues; every completion carries its own QP's Tag.
func testSharedCQ(e *env) {
	shared := e.newCQ(e.passive, "shared CQ")
	p1 := e.newEndpoint(true, epOpts{scq: shared, rcq: shared})
	p2 := e.newEndpoint(true, epOpts{scq: shared, rcq: shared})
	c1 := e.connect(e.newEndpoint(false, epOpts{}), p1)
	c2 := e.connect(e.newEndpoint(false, epOpts{}), p2)
	e.sendOne(c1.a, p1, 100, 1)
	e.sendOne(c2.a, p2, 100, 2)
	e.sendOne(p1, c1.a, 100, 3)
	e.sendOne(p2, c2.a, 100, 4)
}
