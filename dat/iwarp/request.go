package iwarp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Request is a received MPA Request waiting for the consumer's decision.
// It implements driver.Request. Exactly one of Accept, Reject or Abort
// settles it; later calls fail (Abort: no-op).
type Request struct {
	l   *Listener
	tc  *net.TCPConn
	req wire.MPAFrame

	mu      sync.Mutex
	settled bool
}

var (
	_ driver.Request       = (*Request)(nil)
	_ driver.LocalAccepter = (*Request)(nil)
)

// Info describes the request: the TCP endpoints, the initiator's consumer
// private data (MPA v2 block removed) and its advertised IRD and ORD from
// the MPA v2 block. An MPA revision 1 Request carries no IRD/ORD; the
// provider maxima are reported then, so that only the local QP
// configuration limits the connection.
func (r *Request) Info() driver.RequestInfo {
	info := driver.RequestInfo{
		Remote:      r.tc.RemoteAddr(),
		Local:       r.tc.LocalAddr(),
		PrivateData: r.req.PrivateData,
		IRD:         MaxIRD,
		ORD:         MaxORD,
	}
	if r.req.Header.Enhanced() {
		info.IRD, info.ORD = int(r.req.V2.IRD), int(r.req.V2.ORD)
	}
	return info
}

// settle marks the request decided; false if it already was.
func (r *Request) settle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return false
	}
	r.settled = true
	return true
}

func (r *Request) errorf(op, format string, args ...any) error {
	return fmt.Errorf("iwarp: %s %s: %s", op, r.tc.RemoteAddr(), fmt.Sprintf(format, args...))
}

// Accept sends the MPA Reply carrying privateData and hands the TCP
// connection to qp, which must be an unconnected QP of the same IA. The
// Reply echoes the Request's revision and E flag, carries the negotiated
// IRD/ORD (siw's relaxed rules) and C if the Request had C or the IA
// requires CRC. Argument and QP-state errors leave the request pending;
// any later failure resets the connection and leaves qp disconnected.
func (r *Request) Accept(ctx context.Context, qp driver.QP, privateData []byte) (driver.ConnectResult, error) {
	q, ok := qp.(*QP)
	if !ok || q.ia != r.l.ia {
		return driver.ConnectResult{}, r.errorf("accept", "QP %T does not belong to this IA", qp)
	}
	if len(privateData) > MaxPrivateData {
		return driver.ConnectResult{}, r.errorf("accept", "%d bytes of private data exceed the limit of %d", len(privateData), MaxPrivateData)
	}
	r.mu.Lock()
	if r.settled {
		r.mu.Unlock()
		return driver.ConnectResult{}, r.errorf("accept", "request already accepted, rejected or aborted")
	}
	actx, a, cfg, err := q.beginAttempt(ctx, "accept")
	if err != nil {
		r.mu.Unlock()
		return driver.ConnectResult{}, err
	}
	r.settled = true
	r.mu.Unlock()
	r.l.release()

	rep, info := responderReply(&r.req, r.l.ia.opts.requireCRC, cfg.IRD, cfg.ORD, privateData, false)
	err = r.send(ctx, actx, &rep)
	var c *connection
	if err == nil {
		r.l.keepAliveOn(r.tc)
		setUserTimeout(r.tc, r.l.keepAlive)
		c = newConnection(r.tc, info)
	} else {
		resetClose(r.tc)
	}
	if err = q.finishAttempt(a, c, err); err != nil {
		return driver.ConnectResult{}, fmt.Errorf("iwarp: accept %s: %w", r.tc.RemoteAddr(), err)
	}
	return driver.ConnectResult{Local: c.info.Local, Remote: c.info.Remote}, nil
}

// AcceptsLocally reports true: Accept only writes the MPA Reply, after
// which the responder's side is up; it never waits for the initiator
// (driver.LocalAccepter).
func (r *Request) AcceptsLocally() bool { return true }

