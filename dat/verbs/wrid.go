//go:build verbs && linux && cgo

package verbs

import "sync"

// The wr_id a work request carries through the device.
//
// Package dat's IDs must come back unchanged, and two things must be told
// apart on every work completion that the ID alone cannot say:
//
//   - Which queue it belongs to. Package dat picks the queue by the
//     Completion's Op, and a failed or flushed verbs completion has no
//     valid opcode, while one CQ may serve both queues of a QP.
//   - Whether it is the provider's own request (a drain marker, a window
//     bind): those never reach package dat, and whatever ID they carry
//     could equally be an ID of dat's.
//
// So the device never sees dat's ID verbatim when that could be
// ambiguous. Bit 63 clear: the low 62 bits are dat's ID and bit 62 says
// "receive" (QP receive queue or SRQ). Bit 63 set: a provider handle,
// whose kind sits in bits 56..61 and whose index in bits 0..55. A dat ID
// that does not fit in 62 bits gets a handle of kind wrEscSend/wrEscRecv/
// wrEscSRQ, an index into a table of the QP (or SRQ) that maps it back; a
// provider request gets a handle of its own kind. The two ranges cannot
// meet, so no dat ID can ever be mistaken for a marker or a bind, whatever
// values dat chooses. Package dat numbers requests from a counter, so the
// tables stay empty in practice and the data path is one mask and one
// compare each way.
const (
	wrHandle   = 1 << 63
	wrRecvBit  = 1 << 62
	wrIDMask   = wrRecvBit - 1
	wrKindBits = 56
	wrIdxMask  = 1<<wrKindBits - 1
)

// Handle kinds.
const (
	wrEscSend  = 1 // a dat send-side ID that needs the table
	wrEscRecv  = 2 // a dat receive ID that needs the table
	wrEscSRQ   = 3 // a dat SRQ receive ID, in the SRQ's table
	wrMarkSend = 4 // the drain marker of a send queue
	wrMarkRecv = 5 // the drain marker of a receive queue
	wrBind     = 6 // a window bind; index: the QP's bind number
)

func wrHandleOf(kind, idx uint64) uint64 { return wrHandle | kind<<wrKindBits | idx&wrIdxMask }

func wrKind(w uint64) uint64 { return w &^ wrHandle >> wrKindBits }

// escapes maps handles to the dat IDs that did not fit (see above). The
// zero value is ready to use. An entry leaves the table when its
// completion is polled, or with the table's owner; a request that never
// completes (a receive of a QP that is destroyed) is dropped with it.
type escapes struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]uint64
}

// put stores id and returns its index.
func (e *escapes) put(id uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = make(map[uint64]uint64)
	}
	e.next++
	e.m[e.next&wrIdxMask] = id
	return e.next & wrIdxMask
}

// take returns and forgets the ID stored at idx.
func (e *escapes) take(idx uint64) (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, ok := e.m[idx]
	delete(e.m, idx)
	return id, ok
}

// drop forgets the entry at idx, for a post the device refused.
func (e *escapes) drop(idx uint64) { e.take(idx) }

// len is the number of IDs waiting for their completion.
func (e *escapes) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}

// encodeWRID returns the wr_id to post for dat's id on a queue (recv:
// the receive queue or SRQ) and, for an escaped id, the index to drop if
// the post fails (0: none).
func encodeWRID(id uint64, recv bool, esc *escapes, escKind uint64) (wrid, escIdx uint64) {
	if id&^wrIDMask == 0 {
		if recv {
			return id | wrRecvBit, 0
		}
		return id, 0
	}
	idx := esc.put(id)
	return wrHandleOf(escKind, idx), idx
}

// reset forgets every entry: their requests will never complete.
func (e *escapes) reset() {
	e.mu.Lock()
	e.m = nil
	e.mu.Unlock()
}
