package rdmanet

import (
	"errors"
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
	// own makes new connections post their own receives, as on a
	// provider without SRQEPLimit, so that tests run both schemes on
	// iwarp. It is the pool's, and guarded by mu, so that a test sets it
	// on the IAs it holds while other tests' connections still come and
	// go.
	own bool
	// newChunk makes the memory of one chunk; nil is newRegion. Tests
	// replace it on a pool of their own to stop or fail a registration.
	newChunk func() (*region, error)
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

// reserve counts a connection's K+1 (n); the connection may use the SRQ
// once toMake(0) is zero.
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
	// post read it without the pool's lock while grow adds chunks. made
	// counts the slots whose memory exists, for valid, which does not
	// take the lock either: a chunk is counted there before its slots
	// are posted (a message may land in one at once), and in sup.made
	// once they all are.
	chunks []*region
	made   atomic.Int32
	// growMu is held by the one reserver that makes chunks for the SRQ;
	// the others that lack slots wait on it. first, in grow, is read
	// from sup.made under it, which only its holder adds to.
	growMu sync.Mutex
	// Guarded by pool.mu.
	sup    supply
	conns  int  // connections on it, and reservers making slots for it
	broken bool // a post failed: it takes no more connections
	// postMu serialises posts, which use iov.
	postMu sync.Mutex
	iov    [1]dat.LMRTriplet
}

// errArenaBroken tells a reserver that another's post broke the SRQ it
// was waiting on; it reserves again, elsewhere.
var errArenaBroken = errors.New("rdmanet: shared receive queue broken")

// reserve finds room on an SRQ for a connection with k control receives
// and returns it, or nil when connections on this IA post their own
// receives.
//
// Registering a chunk is a system call, and the adapter's work on a
// real one, so it is not done under pool.mu, which every dial, accept
// and close takes. A reserver counts its K+1 at once, under pool.mu
// (that also keeps the SRQ from being freed under it); if the SRQ's
// slots do not cover every reservation, it takes the SRQ's growMu and
// makes chunks until they do, for itself and for whoever reserved
// meanwhile. Reservers that race thus wait for one another's chunks
// rather than each make their own, and none returns, to create its EP,
// before slots are posted for it.
func (p *ctrlPool) reserve(k int) (*ctrlArena, error) {
	n := slotsFor(k)
	for {
		p.mu.Lock()
		a, covered, err := p.pickLocked(n)
		p.mu.Unlock()
		if a == nil || covered || err != nil {
			return a, err
		}
		if err = a.fill(); err == nil {
			return a, nil
		}
		a.release(k)
		if err != errArenaBroken {
			return nil, err
		}
	}
}

// pickLocked counts n slots on an SRQ with room for them, creating one
// if none has, and reports whether its slots already cover them. It
// returns nil when connections post their own receives. Callers hold
// pool.mu.
func (p *ctrlPool) pickLocked(n int) (a *ctrlArena, covered bool, err error) {
	if !p.probed {
		p.probed = true
		attr, pa, err := p.s.ia.Query()
		p.limit = min(ctrlArenaSlots, attr.MaxSRQDTOs) / ctrlChunk * ctrlChunk
		p.off = err != nil || !pa.SRQSupported || !pa.SRQEPLimit || p.limit < ctrlChunk
	}
	if p.off || p.own || n > p.limit {
		return nil, false, nil
	}
	for _, x := range p.arenas {
		if !x.broken && p.limit-x.sup.reserved >= n {
			a = x
			break
		}
	}
	if a == nil {
		// Creating the SRQ stays under the lock: it registers no memory,
		// and happens once per ctrlArenaSlots slots.
		srq, err := p.s.ia.CreateSRQ(p.s.pz, dat.SRQAttr{MaxRecvDTOs: p.limit, MaxRecvIOV: 1})
		if err != nil {
			return nil, false, err
		}
		a = &ctrlArena{pool: p, srq: srq, chunks: make([]*region, p.limit/ctrlChunk)}
		p.arenas = append(p.arenas, a)
	}
	a.sup.reserve(n)
	a.conns++
	return a, a.sup.toMake(0) == 0, nil
}

// fill makes chunks until a's slots cover every reservation on it,
// including the caller's, or fails.
func (a *ctrlArena) fill() error {
	a.growMu.Lock()
	defer a.growMu.Unlock()
	p := a.pool
	for {
		p.mu.Lock()
		broken, covered, first := a.broken, a.sup.toMake(0) == 0, a.sup.made
		p.mu.Unlock()
		switch {
		case broken:
			return errArenaBroken
		case covered:
			return nil
		}
		if err := a.grow(first); err != nil {
			return err
		}
	}
}

// grow registers ctrlChunk more slots, from slot first, and posts them.
// Callers hold growMu and not pool.mu.
func (a *ctrlArena) grow(first int) error {
	p := a.pool
	newChunk := p.newChunk
	if newChunk == nil {
		newChunk = func() (*region, error) { return newRegion(p.s, ctrlChunk*ctrlSlot, ctrlPriv) }
	}
	r, err := newChunk()
	if err != nil {
		return err
	}
	a.chunks[first/ctrlChunk] = r
	a.made.Store(int32(first + ctrlChunk))
	var perr error
	for i := range ctrlChunk {
		if perr = a.post(first + i); perr != nil {
			break
		}
	}
	p.mu.Lock()
	// A chunk that failed to post is counted too: some of it may be
	// posted, and it stays until the SRQ goes, which takes no more
	// connections.
	a.sup.made += ctrlChunk
	a.broken = a.broken || perr != nil
	p.mu.Unlock()
	return perr
}

// release gives back the reservation of a connection with k control
// receives. Its EP is freed, and the slots it held are posted again; or
// it never had one: its reserve failed.
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