// send writes a Reply under ctx, bounded by rep_timeout (the initiator
// gives up after that long anyway).
func (r *Request) send(ctx, actx context.Context, rep *wire.MPAFrame) error {
	timeout := r.l.ia.opts.replyTimeout
	deadline := time.Now().Add(timeout)
	ctxBound := false
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline, ctxBound = cd, true
	}
	_ = r.tc.SetDeadline(deadline)
	stop := context.AfterFunc(actx, func() { _ = r.tc.SetDeadline(aLongTimeAgo) })
	err := writeMPA(r.tc, rep)
	if !stop() && err == nil {
		err = context.Cause(actx) // see IA.initiate
	}
	if err != nil {
		return classify(ctx, actx, fmt.Errorf("MPA reply: %w", err), ctxBound, timeout)
	}
	_ = r.tc.SetDeadline(time.Time{})
	return nil
}

// Reject refuses the request as a consumer (peer) reject: an MPA Reply
// with R set carrying privateData, then close.
func (r *Request) Reject(privateData []byte) error {
	if len(privateData) > MaxPrivateData {
		return r.errorf("reject", "%d bytes of private data exceed the limit of %d", len(privateData), MaxPrivateData)
	}
	if !r.settle() {
		return r.errorf("reject", "request already accepted, rejected or aborted")
	}
	r.l.release()
	rep, _ := responderReply(&r.req, r.l.ia.opts.requireCRC, 0, 0, privateData, true)
	_ = r.tc.SetDeadline(time.Now().Add(r.l.ia.opts.replyTimeout))
	err := writeMPA(r.tc, &rep)
	// A plain close: the initiator sent nothing after its Request, so
	// the FIN follows the Reply instead of an RST overtaking it.
	_ = r.tc.Close()
	if err != nil {
		return fmt.Errorf("iwarp: reject %s: MPA reply: %w", r.tc.RemoteAddr(), err)
	}
	return nil
}

// Abort refuses the request as a non-peer reject: the connection is reset
// without a Reply. Aborting a settled request does nothing.
func (r *Request) Abort() error {
	if !r.settle() {
		return nil
	}
	r.l.release()
	resetClose(r.tc)
	return nil
}

// responderReply builds the Reply to req the way siw does (it reuses the
// Request header, siw_proc_mpareq/siw_accept): revision and E echoed, M
// cleared, C echoed or forced by requireCRC, reserved bits zero. With E
// the v2 block carries the negotiated IRD/ORD and the peer-to-peer answer;
// a reject carries siw's proposal (the peer's values swapped and capped).
// The ConnInfo is what an accepted connection runs with.
func responderReply(req *wire.MPAFrame, requireCRC bool, qpIRD, qpORD int, pdata []byte, reject bool) (wire.MPAFrame, ConnInfo) {
	h := req.Header
	rep := wire.MPAFrame{
		Header: wire.MPAHeader{
			Kind:     wire.MPAReply,
			Revision: h.Revision,
			Flags:    h.Flags & (wire.MPAFlagCRC | wire.MPAFlagEnhanced),
		},
		PrivateData: pdata,
	}
	if requireCRC {
		rep.Header.Flags |= wire.MPAFlagCRC
	}
	if reject {
		rep.Header.Flags |= wire.MPAFlagReject
	}
	info := ConnInfo{
		Revision: int(h.Revision),
		Enhanced: h.Enhanced(),
		CRC:      rep.Header.Flags&wire.MPAFlagCRC != 0,
		IRD:      qpIRD,
		ORD:      qpORD,
	}
	if h.Enhanced() {
		v := req.V2
		if reject {
			info.IRD, info.ORD = min(int(v.ORD), MaxIRD), min(int(v.IRD), MaxORD)
		} else {
			info.IRD, info.ORD = responderLimits(qpIRD, qpORD, int(v.IRD), int(v.ORD))
		}
		info.RTR = chooseRTR(v.PeerToPeer, v.WriteRTR, v.ReadRTR)
		rep.V2 = wire.MPAv2{
			PeerToPeer: info.RTR != RTRNone,
			IRD:        v2Limit(info.IRD),
			WriteRTR:   info.RTR == RTRWrite,
			ReadRTR:    info.RTR == RTRRead,
			ORD:        v2Limit(info.ORD),
		}
	}
	return rep, info
}
