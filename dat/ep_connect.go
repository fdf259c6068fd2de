package dat

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Connect requests a connection to the IA at remote, on connection
// qualifier qual (dat_ep_connect). On success the EP is
// ACTIVE_CONNECTION_PENDING and the outcome arrives later on the connection
// EVD: ESTABLISHED (with the peer's accept private data), PEER_REJECTED
// (with its reject data), NON_PEER_REJECTED, UNREACHABLE or TIMED_OUT; all
// but ESTABLISHED leave the EP DISCONNECTED.
//
// timeout is in microseconds (TimeoutInfinite: no limit) and must be
// positive. privateData may be at most ProviderAttr.MaxPrivateDataSize
// bytes. Only QoSBestEffort and ConnectDefault are supported
// (DAT_MODEL_NOT_SUPPORTED otherwise).
func (ep *EP) Connect(remote netip.Addr, qual ConnQual, timeout Timeout, privateData []byte, qos QoS, flags ConnectFlags) error {
	run, err := ep.connect(context.Background(), timeout, remote, qual, privateData, qos, flags)
	if err != nil {
		return err
	}
	go run()
	return nil
}

// ConnectContext is Connect made by the calling goroutine, an extension
// beyond DAT: the connection is established (or fails) in the call, which
// returns once its outcome is on the connection EVD, rather than in a
// goroutine of the EP's. A consumer that would only wait for that event
// anyway saves the hand-off between the two goroutines, which is most of
// what a connection's setup costs on a fast network.
//
// ctx bounds the attempt as Connect's timeout does: its deadline passing
// ends it with TIMED_OUT; a cancellation ends it with NON_PEER_REJECTED,
// the context's error in the event. An error returned is one Connect
// would have returned; the connection's own failures are events, as with
// Connect. Disconnect and Free from another goroutine abort the attempt
// as they abort Connect's.
func (ep *EP) ConnectContext(ctx context.Context, remote netip.Addr, qual ConnQual, privateData []byte, qos QoS, flags ConnectFlags) error {
	run, err := ep.connect(ctx, TimeoutInfinite, remote, qual, privateData, qos, flags)
	if err != nil {
		return err
	}
	run()
	return nil
}

// connect validates a Connect and starts it; run carries it out.
func (ep *EP) connect(ctx context.Context, timeout Timeout, remote netip.Addr, qual ConnQual, privateData []byte, qos QoS, flags ConnectFlags) (run func(), err error) {
	const op = "dat_ep_connect"
	if err := ep.lock(op); err != nil {
		return nil, err
	}
	defer ep.ia.mu.Unlock()
	if !remote.IsValid() {
		return nil, newError(op, InvalidAddress, AddressMalformed, "remote IA address is not set")
	}
	if err := ep.connectArgs(op, qual, 3, timeout, 4, privateData, 6, qos, flags); err != nil {
		return nil, err
	}
	return ep.startConnectLocked(ctx, op, remote, qual, timeout, privateData)
}

// DupConnect connects the EP to the same remote end as the CONNECTED EP dup
// (dat_ep_dup_connect): the same remote IA address and connection
// qualifier that dup used. Outcomes are those of Connect.
func (ep *EP) DupConnect(dup *EP, timeout Timeout, privateData []byte, qos QoS) error {
	run, err := ep.dupConnect(context.Background(), dup, timeout, privateData, qos)
	if err != nil {
		return err
	}
	go run()
	return nil
}

// DupConnectContext is DupConnect made by the calling goroutine, as
// ConnectContext is Connect.
func (ep *EP) DupConnectContext(ctx context.Context, dup *EP, privateData []byte, qos QoS) error {
	run, err := ep.dupConnect(ctx, dup, TimeoutInfinite, privateData, qos)
	if err != nil {
		return err
	}
	run()
	return nil
}

