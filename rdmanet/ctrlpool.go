package rdmanet

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat"
)

// Control receives come from one shared receive queue (SRQ) per IA
// instead of each connection's own posted receives, so that an idle
// connection's QP has no receive queue, and receive buffers are made for
// the IA as a whole, a chunk at a time.
//
// The credit scheme (credits.go) is unchanged: each side grants the other
// K control Sends, and returns a credit only after it has posted a receive
// again. What changes is where that receive goes. The pool keeps this
// invariant: every slot it made is posted to its SRQ or held by one
// connection (from the moment the adapter takes it for a message to the
// moment the connection, having applied the message, posts it again), and
// it made at least K+1 slots for every live connection on the SRQ
// (supply).
//
// Why a Send within its credits never finds the SRQ empty (iWARP has no
// receiver-not-ready retry: such a Send would end the connection). Let h
// be the slots a connection holds and u the slots it re-posted but has
// not granted back yet. Its peer may then still send at most K − h − u.
// Every connection holds at most K+1 slots, whatever its peer does: the
// provider refuses a receive to a QP that holds K whose events we have
// not dequeued (dat.ProviderAttr.SRQEPLimit), and a connection applies
// the messages it dequeued one at a time, re-posting each slot before it
// dequeues the next. So what is posted, made − Σh ≥ Σ(K+1−h), covers
// Σ(K−h−u) for the connections whose peers keep to their credits, even
// while others' peers do not: a peer that sends beyond its credits ends
// its own connection, as it would with a receive queue of its own, and
// takes nothing from the others. TestSharedReceivesModel runs this.
//
// A connection that goes away returns what it holds: it frees its EP
// first, so that no more messages arrive for it, then posts back the
// slots of the receive events still queued, and package dat puts back on
// the SRQ any receive its EP took but never reported (see dat.SRQ). Only
// then does its K+1 leave the sum.
//
// Credits cannot deadlock for the reason given in credits.go: each
// connection's credits still count receives kept for it alone.
//
// Without SRQEPLimit (an RDMA adapter takes SRQ receives for any QP with
// no such bound, so one peer that ignores its credits could empty the
// SRQ that every other connection depends on), connections keep their
// own receive queues: the verbs provider does.
//
// The SRQ's low-watermark event is not used: each receive is posted again
// as soon as its message is applied, never in batches, and the
// reservation above is what guarantees the supply. Slots are made in
// chunks of ctrlChunk; an SRQ holds ctrlArenaSlots at most, and the pool
// opens another SRQ when all of one's are reserved. An SRQ with no
// connection left is freed, except the last, which stays for the next
// connections.
const (
	ctrlChunk      = 64   // slots registered together: 16 KiB
	ctrlArenaSlots = 4096 // slots (and receives) per SRQ
)

// ctrlPool is an IA's shared control receives.
type ctrlPool struct {
	s  *sharedIA
	mu sync.Mutex
	// off: the provider has no SRQ, or does not bound an EP's share of
	// one; connections post their own receives. Set by the first
	// reserve (probed).
	off, probed bool
	limit       int // slots per SRQ
	arenas      []*ctrlArena
}

// supply is the accounting of an SRQ's slots, kept apart from memory
// and queues so that the model test can run it (TestSharedReceivesModel).
type supply struct {
	made     int // slots made: each is posted, or held by a connection
	reserved int // Σ(K+1) of the connections on the SRQ
}

// toMake reports how many slots (whole chunks) must be made before n
// more can be reserved.
func (s *supply) toMake(n int) int {
	short := s.reserved + n - s.made
	if short <= 0 {
		return 0
	}
	return (short + ctrlChunk - 1) / ctrlChunk * ctrlChunk
}

// reserve counts a connection's K+1 (n); callers made what toMake said
// first.
func (s *supply) reserve(n int) { s.reserved += n }

// release drops a connection's K+1 (n), once it gave back the slots it
// held.
func (s *supply) release(n int) { s.reserved -= n }

// slotsFor is what a connection with K control receives reserves: one
// more than K, for the message it is applying (see above).
func slotsFor(k int) int { return k + 1 }

// ctrlArena is one SRQ and the slots it was given.
type ctrlArena struct {
	pool *ctrlPool
	srq  *dat.SRQ
	// chunks has room for every chunk the SRQ can take, so that slot and
	// post read it without the pool's lock while reserve adds chunks;
	// made is sup.made, for valid, which does not take the lock either.
	chunks []*region
	made   atomic.Int32
	// Guarded by pool.mu.
	sup    supply
	conns  int  // connections on it
	broken bool // a post failed: it takes no more connections
	// postMu serialises posts, which use iov.
	postMu sync.Mutex
	iov    [1]dat.LMRTriplet
}

