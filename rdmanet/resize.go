package rdmanet

import (
	"log/slog"

	"github.com/rdmanet/rdmanet/dat"

	"github.com/rdmanet/rdmanet/internal/ring"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// Resizing: the window follows the bandwidth-delay product.
//
// A writer can have at most one receive ring of data outstanding: it
// writes, then waits for the reader's consumer position to come back. So
// a ring smaller than what the link moves in one round trip (reader wakes,
// copies, reports; report travels; writer wakes) idles the link, and one
// much larger only costs memory. Between two processes on one host that
// product is far larger than inside one process, where a wake-up is cheap:
// measured on loopback (2 cores, two processes), 1 MiB writes ran at
// 1.4 GB/s with a 256 KiB ring and 2.6 GB/s with 1 MiB; 4 MiB gained
// nothing more there and cost a third inside one process, where ring and
// staging then no longer stay in cache. So MaxBufferSize is 1 MiB.
// Re-measured between processes once Writes of 256 KiB and more went
// zero-copy (rdmaperf, interleaved runs of 10): a 4 MiB cap with
// 512 KiB reservations ran 1 MiB writes 4.8% faster in one run
// (p=0.005) and 1.9% in the next (p=0.91, with 19% more CPU per byte,
// p=0.014), and 64 KiB writes no faster: the window is not what bounds a
// stream there (see the package doc, Two processes). An idle connection,
// on the other hand, should cost little: 16 KiB rings keep an idle end at
// 56 KiB of registered memory (BenchmarkConnMemory). So an adaptive
// connection (BufferSize 0) starts small and lets the measured need drive
// the size:
//
//   - Grow. The reader sees the round trip is the bottleneck when a Read
//     drains its ring while the writer, as far as the reader's last report
//     goes, had the whole ring in flight: the writer was blocked on
//     credit, not the reader on the application. It then offers a ring
//     growFactor times larger, up to MaxBufferSize. Each step doubles the
//     window twice, so a bulk stream reaches the cap within a few round
//     trips. The staging buffer grows the same way, by the writer alone,
//     when a Write waits for staging space rather than ring space (on
//     verbs, where a send completes only once the peer acknowledged it,
//     staging covers the round trip too); it never exceeds the peer's
//     ring.
//   - Shrink. A connection with nothing moving for idleShrinkAfter goes
//     back to DefaultBufferSize (see janitor.go).
//
// Protocol. Rings are replaced, never resized in place (registered memory
// cannot grow). The reader registers the new ring and offers it in a
// control message (wire.FlagOffer: address, key, size); at most one offer
// is outstanding, and only while no older ring is still draining. The
// writer adopts it at its current producer position P, the next time no
// Write is in progress (it holds writeMu): bytes before P went to the old
// ring, bytes from P on go to the new one, at offset pos mod size. Its
// next control message carries wire.FlagSwitch with P. The reader reads
// the old ring up to P, then the new one, and frees the old ring once it
// has consumed P. Positions stay cumulative across the switch, so the
// rest of the protocol (consumer reports, credit) does not change. Both
// sides announce they understand offers in their Hello
// (handshake.FlagRingResize); a reader offers only to a writer that does,
// so peers of the previous revision keep fixed rings in either direction.
//
// The reader checks what the writer claims: a switch without an offer,
// or at a position the old ring cannot hold, or that moves backwards, is
// a protocol violation, as is an offer while one is pending or of a size
// outside the handshake's bounds.
const growFactor = 4

// canOfferLocked reports whether we may offer the peer a new ring now.
// Callers hold c.mu.
func (c *Conn) canOfferLocked() bool {
	return c.cfg.adaptive && c.peer.Flags&handshake.FlagRingResize != 0 &&
		!c.offering && c.offer == nil && c.recv.prev == nil &&
		c.lc == lcOpen && c.err == nil && !c.readShut && !c.rFIN
}

// maybeGrowLocked is the grow rule, applied when a Read is about to wait
// on an empty ring: if the writer's latest message used up the whole
// window we had given it, the writer is waiting for our report as we wait
// for its data, and the round trip is what limits the stream. It reports
// the size to offer, 0 for none. Callers hold c.mu.
func (c *Conn) maybeGrowLocked() uint64 {
	full := c.windowFull
	c.windowFull = false
	size := c.recv.size()
	if !full || size >= uint64(c.cfg.maxBuf) || !c.canOfferLocked() {
		return 0
	}
	c.offering = true
	return min(size*growFactor, uint64(c.cfg.maxBuf))
}

// noteWindowLocked records, after a message from the writer was applied,
// whether it filled the window: all of the current ring written beyond
// the consumer position we last reported. Callers hold c.mu.
func (c *Conn) noteWindowLocked() {
	c.windowFull = c.rProd-max(c.rReported, c.recv.cur.start) >= c.recv.size()
}

// offerRing registers a receive ring of size bytes and offers it to the
// writer. Callers reserved the offer (c.offering) under c.mu. Failing to
// get the memory is not fatal: the connection goes on with its ring.
func (c *Conn) offerRing(size uint64) {
	reg, err := regionFrom(c.ia, &c.mem.ringHome, int(size), recvPriv)
	c.mu.Lock()
	c.offering = false
	if err != nil || !(c.lc == lcOpen && c.err == nil) {
		c.mu.Unlock()
		if err != nil {
			c.logDebug("rdmanet: cannot resize the receive ring", slog.Int("size", int(size)), slog.String("error", err.Error()))
		}
		reg.free()
		return
	}
	c.offer, c.offerUnsent = reg, true
	c.st.resizes++
	c.mu.Unlock()
	if size > uint64(c.cfg.bufSize) {
		noteGrown()
	}
	c.flushControl()
}

// applyOfferLocked records the peer's offer of a new ring for us to
// write into; the writer adopts it (adoptOfferLocked). Callers hold c.mu.
func (c *Conn) applyOfferLocked(o wire.Offer) error {
	switch {
	case c.hasOffer:
		return errProtocol("ring offer while the previous one is not adopted")
	case o.Size < handshake.MinRingSize || o.Size > handshake.MaxRingSize:
		return errProtocol("ring offer of %d bytes", o.Size)
	case o.Addr+uint64(o.Size) < o.Addr:
		return errProtocol("ring offer wraps the address space")
	}
	c.peerOffer, c.hasOffer = o, true
	return nil
}

// adoptOfferLocked switches our writes to the peer's offered ring from
// our current producer position on, and queues the switch notice.
// Callers hold writeMu (no Write is between reserving and posting) and
// c.mu.
func (c *Conn) adoptOfferLocked() {
	if !c.hasOffer {
		return
	}
	o := c.peerOffer
	c.dst = peerRing{r: ring.Ring{Size: uint64(o.Size)}, start: c.sProd, addr: o.Addr, key: o.Key}
	c.hasOffer = false
	c.switchUnsent, c.switchPos = true, c.sProd
}

// afterEvents does what a batch of events left for outside c.mu, under
// one acquisition of it: it frees the regions they retired, and adopts
// an offered ring (adoptOffer).
func (c *Conn) afterEvents() {
	c.mu.Lock()
	rs, pending := c.retired, c.hasOffer
	c.retired = nil
	c.mu.Unlock()
	for _, r := range rs {
		r.free()
	}
	if pending {
		c.adoptOffer()
	}
}

// adoptOffer adopts a pending offer unless writeMu is held: a Write in
// progress then adopts it when it next reserves room, and the janitor
// does if none does (a Write about to return, or the janitor's own
// shrinkStage, may hold writeMu and leave an idle writer with the offer).
func (c *Conn) adoptOffer() {
	if !c.writeMu.TryLock() {
		wake(c.wwake)
		noteGrown()
		return
	}
	c.mu.Lock()
	c.adoptOfferLocked()
	c.mu.Unlock()
	c.writeMu.Unlock()
	c.flushControl()
}

// applySwitchLocked moves our receive ring to the one we offered, from
// the writer's position p on. prod is the highest position the message
// covers that precedes its inline data. Callers hold c.mu; the old ring,
// if already drained, is left in c.retired for the caller to free.
func (c *Conn) applySwitchLocked(p, prod uint64) error {
	switch {
	case c.offer == nil || c.offerUnsent:
		return errProtocol("ring switch without an offer")
	case c.recv.prev != nil:
		return errProtocol("ring switch while the previous one drains")
	case p < c.rProd || p > prod || !c.recv.cur.r.Valid(p, max(c.rCons, c.recv.cur.start)):
		return errProtocol("ring switch at position %d (ours: %d written, %d consumed, %d-byte ring)", p, c.rProd, c.rCons, c.recv.size())
	}
	c.recv.switchTo(c.offer, p)
	c.offer = nil
	if old := c.recv.retire(c.rCons); old != nil {
		c.retired = append(c.retired, old)
	}
	return nil
}

// freeRetired frees regions retired while c.mu was held.
func (c *Conn) freeRetired() {
	c.mu.Lock()
	rs := c.retired
	c.retired = nil
	c.mu.Unlock()
	for _, r := range rs {
		r.free()
	}
}

// growStage replaces a full staging buffer with one growFactor times
// larger, when the writer waits for staging space and not for the peer's
// ring. Callers hold writeMu and found no room.
func (c *Conn) growStage() {
	c.mu.Lock()
	size := c.stage.size()
	limit := min(uint64(c.cfg.maxBuf), c.dst.r.Size)
	grow := c.cfg.adaptive && c.stage.prev == nil && size < limit &&
		c.stage.free(c.stProd, c.stCons) == 0 && c.dst.free(c.sProd, c.sPeerCons) > 0
	c.mu.Unlock()
	if !grow {
		return
	}
	reg, err := regionFrom(c.ia, &c.mem.stgHome, int(min(size*growFactor, limit)), stagePriv)
	if err != nil {
		c.logDebug("rdmanet: cannot grow the staging buffer", slog.String("error", err.Error()))
		return
	}
	c.mu.Lock()
	c.stage.switchTo(reg, c.stProd)
	c.mu.Unlock()
	noteGrown()
}

// retireStageLocked drops the old staging region once every request
// that read it has completed. Callers hold c.mu.
func (c *Conn) retireStageLocked() {
	if old := c.stage.retire(c.stCons); old != nil {
		c.retired = append(c.retired, old)
	}
}

// Memory privileges of the connection's regions: the peer writes our
// receive ring; only our adapter reads the staging buffer.
const (
	recvPriv  = dat.MemPrivLocalWrite | dat.MemPrivRemoteWrite
	stagePriv = dat.MemPrivLocalRead
)
