//go:build verbs && linux && cgo

package verbs

import "github.com/rdmanet/rdmanet/dat/driver"

// wr_id layout: the top byte says which queue a completion belongs to
// (needed because an errored work completion's opcode is undefined), the
// rest is the entry's sequence number (send and receive queues) or the
// SRQ's receive id.
const (
	wrKindShift = 56
	wrSeqMask   = 1<<wrKindShift - 1
	wrKindSend  = 1
	wrKindRecv  = 2
	wrKindSRQ   = 3
)

func wrID(kind, seq uint64) uint64 { return kind<<wrKindShift | seq&wrSeqMask }

// wrState is where a queued work request is.
type wrState uint8

const (
	wrPending wrState = iota // a receive posted before the verbs QP exists
	wrPosted                 // handed to the device; its completion will come
	wrFlush                  // posted on a dead connection: completes flushed once every earlier entry has
)

// wrEntry remembers one posted work request until its completion, so the
// completion can carry the DAT cookie and opcode (the device only returns
// wr_id, and no opcode on errors) and the Signaled flag the poster asked
// for.
type wrEntry struct {
	seq      uint64
	cookie   uint64
	op       driver.Opcode
	signaled bool
	length   uint32 // bytes the request moves (send side)
	state    wrState
	sges     []driver.SGE // pending receives only; reused across entries
	// bind is set for a window bind (bind.go): the provider's own
	// request, whose completion goes to the waiting BindWindow instead of
	// the handler.
	bind *bindWait
}

// wrQueue is a FIFO of work requests in post order: a reliable-connected
// queue completes in that order (flushes included; siw's early Send and
// Write completions are held until it is their turn, reorder.go), which is
// exactly the pairing package dat relies on. It is a growable ring so that
// entries, and their SGE slices, are reused without allocation.
type wrQueue struct {
	buf    []wrEntry
	head   int
	n      int
	posted int // entries in state wrPosted
}

func (w *wrQueue) len() int { return w.n }

// push appends a copy of e (its sges copied into the reused slot) and
// returns the stored entry.
func (w *wrQueue) push(e wrEntry) *wrEntry {
	if w.n == len(w.buf) {
		nb := make([]wrEntry, max(2*len(w.buf), 16))
		for i := 0; i < w.n; i++ {
			nb[i] = w.buf[(w.head+i)%len(w.buf)]
		}
		w.buf, w.head = nb, 0
	}
	slot := &w.buf[(w.head+w.n)%len(w.buf)]
	sges := append(slot.sges[:0], e.sges...)
	*slot = e
	slot.sges = sges
	w.n++
	if e.state == wrPosted {
		w.posted++
	}
	return slot
}

// front is the oldest entry, or nil.
func (w *wrQueue) front() *wrEntry {
	if w.n == 0 {
		return nil
	}
	return &w.buf[w.head]
}

// pop removes the oldest entry (its slot keeps the sges capacity).
func (w *wrQueue) pop() wrEntry {
	e := w.buf[w.head]
	w.buf[w.head].sges = e.sges[:0]
	w.buf[w.head].bind = nil
	w.head = (w.head + 1) % len(w.buf)
	w.n--
	if e.state == wrPosted {
		w.posted--
	}
	return e
}

// dropNewest removes the newest entry, for a post the device refused.
func (w *wrQueue) dropNewest() {
	i := (w.head + w.n - 1) % len(w.buf)
	if w.buf[i].state == wrPosted {
		w.posted--
	}
	w.buf[i].sges = w.buf[i].sges[:0]
	w.buf[i].bind = nil
	w.n--
}

// each calls fn for every entry, oldest first.
func (w *wrQueue) each(fn func(e *wrEntry)) {
	for i := 0; i < w.n; i++ {
		fn(&w.buf[(w.head+i)%len(w.buf)])
	}
}