// dupConnect validates a DupConnect and starts it; run carries it out.
func (ep *EP) dupConnect(ctx context.Context, dup *EP, timeout Timeout, privateData []byte, qos QoS) (run func(), err error) {
	const op = "dat_ep_dup_connect"
	if err := ep.lock(op); err != nil {
		return nil, err
	}
	defer ep.ia.mu.Unlock()
	if dup == nil || dup.freed || dup.ia != ep.ia {
		return nil, newError(op, InvalidHandle, HandleEP, "dup_ep_handle is nil, freed or of another IA")
	}
	if err := ep.connectArgs(op, 1, 0, timeout, 3, privateData, 5, qos, ConnectDefault); err != nil {
		return nil, err
	}
	if dup.state != EPConnected {
		return nil, newError(op, InvalidState, dup.state.subtype(), "dup EP is %v, not CONNECTED", dup.state)
	}
	qual := dup.connQual
	if qual == 0 {
		// dup was connected from the passive side: its remote end is the
		// peer's port, which is all DAT knows of it.
		qual = ConnQual(dup.remotePort)
	}
	return ep.startConnectLocked(ctx, op, dup.remoteAddr, qual, timeout, privateData)
}

// connectArgs validates the arguments shared by Connect and DupConnect.
// The arg numbers name the parameters in DAT_INVALID_ARGn subtypes.
func (ep *EP) connectArgs(op string, qual ConnQual, qualArg int, timeout Timeout, timeoutArg int,
	privateData []byte, pdArg int, qos QoS, flags ConnectFlags) error {
	if qos != QoSBestEffort {
		return newError(op, ModelNotSupported, NoSubtype, "QoS %#x is not supported (only DAT_QOS_BEST_EFFORT)", qos)
	}
	if flags != ConnectDefault {
		return newError(op, ModelNotSupported, NoSubtype, "connect flags %#x: the provider has no multipath", flags)
	}
	if qualArg != 0 && (qual == 0 || qual > 0xFFFF) {
		return newError(op, InvalidParameter, Arg(qualArg), "connection qualifier %d: both providers map qualifiers to ports 1..65535", qual)
	}
	if timeout == 0 {
		return newError(op, InvalidParameter, Arg(timeoutArg), "timeout must be positive")
	}
	if max := ep.ia.attr.MaxPrivateData; len(privateData) > max {
		return newError(op, InvalidParameter, Arg(pdArg), "%d bytes of private data exceed the provider's %d", len(privateData), max)
	}
	if ep.state != EPUnconnected {
		return ep.stateError(op)
	}
	if ep.pz == nil || ep.qp == nil {
		return newError(op, InvalidState, StateEPNotReady, "EP has no protection zone")
	}
	return nil
}

// startConnectLocked moves the EP to ACTIVE_CONNECTION_PENDING and
// returns the function that runs the provider's connect under parent (and
// timeout) and reports its outcome; the caller runs it, in a goroutine of
// its own or in its own. Callers hold ia.mu.
func (ep *EP) startConnectLocked(parent context.Context, op string, remote netip.Addr, qual ConnQual, timeout Timeout, privateData []byte) (func(), error) {
	ia := ep.ia
	opts, err := ep.connectOptionsLocked(op)
	if err != nil {
		return nil, err
	}
	var ctx context.Context
	var cancel context.CancelFunc
	_, timed := parent.Deadline()
	if d, finite := timeout.Duration(); finite {
		ctx, cancel = context.WithTimeout(parent, d)
		timed = true
	} else {
		ctx, cancel = context.WithCancel(parent)
	}
	a := &attempt{cancel: cancel}
	ep.attempt = a
	ep.setStateLocked(EPActiveConnectionPending)
	ep.connQual = qual
	ep.remoteAddr = remote
	ep.remotePort = PortQual(qual)
	qp := ep.qp
	pd := append([]byte(nil), privateData...)
	dst := &net.TCPAddr{IP: remote.AsSlice(), Zone: remote.Zone(), Port: int(qual)}
	ia.bg.Add(1)
	return func() {
		defer ia.bg.Done()
		defer cancel()
		res, err := connectQP(ctx, qp, dst, pd, opts)
		ep.connectDone(a, qp, res, err, timed)
	}, nil
}