// reserve finds room on an SRQ for a connection with k control receives
// and returns it, or nil when connections on this IA post their own
// receives.
func (p *ctrlPool) reserve(k int) (*ctrlArena, error) {
	n := slotsFor(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.probed {
		p.probed = true
		attr, pa, err := p.s.ia.Query()
		p.limit = min(ctrlArenaSlots, attr.MaxSRQDTOs) / ctrlChunk * ctrlChunk
		p.off = err != nil || !pa.SRQSupported || !pa.SRQEPLimit || p.limit < ctrlChunk
	}
	if p.off || testOwnReceives || n > p.limit {
		return nil, nil
	}
	var a *ctrlArena
	for _, x := range p.arenas {
		if !x.broken && p.limit-x.sup.reserved >= n {
			a = x
			break
		}
	}
	if a == nil {
		srq, err := p.s.ia.CreateSRQ(p.s.pz, dat.SRQAttr{MaxRecvDTOs: p.limit, MaxRecvIOV: 1})
		if err != nil {
			return nil, err
		}
		a = &ctrlArena{pool: p, srq: srq, chunks: make([]*region, p.limit/ctrlChunk)}
		p.arenas = append(p.arenas, a)
	}
	for range a.sup.toMake(n) / ctrlChunk {
		if err := a.grow(); err != nil {
			p.dropIfUnusedLocked(a)
			return nil, err
		}
	}
	a.sup.reserve(n)
	a.conns++
	return a, nil
}

// grow registers ctrlChunk more slots and posts them. Callers hold
// pool.mu.
func (a *ctrlArena) grow() error {
	r, err := newRegion(a.pool.s, ctrlChunk*ctrlSlot, ctrlPriv)
	if err != nil {
		return err
	}
	first := a.sup.made
	a.chunks[first/ctrlChunk] = r
	// Counted before they are posted: a message may land in one at once.
	a.sup.made += ctrlChunk
	a.made.Store(int32(a.sup.made))
	for i := range ctrlChunk {
		if err := a.post(first + i); err != nil {
			// Some of the chunk may be posted: it stays until the SRQ
			// goes, and the SRQ takes no more connections.
			a.broken = true
			return err
		}
	}
	return nil
}

// release gives back the reservation of a connection with k control
// receives. Its EP is freed, and the slots it held are posted again.
func (a *ctrlArena) release(k int) {
	p := a.pool
	p.mu.Lock()
	a.sup.release(slotsFor(k))
	a.conns--
	p.dropIfUnusedLocked(a)
	p.mu.Unlock()
}

// dropIfUnusedLocked frees a if no connection uses it, unless it is the
// only SRQ and sound: that one stays for the next connections. Callers
// hold pool.mu.
func (p *ctrlPool) dropIfUnusedLocked(a *ctrlArena) {
	if a.conns > 0 || !a.broken && len(p.arenas) == 1 {
		return
	}
	p.arenas = slices.DeleteFunc(p.arenas, func(x *ctrlArena) bool { return x == a })
	a.free()
}

// free destroys the SRQ, then the slots that were posted to it.
func (a *ctrlArena) free() {
	a.srq.Free()
	for _, r := range a.chunks {
		r.free()
	}
	clear(a.chunks)
}

// close frees every SRQ before the IA closes; no connection is left.
func (p *ctrlPool) close() {
	p.mu.Lock()
	arenas := p.arenas
	p.arenas = nil
	p.mu.Unlock()
	for _, a := range arenas {
		a.free()
	}
}

// slot returns the bytes of slot i.
func (a *ctrlArena) slot(i int) []byte {
	off := (i % ctrlChunk) * ctrlSlot
	return a.chunks[i/ctrlChunk].buf[off : off+ctrlSlot]
}

// valid reports whether i names a slot of a. A completion's cookie is
// ours, but it is checked like everything else a completion carries.
func (a *ctrlArena) valid(i int) bool { return i >= 0 && i < int(a.made.Load()) }

// post (re-)posts slot i to the SRQ.
func (a *ctrlArena) post(i int) error {
	r := a.chunks[i/ctrlChunk]
	a.postMu.Lock()
	defer a.postMu.Unlock()
	a.iov[0] = r.triplet(uint64((i%ctrlChunk)*ctrlSlot), ctrlSlot)
	return a.srq.PostRecv(a.iov[:], uint64(i))
}

// testOwnReceives makes new connections post their own receives, as on a
// provider without SRQEPLimit, so that tests run both schemes on iwarp.
var testOwnReceives bool
