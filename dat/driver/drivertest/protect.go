package drivertest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// badKind is how a segment is made invalid.
type badKind int

const (
	badLKey     badKind = iota // the local key of no region
	outOfRegion                // a segment reaching past its region's end
	badRKey                    // the remote key of no region
	noAccess                   // a region that does not grant the access
	outOfBounds                // a remote segment reaching past the region
)

// flipKey returns a key that differs from k in bits every provider uses
// (the low byte is the key part of an iWARP STag and of a verbs key).
func flipKey(k uint32) uint32 { return k ^ 0x5a }

// testBadLocal: a Send whose local segment the QP may not read is either
// refused by PostSend (an error, and no completion ever) or completes
// with an error status; either way the peer receives nothing.
func testBadLocal(e *env, k badKind) {
	c := e.pair()
	dst := e.register(c.p.pd, 4096, driver.AccessLocalWrite)
	rid := c.p.postRecv(dst.sge(0, 4096))
	src := e.register(c.a.pd, 4096, driver.AccessLocalWrite)
	src.fill(0, 4096, 1)
	seg := src.sge(0, 64)
	switch k {
	case badLKey:
		seg.LKey = flipKey(seg.LKey)
	case outOfRegion:
		seg = src.sge(4096-16, 64)
	}
	id, err := c.a.postSendErr(driver.OpSend, driver.SendSignaled, driver.RemoteSegment{}, seg)
	if err != nil {
		e.t.Logf("refused at post: %v", err)
		c.a.scq.none("a refused PostSend")
	} else {
		comp, ok := c.a.waitCompletionOrEnd(id)
		require.True(e.t, ok, "a failed Send must complete (with an error status), not vanish with the connection")
		require.NotEqual(e.t, driver.StatusSuccess, comp.Status, "Send of an invalid local segment: %+v", comp)
		e.t.Logf("completed with status %d", comp.Status)
	}
	c.p.rcq.waitMore(time.Now().Add(e.quiet))
	if comp, ok := c.p.rcq.take(rid); ok {
		require.NotEqual(e.t, driver.StatusSuccess, comp.Status, "the peer received a Send of an invalid segment: %+v", comp)
	}
	e.checkUntouched("peer's receive buffer", dst.buf)
}

// testBadRecvSGE: a receive naming a key of no region, or reaching past
// its region, is refused by PostRecv or never completes successfully, and
// nothing outside the region is written.
func testBadRecvSGE(e *env) {
	for _, k := range []badKind{badLKey, outOfRegion} {
		c := e.pair()
		dst := e.register(c.p.pd, 4096, driver.AccessLocalWrite)
		seg := dst.sge(0, 64)
		if k == badLKey {
			seg.LKey = flipKey(seg.LKey)
		} else {
			seg = dst.sge(4096-16, 64)
		}
		rid, err := c.p.postRecvErr(seg)
		if err != nil {
			e.t.Logf("refused at post: %v", err)
			c.p.rcq.none("a refused PostRecv")
			continue
		}
		src := e.register(c.a.pd, 64, driver.AccessLocalWrite)
		src.fill(0, 64, 2)
		c.a.send(src.sge(0, 64))
		if comp, ok := c.p.waitCompletionOrEnd(rid); ok {
			require.NotEqual(e.t, driver.StatusSuccess, comp.Status, "receive into an invalid segment: %+v", comp)
			e.t.Logf("completed with status %d", comp.Status)
		}
		dst.checkGuards()
		if k == badLKey {
			e.checkUntouched("region whose key was altered", dst.buf)
		} else {
			e.checkUntouched("region below the segment", dst.buf[:4096-16])
		}
	}
}

// testBadRemote: an RDMA Write or Read naming remote memory the QP may
// not access ends the connection: the originator gets an error
// completion or OnDisconnect (a Write may have completed successfully
// before the peer refused it), never a successful Read; the peer's
// connection ends; no memory changes on either side.
func testBadRemote(e *env, op driver.Opcode, k badKind) {
	c := e.pair()
	access := accessAll
	if k == noAccess {
		access = driver.AccessLocalWrite | driver.AccessRemoteRead
	}
	tgt := e.register(c.p.pd, 4096, access)
	rseg := tgt.remote(0, 64)
	switch k {
	case badRKey:
		rseg.RKey = flipKey(rseg.RKey)
	case outOfBounds:
		rseg = tgt.remote(4096-16, 64)
	}
	loc := e.register(c.a.pd, 64, driver.AccessLocalWrite)
	if op == driver.OpRDMAWrite {
		loc.fill(0, 64, 3)
	}
	before := loc.snapshot()
	id := c.a.postSend(op, driver.SendSignaled, rseg, loc.sge(0, 64))

	e.expectRefused(c, id, op, tgt)
	e.checkUntouched("target memory of the refused operation", tgt.buf)
	e.checkBytes("originator's local segment", loc.buf, before)
	c.a.checkQuiescent(loc)
}

// expectRefused waits for the outcome of an RDMA operation id of the
// active side that the passive side must refuse: the originator gets an
// error completion or OnDisconnect (a Write may have completed
// successfully before the peer refused it), never a successful Read; the
// peer's connection ends. Both sides are then disconnected and the
// passive one is checked quiescent over regions.
func (e *env) expectRefused(c *conn, id uint64, op driver.Opcode, regions ...*region) {
	e.t.Helper()
	comp, ok := c.a.waitCompletionOrEnd(id)
	if ok {
		e.t.Logf("originator: completion with status %d", comp.Status)
		if op == driver.OpRDMARead {
			require.NotEqual(e.t, driver.StatusSuccess, comp.Status, "Read of memory the peer does not expose succeeded")
		}
	}
	if !ok || comp.Status == driver.StatusSuccess {
		c.a.awaitDisconnect()
	}
	perr := c.p.awaitDisconnect()
	e.t.Logf("peer: OnDisconnect(%v)", perr)
	c.p.checkQuiescent(regions...)
	c.a.disconnect(false)
}