// connectDone turns the provider's connect outcome into the EP transition
// and connection event of the active side: CONNECTED with ESTABLISHED (and
// the peer's accept data) on success; otherwise DISCONNECTED with
// PEER_REJECTED, NON_PEER_REJECTED, UNREACHABLE or TIMED_OUT.
func (ep *EP) connectDone(a *attempt, qp driver.QP, res driver.ConnectResult, err error, timed bool) {
	ia := ep.ia
	ep.evMu.Lock()
	ia.mu.Lock()
	if ep.attempt != a {
		// Aborted by disconnect, free or IA close, which already reported
		// it. A connection that got through anyway is torn down.
		ia.mu.Unlock()
		ep.evMu.Unlock()
		if err == nil {
			qp.Disconnect(false)
		}
		return
	}
	ep.attempt = nil
	lost, lostErr := a.lost, a.lostErr
	ev := Event{Conn: ConnectionData{EP: ep, Err: err}}
	var reject *driver.RejectError
	switch {
	case err == nil:
		ep.setStateLocked(EPConnected)
		ep.recordAddrs(res)
		ev.Number = ConnectionEventEstablished
		ev.Conn.PrivateData = res.PrivateData
	case errors.As(err, &reject):
		ep.setStateLocked(EPDisconnected)
		ev.Number = ConnectionEventPeerRejected
		ev.Conn.PrivateData = reject.PrivateData
	case timed && errors.Is(err, context.DeadlineExceeded):
		ep.setStateLocked(EPDisconnected)
		ev.Number = ConnectionEventTimedOut
	case errors.Is(err, driver.ErrUnreachable):
		ep.setStateLocked(EPDisconnected)
		ev.Number = ConnectionEventUnreachable
	default:
		ep.setStateLocked(EPDisconnected)
		ev.Number = ConnectionEventNonPeerRejected
	}
	evd := ep.connEVD
	ia.mu.Unlock()
	if err != nil {
		ep.flushQueues()
	}
	if testHookBeforeEstablished != nil && err == nil {
		testHookBeforeEstablished()
	}
	if evd != nil {
		evd.post(ev)
	}
	ep.evMu.Unlock()
	if err == nil && lost {
		ep.transportEnded(ep.tagOf(qp), lostErr)
	}
}

// testHookBeforeEstablished, nil outside tests, runs between an active
// connection's CONNECTED state and its ESTABLISHED event.
var testHookBeforeEstablished func()

// tagOf returns the Tag of qp if it is still the EP's QP, else 0 (which no
// QP has).
func (ep *EP) tagOf(qp driver.QP) uint32 {
	ep.ia.mu.Lock()
	defer ep.ia.mu.Unlock()
	if ep.qp == qp {
		return ep.tag
	}
	return 0
}

// recordAddrs stores the addresses of an established connection. Callers
// hold ia.mu.
func (ep *EP) recordAddrs(res driver.ConnectResult) {
	if a := addrOf(res.Local); a.IsValid() {
		ep.localAddr = a
		ep.localPort = PortQual(portOf(res.Local))
	}
	if a := addrOf(res.Remote); a.IsValid() {
		ep.remoteAddr = a
		ep.remotePort = PortQual(portOf(res.Remote))
	}
}

