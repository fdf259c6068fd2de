package drivertest

import (
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// windowsOf returns ep's window capabilities, or skips the subtest when
// the provider has none (fails if Config.RequireWindows).
func (e *env) windowsOf(ep *endpoint) (driver.WindowAllocator, driver.WindowBinder) {
	e.t.Helper()
	wa, ok1 := ep.pd.(driver.WindowAllocator)
	wb, ok2 := ep.qp.(driver.WindowBinder)
	if !ok1 || !ok2 {
		if e.cfg.RequireWindows {
			e.t.Fatalf("PD %T / QP %T do not implement driver.WindowAllocator / driver.WindowBinder, and Config.RequireWindows is set", ep.pd, ep.qp)
		}
		e.t.Skipf("no memory windows (PD %T, QP %T)", ep.pd, ep.qp)
	}
	return wa, wb
}

// window allocates a window, closed at cleanup.
type window struct {
	driver.Window
	closeNow func() error
}

func (e *env) allocWindow(wa driver.WindowAllocator) window {
	e.t.Helper()
	w, err := wa.AllocWindow()
	require.NoError(e.t, err, "AllocWindow")
	_, bound := w.Binding()
	require.False(e.t, bound, "a new window is bound")
	return window{w, e.onClose(lvlWindow, "Window Close", w.Close)}
}

// testWindowUnconnected: binding through a QP that is not connected fails
// with ErrNotConnected and leaves the window unbound.
func testWindowUnconnected(e *env) {
	p := e.newEndpoint(true, epOpts{})
	wa, wb := e.windowsOf(p)
	w := e.allocWindow(wa)
	r := e.register(p.pd, 4096, accessAll)
	_, err := wb.BindWindow(w.Window, r.mr, r.mr.Addr(), 64, driver.AccessRemoteWrite)
	require.ErrorIs(e.t, err, driver.ErrNotConnected, "BindWindow through an unconnected QP")
	_, bound := w.Binding()
	require.False(e.t, bound, "window bound by a failed BindWindow")
}

// bindWindowed connects a pair, and binds a window of the passive side
// over [1024, 3072) of an 8 KiB region with the given rights.
func (e *env) bindWindowed(access driver.Access) (*conn, window, *region, uint32) {
	e.t.Helper()
	c := e.pair()
	wa, wb := e.windowsOf(c.p)
	w := e.allocWindow(wa)
	r := e.register(c.p.pd, 8192, accessAll)
	rkey, err := wb.BindWindow(w.Window, r.mr, r.mr.Addr()+1024, 2048, access)
	require.NoError(e.t, err, "BindWindow")
	k, bound := w.Binding()
	require.True(e.t, bound, "Binding after BindWindow")
	require.Equal(e.t, rkey, k, "Binding's key vs BindWindow's")
	return c, w, r, rkey
}

// writeVia posts a signalled 64-byte Write from the active side to
// [addr, addr+64) under rkey and returns its ID.
func (e *env) writeVia(c *conn, addr uint64, rkey uint32) uint64 {
	e.t.Helper()
	src := e.register(c.a.pd, 64, driver.AccessLocalWrite)
	src.fill(0, 64, 31)
	return c.a.postSend(driver.OpRDMAWrite, driver.SendSignaled, driver.RemoteSegment{Addr: addr, Length: 64, RKey: rkey}, src.sge(0, 64))
}

// testWindowBindWrite: a Write through a bound window lands in the
// window; after an unbind, the old key is refused without touching
// memory.
func testWindowBindWrite(e *env) {
	c, w, r, rkey := e.bindWindowed(driver.AccessRemoteWrite)
	base := r.mr.Addr() + 1024
	id := e.writeVia(c, base+10, rkey)
	c.a.scq.awaitOK(id, 64)
	e.notify(c.a, c.p)
	e.checkBytes("Write through a window", r.buf[1034:1098], pattern(64, 31))
	e.checkUntouched("region before the Write", r.buf[:1034])
	e.checkUntouched("region after the Write", r.buf[1098:])

	_, wb := e.windowsOf(c.p)
	k, err := wb.BindWindow(w.Window, nil, 0, 0, 0)
	require.NoError(e.t, err, "unbind")
	require.Zero(e.t, k, "unbind's key")
	_, bound := w.Binding()
	require.False(e.t, bound, "Binding after an unbind")
	snap := r.snapshot()
	id = e.writeVia(c, base+200, rkey)
	e.expectRefused(c, id, driver.OpRDMAWrite, r)
	e.checkBytes("region after a Write through an unbound key", r.buf, snap)
}

// testWindowRange: a window exposes only its range and its rights: a
// Write crossing its end, or into a window granting only remote read, is
// refused without touching memory.
func testWindowRange(e *env) {
	for _, access := range []driver.Access{driver.AccessRemoteWrite, driver.AccessRemoteRead} {
		c, _, r, rkey := e.bindWindowed(access)
		addr := r.mr.Addr() + 1024
		if access == driver.AccessRemoteWrite {
			addr += 2048 - 16 // crosses the window's end, inside the region
		}
		id := e.writeVia(c, addr, rkey)
		e.expectRefused(c, id, driver.OpRDMAWrite, r)
		e.checkUntouched("region behind a window", r.buf)
	}
}

// testWindowClose: Close ends a binding (its key stops working) and is
// idempotent.
func testWindowClose(e *env) {
	c, w, r, rkey := e.bindWindowed(driver.AccessRemoteWrite)
	require.NoError(e.t, w.closeNow())
	require.NoError(e.t, w.Close(), "second Window Close")
	id := e.writeVia(c, r.mr.Addr()+1024, rkey)
	e.expectRefused(c, id, driver.OpRDMAWrite, r)
	e.checkUntouched("region behind a closed window", r.buf)
}
