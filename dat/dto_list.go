package dat

import (
	"strconv"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// SendRequest is one send-side request of EP.PostSendList: what PostSend,
// PostRDMAWrite, PostRDMARead or PostRDMAWriteImm would take.
type SendRequest struct {
	// Op is DTOSend, DTORDMAWrite, DTORDMARead or DTORDMAWriteImm.
	Op     DTOOp
	IOV    []LMRTriplet
	Cookie uint64
	// Remote is the peer's memory of an RDMA Write or Read.
	Remote RMRTriplet
	// Imm is the immediate value of a DTORDMAWriteImm.
	Imm   uint32
	Flags CompletionFlags
}

// sendListScratch holds a list's checked requests and their segments
// between the checks and the provider call.
type sendListScratch struct {
	posts []dtoPost
	sges  []driver.SGE
	wrs   []driver.SendWR
}

// PostSendList posts reqs in order, as if each were posted by its own
// call (the same checks, errors and completions), but hands them to the
// provider in one call where it can take a list (driver.SendListPoster:
// the verbs provider chains them into one ibv_post_send, one doorbell).
// An rdmanet extension of the DAT API, in the spirit of verbs' work
// request lists.
//
// It returns how many requests were posted. Every request is checked
// before any is posted, so a request that breaks a rule posts none of
// the list and the error names it by index; a queue without room for the
// whole list posts none of it either (DAT_INSUFFICIENT_RESOURCES). Only
// the provider can fail part way: the requests before n are posted and
// complete as usual, the rest are not.
func (ep *EP) PostSendList(reqs []SendRequest) (int, error) {
	const op = "dat_ep_post_send_list"
	if ep == nil {
		return 0, newError(op, InvalidHandle, HandleEP, "EP is nil")
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	ep.sendMu.Lock()
	defer ep.sendMu.Unlock()
	v, err := ep.postView(op)
	if err != nil {
		return 0, err
	}
	sc := &ep.list
	sc.posts, sc.sges = sc.posts[:0], sc.sges[:0]
	for i := range reqs {
		r := &reqs[i]
		kind, ok := sendKind(r.Op)
		if !ok {
			return 0, newError(op, InvalidParameter, Arg(2), "request %d: operation %d is not a send-side DTO", i, r.Op)
		}
		sc.posts = append(sc.posts, dtoPost{})
		p := &sc.posts[i]
		if sc.sges, err = ep.prepare(p, v, kind, r.IOV, r.Cookie, r.Remote, r.Imm, r.Flags, sc.sges); err != nil {
			if e, ok := err.(*Error); ok {
				e.Detail = "request " + strconv.Itoa(i) + ": " + e.Detail
			}
			return 0, err
		}
	}
	// Each post's segments by offset: a later append may have moved the
	// array its slice points into.
	off := 0
	for i := range sc.posts {
		n := len(sc.posts[i].sges)
		sc.posts[i].sges = sc.sges[off : off+n : off+n]
		off += n
	}

	q := &ep.sendQ
	q.mu.Lock()
	if room := q.limit - q.outstanding(); room < len(reqs) {
		q.mu.Unlock()
		return 0, newError(op, InsufficientResources, NoSubtype, "the EP's work queue has room for %d of %d requests", max(room, 0), len(reqs))
	}
	if v.state == EPDisconnected || v.qp == nil || q.dead {
		for i := range sc.posts {
			p := &sc.posts[i]
			p.ent.done, p.ent.status = true, driver.StatusFlushed
			q.push(p.ent)
		}
		q.mu.Unlock()
		q.deliverNow()
		return len(reqs), nil
	}
	sc.wrs = sc.wrs[:0]
	for i := range sc.posts {
		p := &sc.posts[i]
		sc.wrs = append(sc.wrs, p.sendWR(p.push(q)))
	}
	n, err := postList(v.qp, sc.wrs)
	if err != nil {
		// The provider took the first n; no completion will come for the
		// rest, which are the newest entries (the queue lock was held).
		for range len(reqs) - n {
			q.dropNewest()
		}
	}
	q.mu.Unlock()
	clear(sc.wrs) // no references to the caller's memory kept
	if err != nil {
		return n, providerError(op, err)
	}
	return n, nil
}

// postList hands wrs to qp, in one call if it takes lists.
func postList(qp driver.QP, wrs []driver.SendWR) (int, error) {
	if lp, ok := qp.(driver.SendListPoster); ok {
		return lp.PostSendList(wrs)
	}
	for i := range wrs {
		if err := qp.PostSend(wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// sendKind maps a send-side DTO operation to its rules.
func sendKind(op DTOOp) (dtoKind, bool) {
	switch op {
	case DTOSend:
		return kindSend, true
	case DTORDMAWrite:
		return kindWrite, true
	case DTORDMARead:
		return kindRead, true
	case DTORDMAWriteImm:
		return kindWriteImm, true
	}
	return 0, false
}
