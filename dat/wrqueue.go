package dat

import (
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// wrQueue is one work queue of an EP (its receives, or its send-side
// requests) as package dat sees it: every request posted and not yet
// reported, in post order.
//
// Why dat keeps it rather than the provider: DAT reports the completions of
// one queue in the order the work was posted, flushes included, and with a
// delivery mode per request (SUPPRESS, UNSIGNALLED). Providers do not all
// complete in order (soft-iWARP completes a Send posted behind an RDMA Read
// first), and each used to rebuild ordering and flushing its own way. Here
// a request is numbered when it is posted (its sequence number is its
// provider WRID), a provider completion marks its entry, and entries leave
// from the head only, so events come out in post order whatever order the
// provider completes in. When the connection ends, the entries still
// outstanding are completed as flushed by dat itself, after every
// completion the provider did produce has been polled.
//
// Locking: mu guards the ring. Whoever moves entries to the EVD holds the
// EVD's mu first, then mu (see EVD.mu); posters hold only mu while they
// number a request and hand it to the provider, so the provider receives
// requests in sequence order.
type wrQueue struct {
	mu   sync.Mutex
	ep   *EP
	recv bool

	ents  []wrEntry // ring indexed by seq modulo its length
	limit int       // capacity: the EP's max DTOs (len(ents) grows up to it)
	head  uint64    // seq of the oldest entry
	next  uint64    // seq the next post gets

	// evd receives the queue's events; solicitedOnly is set for a receive
	// stream with SOLICITED_WAIT flags. Both change only while the queue
	// is empty (EP create and modify).
	evd           *EVD
	solicitedOnly bool
	// srq is the SRQ receives come from instead (receive queue only).
	srq *SRQ

	// silent counts the requests posted unsignalled since the last
	// signalled one (see signalDue).
	silent int

	// dead is set once the connection's end has been processed: posts then
	// complete flushed at once, behind anything still queued.
	dead bool
}

// wrEntry is one outstanding request.
type wrEntry struct {
	cookie uint64
	// length is the bytes a send-side request moves (set when posted) or
	// the length of the message a receive took (set when it completes).
	length uint32
	// imm is the immediate value of a receive an RDMA Write with
	// Immediate consumed (withImm).
	imm  uint32
	op   driver.Opcode
	mode deliveryMode
	// signaled is false for a request the provider may complete silently
	// (posted unsignalled): a later completion implies its success.
	signaled  bool
	done      bool
	status    driver.Status
	solicited bool
	withImm   bool
}

// resize sets the queue's capacity (the EP's max DTOs). Entries already
// queued are kept; the capacity never drops below their number. The
// entries themselves are allocated as requests need them (push), up to
// the capacity: an idle EP does not hold a full queue.
func (q *wrQueue) resize(capacity int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int(q.next - q.head)
	q.limit = max(capacity, n, 1)
	if len(q.ents) > q.limit || len(q.ents) < min(q.limit, wrQueueInitial) {
		q.regrow(min(q.limit, max(n, wrQueueInitial)))
	}
}

// wrQueueInitial is how many entries a queue starts with.
const wrQueueInitial = 8

// regrow moves the queued entries to a slice of size entries, in order.
// Callers hold mu.
func (q *wrQueue) regrow(size int) {
	ents := make([]wrEntry, size)
	for s := q.head; s != q.next; s++ {
		ents[s%uint64(size)] = q.ents[s%uint64(len(q.ents))]
	}
	q.ents = ents
}

// outstanding is the number of requests posted and not yet reported.
// Callers hold mu.
func (q *wrQueue) outstanding() int { return int(q.next - q.head) }

func (q *wrQueue) full() bool { return q.outstanding() >= q.limit }

func (q *wrQueue) at(seq uint64) *wrEntry { return &q.ents[seq%uint64(len(q.ents))] }

// signalDue reports whether a SUPPRESSed request must nevertheless ask the
// provider for a completion. An unsignalled request keeps its place until
// a later completion implies it, so a run of them as long as the queue
// would fill it for good (a consumer that only ever posts SUPPRESSed
// Sends): every half queue one is signalled, and its completion, which
// produces no event, releases the run. Callers hold mu.
func (q *wrQueue) signalDue() bool {
	q.silent++
	if q.silent >= max(1, q.limit/2) {
		q.silent = 0
		return true
	}
	return false
}

// push numbers a new request and returns its WRID. Callers hold mu and
// checked full.
func (q *wrQueue) push(e wrEntry) uint64 {
	if q.outstanding() == len(q.ents) {
		q.regrow(min(2*len(q.ents), q.limit))
	}
	seq := q.next
	*q.at(seq) = e
	q.next++
	if q.recv {
		return seq | recvWRIDBit
	}
	return seq
}

// dropNewest takes back the request just pushed, which the provider
// refused: no completion will come for it.
func (q *wrQueue) dropNewest() {
	q.next--
	*q.at(q.next) = wrEntry{}
}

// complete records a provider completion. A completion for a request that
// is no longer outstanding (already flushed, or of an earlier connection)
// is ignored. On the send queue, a completion implies the success of the
// unsignalled requests posted before it, which the provider may never
// report. Callers hold mu.
func (q *wrQueue) complete(c *driver.Completion) {
	seq := c.WRID & seqMask
	if seq < q.head || seq >= q.next {
		return
	}
	e := q.at(seq)
	if e.done {
		return
	}
	e.done, e.status, e.solicited = true, c.Status, c.Solicited
	if q.recv {
		e.length = c.Length // the message's length
		e.withImm, e.imm = c.WithImm && c.Status == driver.StatusSuccess, c.Imm
		return
	}
	// A send-side request's length is the one posted: devices need not
	// report it.
	for s := q.head; s < seq; s++ {
		if p := q.at(s); !p.done && !p.signaled {
			p.done, p.status = true, driver.StatusSuccess
		}
	}
}

// flush marks every outstanding request flushed and the queue dead.
// Callers hold mu.
func (q *wrQueue) flush() {
	q.dead = true
	for s := q.head; s != q.next; s++ {
		if e := q.at(s); !e.done {
			e.done, e.status = true, driver.StatusFlushed
		}
	}
}

// revive makes a dead queue accept provider posts again (a new connection
// after dat_ep_reset). Callers hold mu; the queue is empty.
func (q *wrQueue) revive() { q.dead = false }

// deliverLocked moves the finished requests at the head of the queue to
// evd as DTO completion events, in post order, and reports how many events
// were lost to overflow. Callers hold evd.mu and q.mu.
func (q *wrQueue) deliverLocked() (lost int) {
	evd := q.evd
	for q.head != q.next {
		e := q.at(q.head)
		if !e.done {
			break
		}
		ent := *e
		*e = wrEntry{}
		q.head++
		if evd == nil {
			continue
		}
		notify := true
		if ent.status == driver.StatusSuccess {
			switch {
			case ent.mode == deliverSuppress:
				continue
			case ent.mode == deliverQuiet:
				notify = false
			case q.solicitedOnly && !ent.solicited:
				notify = false
			}
		}
		ev := Event{Number: DTOCompletionEvent, DTO: DTOCompletion{
			EP: q.ep, Cookie: ent.cookie, Status: DTOStatus(ent.status), Length: ent.length, Op: DTOOp(ent.op),
			WithImm: ent.withImm, Imm: ent.imm,
		}}
		if !evd.enqueueLocked(ev, notify) {
			lost++
		}
	}
	return lost
}