// Disconnect closes the connection (dat_ep_disconnect).
//
//   - CONNECTED, graceful: DISCONNECT_PENDING until outstanding send-side
//     DTOs finish, then DISCONNECTED with a DISCONNECTED event.
//   - CONNECTED or DISCONNECT_PENDING, abrupt: DISCONNECTED at once;
//     outstanding DTOs flush.
//   - DISCONNECT_PENDING, graceful: no effect.
//   - ACTIVE_CONNECTION_PENDING or COMPLETION_PENDING: establishment is
//     aborted, DISCONNECTED with a DISCONNECTED event.
//   - DISCONNECTED: no effect.
//   - UNCONNECTED, RESERVED, PASSIVE or TENTATIVE_CONNECTION_PENDING:
//     DAT_INVALID_STATE.
func (ep *EP) Disconnect(flags CloseFlags) error {
	const op = "dat_ep_disconnect"
	if err := ep.lock(op); err != nil {
		return err
	}
	ia := ep.ia
	if flags != CloseAbrupt && flags != CloseGraceful {
		ia.mu.Unlock()
		return newError(op, InvalidParameter, Arg(2), "close flags %#x", flags)
	}
	qp := ep.qp
	switch ep.state {
	case EPDisconnected:
		ia.mu.Unlock()
		return nil
	case EPDisconnectPending:
		if flags == CloseGraceful {
			ia.mu.Unlock()
			return nil
		}
	case EPConnected:
		if flags == CloseGraceful {
			a := &attempt{cancel: func() {}}
			ep.attempt = a
			ep.setStateLocked(EPDisconnectPending)
			ia.bg.Add(1)
			ia.mu.Unlock()
			go func() {
				defer ia.bg.Done()
				qp.Disconnect(true)
				ep.disconnected(a, nil)
			}()
			return nil
		}
	case EPActiveConnectionPending, EPCompletionPending:
	default:
		err := ep.stateError(op)
		ia.mu.Unlock()
		return err
	}
	// Abrupt, or aborting establishment.
	if ep.attempt != nil {
		ep.attempt.cancel()
		ep.attempt = nil
	}
	ep.setStateLocked(EPDisconnected)
	evd := ep.connEVD
	ia.mu.Unlock()
	if qp != nil {
		qp.Disconnect(false)
	}
	ep.flushQueues()
	if evd != nil {
		evd.post(Event{Number: ConnectionEventDisconnected, Conn: ConnectionData{EP: ep}})
	}
	return nil
}

// disconnected finishes a graceful disconnect started as attempt a.
func (ep *EP) disconnected(a *attempt, err error) {
	ia := ep.ia
	ia.mu.Lock()
	if ep.attempt != a || ep.state != EPDisconnectPending {
		ia.mu.Unlock()
		return
	}
	ep.attempt = nil
	ep.setStateLocked(EPDisconnected)
	evd := ep.connEVD
	ia.mu.Unlock()
	ep.flushQueues()
	if evd != nil {
		evd.post(Event{Number: ConnectionEventDisconnected, Conn: ConnectionData{EP: ep, Err: err}})
	}
}

// transportEnded handles the provider's report that the connection of the
// QP tagged tag ended without a local Disconnect: DISCONNECTED for an
// orderly close by the peer, BROKEN (plus DAT_ASYNC_ERROR_EP_BROKEN on the
// async EVD) for a failure. The provider is quiescent, so the EP's
// outstanding work is flushed first.
func (ep *EP) transportEnded(tag uint32, err error) {
	ia := ep.ia
	ep.evMu.Lock() // after an ESTABLISHED being posted (see evMu)
	defer ep.evMu.Unlock()
	ia.mu.Lock()
	if ep.freed || ep.tag != tag {
		ia.mu.Unlock()
		return
	}
	if a := ep.attempt; a != nil && (ep.state == EPActiveConnectionPending || ep.state == EPCompletionPending) {
		// The connection ended before its establishment was reported:
		// connectDone or acceptDone reports ESTABLISHED, then this.
		a.lost, a.lostErr = true, err
		ia.mu.Unlock()
		return
	}
	if ep.state != EPConnected && ep.state != EPDisconnectPending {
		ia.mu.Unlock()
		return
	}
	ep.attempt = nil
	ep.setStateLocked(EPDisconnected)
	evd := ep.connEVD
	ia.mu.Unlock()
	ep.flushQueues()
	num := ConnectionEventDisconnected
	if err != nil {
		num = ConnectionEventBroken
		ia.async.post(Event{Number: AsyncErrorEPBroken, Async: AsyncData{Handle: ep}})
	}
	if evd != nil {
		evd.post(Event{Number: num, Conn: ConnectionData{EP: ep, Err: err}})
	}
}
