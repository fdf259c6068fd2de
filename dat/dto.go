package dat

import (
	"fmt"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// LMRTriplet names local memory for a DTO (DAT_LMR_TRIPLET): Length bytes
// at registered address Addr of the LMR whose lmr_context is Context. A
// zero Length makes the other fields irrelevant.
type LMRTriplet struct {
	Addr    uint64
	Length  uint32
	Context uint32
}

// RMRTriplet names remote memory for RDMA (DAT_RMR_TRIPLET): Length bytes
// at Addr of the peer region whose rmr_context (STag, rkey) is Context.
type RMRTriplet struct {
	Addr    uint64
	Length  uint32
	Context uint32
}

// maxInlineSGE is how many segments a post converts without allocating;
// longer IOVs grow the scratch slice once.
const maxInlineSGE = 8

// dtoKind selects the rules one post follows.
type dtoKind uint8

const (
	kindRecv dtoKind = iota
	kindSend
	kindWrite
	kindRead
	kindWriteImm
)

func (k dtoKind) op() string {
	return [...]string{"dat_ep_post_recv", "dat_ep_post_send", "dat_ep_post_rdma_write", "dat_ep_post_rdma_read", "dat_ib_post_rdma_write_immed"}[k]
}

// rdmaWrite reports the kinds that follow the RDMA Write rules.
func (k dtoKind) rdmaWrite() bool { return k == kindWrite || k == kindWriteImm }

// PostRecv posts a receive buffer (dat_ep_post_recv). It is allowed in every
// EP state; in DISCONNECTED the receive completes at once as flushed.
// Flags may be DEFAULT, or UNSIGNALLED on an EP whose recv completion flags
// are UNSIGNALLED. An EP created on an SRQ takes receives only from the
// SRQ: posting here gives DAT_INVALID_STATE.
func (ep *EP) PostRecv(iov []LMRTriplet, cookie uint64, flags CompletionFlags) error {
	return ep.post(kindRecv, iov, cookie, RMRTriplet{}, 0, flags)
}

// PostSend posts a Send of the bytes described by iov (dat_ep_post_send).
// It needs a CONNECTED EP (DISCONNECTED: flushed at once; other states:
// DAT_INVALID_STATE).
//
// Flags: SUPPRESS (no event if the Send succeeds), SOLICITED_WAIT (Send
// with Solicited Event), BARRIER_FENCE (wait for earlier RDMA Reads), and
// UNSIGNALLED on an EP whose request completion flags are UNSIGNALLED (the
// event is queued without waking a waiter).
func (ep *EP) PostSend(iov []LMRTriplet, cookie uint64, flags CompletionFlags) error {
	return ep.post(kindSend, iov, cookie, RMRTriplet{}, 0, flags)
}

// PostRDMAWrite writes the bytes described by iov into the peer's memory
// at remote (dat_ep_post_rdma_write). States and flags are as for
// PostSend. remote.Length must cover the local data (DAT_LENGTH_ERROR).
func (ep *EP) PostRDMAWrite(iov []LMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags) error {
	return ep.post(kindWrite, iov, cookie, remote, 0, flags)
}

// PostRDMAWriteImm is PostRDMAWrite followed by the 32-bit value imm,
// which the peer receives in the completion of one of its posted
// receives (DTOCompletion.WithImm) once the written bytes are in place:
// one request does what a Write and a Send would, and the receive's
// buffer is left untouched. It is DAT 2.0's InfiniBand extension
// dat_ib_post_rdma_write_immed, and works only where
// ProviderAttr.WriteImmSupported says so (InfiniBand, RoCE); elsewhere it
// gives DAT_MODEL_NOT_SUPPORTED. The local data may be empty. States,
// flags and lengths are as for PostRDMAWrite; the peer must have a
// receive posted, as for a Send.
func (ep *EP) PostRDMAWriteImm(iov []LMRTriplet, cookie uint64, imm uint32, remote RMRTriplet, flags CompletionFlags) error {
	return ep.post(kindWriteImm, iov, cookie, remote, imm, flags)
}

// PostRDMARead reads remote.Length bytes of the peer's memory into iov
// (dat_ep_post_rdma_read). The local segments must hold them
// (DAT_LENGTH_ERROR) and be writable by the adapter
// (DAT_PRIVILEGES_VIOLATION). States and flags are as for PostSend.
func (ep *EP) PostRDMARead(iov []LMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags) error {
	return ep.post(kindRead, iov, cookie, remote, 0, flags)
}

func (ep *EP) post(kind dtoKind, iov []LMRTriplet, cookie uint64, remote RMRTriplet, imm uint32, flags CompletionFlags) error {
	op := kind.op()
	if ep == nil {
		return newError(op, InvalidHandle, HandleEP, "EP is nil")
	}
	recv := kind == kindRecv
	qmu, q, scratch := &ep.sendMu, &ep.sendQ, &ep.sendSGE
	if recv {
		qmu, q, scratch = &ep.recvMu, &ep.recvQ, &ep.recvSGE
	}
	qmu.Lock()
	defer qmu.Unlock()
	v, err := ep.postView(op)
	if err != nil {
		return err
	}
	// The segments go through a scratch array owned by this queue (guarded
	// by qmu): a stack array would escape through the provider interface
	// and allocate on every post.
	var p dtoPost
	if _, err := ep.prepare(&p, v, kind, iov, cookie, remote, imm, flags, scratch[:0]); err != nil {
		return err
	}
	if recv {
		ep.recvPosted.Store(true)
	}
	q.mu.Lock()
	if q.full() {
		n := q.outstanding()
		q.mu.Unlock()
		return newError(op, InsufficientResources, NoSubtype, "the EP's work queue is full (%d outstanding)", n)
	}
	if v.state == EPDisconnected || v.qp == nil || q.dead {
		// A disconnected EP flushes at once, behind whatever the queue
		// still holds.
		p.ent.done, p.ent.status = true, driver.StatusFlushed
		q.push(p.ent)
		q.mu.Unlock()
		q.deliverNow()
		return nil
	}
	id := p.push(q)
	if recv {
		err = v.qp.PostRecv(driver.RecvWR{ID: id, Local: p.sges})
	} else {
		err = v.qp.PostSend(p.sendWR(id))
	}
	if err != nil {
		// The provider refused the post, so no completion will come. The
		// queue lock was held throughout, so it is still the newest entry.
		q.dropNewest()
		q.mu.Unlock()
		return providerError(op, err)
	}
	q.mu.Unlock()
	return nil
}

// postView is the EP's published view for a post, or the error for a
// freed EP. Posting reads the view and never takes the IA-wide lock (see
// epView).
func (ep *EP) postView(op string) (*epView, error) {
	v := ep.view.Load()
	if v == nil || v.freed {
		return nil, newError(op, InvalidHandle, HandleEP, "EP is freed")
	}
	return v, nil
}

// dtoPost is one checked request on its way to the provider.
type dtoPost struct {
	ent    wrEntry
	sges   []driver.SGE
	flags  driver.SendFlags // all but SendSignaled, which push decides
	remote driver.RemoteSegment
	imm    uint32
}

// prepare checks one request against the EP's view (state, flags, depths,
// segments against their LMRs, lengths) and fills p, its segments
// appended to sges; it returns sges with them. Callers hold the queue's
// post lock.
func (ep *EP) prepare(p *dtoPost, v *epView, kind dtoKind, iov []LMRTriplet, cookie uint64, remote RMRTriplet, imm uint32, flags CompletionFlags, sges []driver.SGE) ([]driver.SGE, error) {
	op := kind.op()
	ia := ep.ia
	if kind == kindWriteImm && !ia.attr.WriteImm {
		return sges, newError(op, ModelNotSupported, NoSubtype, "the provider's transport has no RDMA Write with Immediate")
	}
	a := &v.attr
	recv := kind == kindRecv

	// State: receives may be posted in every state; send-side requests
	// need a connection (dat_ep_post_send: CONNECTED, or DISCONNECTED where
	// they flush).
	if recv && v.srq {
		return sges, newError(op, InvalidState, NoSubtype, "the EP receives from an SRQ: post receives to the SRQ")
	}
	if !recv && v.state != EPConnected && v.state != EPDisconnected {
		return sges, newError(op, InvalidState, v.state.subtype(), "EP is %v", v.state)
	}
	if recv && !v.recv || !recv && !v.req {
		return sges, newError(op, InvalidState, NoSubtype, "the EP has no EVD for this completion stream")
	}

	// Flags.
	epFlags := normFlags(a.RequestCompletionFlags)
	allowed := CompletionSuppress | CompletionSolicitedWait | CompletionBarrierFence
	if recv {
		epFlags = normFlags(a.RecvCompletionFlags)
		allowed = 0
	}
	if epFlags == CompletionUnsignalled {
		allowed |= CompletionUnsignalled
	}
	if flags&^allowed != 0 {
		return sges, newError(op, InvalidParameter, Arg(5), "completion flags %#x: allowed here are %#x", flags, allowed)
	}

	// An EP with max_rdma_read_out 0 negotiated no outbound Read depth:
	// the peer would refuse the Read (siw) or never answer it (rxe).
	if kind == kindRead && a.MaxRDMAReadOut == 0 {
		return sges, newError(op, InvalidState, NoSubtype, "max_rdma_read_out is 0: set it with dat_ep_modify before connecting to post RDMA Reads")
	}

	// Segments.
	maxIOV := a.MaxRequestIOV
	switch kind {
	case kindRecv:
		maxIOV = a.MaxRecvIOV
	case kindWrite, kindWriteImm:
		maxIOV = min(a.MaxRequestIOV, nonZero(a.MaxRDMAWriteIOV, a.MaxRequestIOV))
	case kindRead:
		maxIOV = min(a.MaxRequestIOV, nonZero(a.MaxRDMAReadIOV, v.maxReadSGE))
	}
	if len(iov) > maxIOV {
		return sges, newError(op, InvalidParameter, Arg(2), "%d segments exceed the EP's limit of %d", len(iov), maxIOV)
	}
	var total uint64
	needWrite := kind == kindRecv || kind == kindRead
	first := len(sges)
	ia.lmrMu.RLock()
	for _, t := range iov {
		if t.Length == 0 {
			continue // DAT: a zero-length triplet's other fields are ignored
		}
		if err := ia.checkLocal(op, v.pz, t, needWrite); err != nil {
			ia.lmrMu.RUnlock()
			return sges, err
		}
		sges = append(sges, driver.SGE{Addr: t.Addr, Length: t.Length, LKey: t.Context})
		total += uint64(t.Length)
	}
	ia.lmrMu.RUnlock()
	switch kind {
	case kindRecv, kindSend:
		if total > uint64(a.MaxMessageSize) {
			return sges, newError(op, LengthError, NoSubtype, "%d bytes exceed max_message_size %d", total, a.MaxMessageSize)
		}
	case kindWrite, kindWriteImm:
		if total > uint64(a.MaxRDMASize) {
			return sges, newError(op, LengthError, NoSubtype, "%d bytes exceed max_rdma_size %d", total, a.MaxRDMASize)
		}
		if total > uint64(remote.Length) {
			return sges, newError(op, LengthError, NoSubtype, "%d local bytes do not fit the %d-byte remote segment", total, remote.Length)
		}
	case kindRead:
		if uint64(remote.Length) > uint64(a.MaxRDMASize) {
			return sges, newError(op, LengthError, NoSubtype, "%d bytes exceed max_rdma_size %d", remote.Length, a.MaxRDMASize)
		}
		if uint64(remote.Length) > total {
			return sges, newError(op, LengthError, NoSubtype, "the %d-byte remote segment does not fit %d local bytes", remote.Length, total)
		}
	}
	mode := deliverNotify
	switch {
	case flags&CompletionSuppress != 0:
		mode = deliverSuppress
	case flags&CompletionUnsignalled != 0:
		mode = deliverQuiet
	}
	*p = dtoPost{sges: sges[first:], imm: imm,
		remote: driver.RemoteSegment{Addr: remote.Addr, Length: remote.Length, RKey: remote.Context}}
	p.ent = wrEntry{cookie: cookie, op: driver.OpRecv, mode: mode, signaled: true}
	if !recv {
		p.ent.op = [...]driver.Opcode{kindSend: driver.OpSend, kindWrite: driver.OpRDMAWrite, kindRead: driver.OpRDMARead, kindWriteImm: driver.OpRDMAWriteImm}[kind]
		p.ent.length = uint32(total)
		if kind == kindRead {
			p.ent.length = remote.Length
		}
		// Only a SUPPRESSed Send or Write may complete silently: its
		// success then shows in a later completion. A Read always reports,
		// since it may finish after requests posted behind it.
		p.ent.signaled = mode != deliverSuppress || kind == kindRead
		if flags&CompletionSolicitedWait != 0 {
			p.flags |= driver.SendSolicited
		}
		if flags&CompletionBarrierFence != 0 {
			p.flags |= driver.SendFence
		}
	}
	return sges, nil
}

// push enters p into q and returns its WRID. Callers hold q.mu and
// checked that q has room.
func (p *dtoPost) push(q *wrQueue) uint64 {
	if !p.ent.signaled && q.signalDue() {
		p.ent.signaled = true
	}
	return q.push(p.ent)
}

// sendWR is p as the provider's work request, numbered id.
func (p *dtoPost) sendWR(id uint64) driver.SendWR {
	f := p.flags
	if p.ent.signaled {
		f |= driver.SendSignaled
	}
	return driver.SendWR{ID: id, Op: p.ent.op, Flags: f, Local: p.sges, Remote: p.remote, Imm: p.imm}
}

func nonZero(v, fallback int) int {
	if v == 0 {
		return fallback
	}
	return v
}

// checkLocal validates one local segment against the LMR it names:
// DAT_PRIVILEGES_VIOLATION if no LMR has that context or it lacks local
// write where the adapter must write, DAT_PROTECTION_VIOLATION if the LMR
// is in another PZ, DAT_INVALID_PARAMETER if the segment leaves the LMR.
// Callers hold ia.mu or ia.lmrMu.
func (ia *IA) checkLocal(op string, pz *PZ, t LMRTriplet, needWrite bool) error {
	l, ok := ia.lmrByContext[t.Context]
	if !ok {
		return newError(op, PrivilegesViolation, NoSubtype, "no LMR has lmr_context %#x", t.Context)
	}
	if l.pz != pz {
		return newError(op, ProtectionViolation, NoSubtype, "the LMR with lmr_context %#x is in another protection zone", t.Context)
	}
	base, size := l.prov.Addr(), uint64(len(l.buf))
	if t.Addr < base || t.Addr-base > size || uint64(t.Length) > size-(t.Addr-base) {
		return newError(op, InvalidParameter, Arg(3), "segment [%#x, +%d) leaves its LMR [%#x, +%d)", t.Addr, t.Length, base, size)
	}
	if needWrite && l.priv&MemPrivLocalWrite == 0 {
		return newError(op, PrivilegesViolation, PrivilegesWrite, "the LMR with lmr_context %#x lacks local write", t.Context)
	}
	return nil
}

// deliverNow moves the queue's finished head entries to its EVD: for
// entries that dat completed itself (flushes), which no CQ poll reports.
func (q *wrQueue) deliverNow() {
	q.mu.Lock()
	evd := q.evd
	q.mu.Unlock()
	if evd != nil {
		evd.mu.Lock()
	}
	q.mu.Lock()
	lost := 0
	if q.evd == evd {
		lost = q.deliverLocked()
	}
	q.mu.Unlock()
	if evd != nil {
		evd.mu.Unlock()
		evd.reportLost(lost)
	}
}

// flushQueues completes the EP's outstanding work as flushed, once the
// connection is gone and the provider quiescent. The EVDs' CQs are polled
// first, so that work the provider did finish is reported as it finished,
// not as flushed; from then on posts complete flushed at once.
func (ep *EP) flushQueues() {
	for _, q := range []*wrQueue{&ep.recvQ, &ep.sendQ} {
		q.mu.Lock()
		evd, srq := q.evd, q.srq
		q.mu.Unlock()
		if srq != nil {
			continue // receives belong to the SRQ, not to this connection
		}
		lost := 0
		if evd != nil {
			evd.mu.Lock()
			lost = evd.pollLocked()
		}
		q.mu.Lock()
		q.flush()
		if q.evd == evd {
			lost += q.deliverLocked()
		}
		q.mu.Unlock()
		if evd != nil {
			evd.mu.Unlock()
			evd.reportLost(lost)
		}
	}
}

// String names an LMR triplet for error messages.
func (t LMRTriplet) String() string {
	return fmt.Sprintf("{%#x +%d ctx %#x}", t.Addr, t.Length, t.Context)
}
