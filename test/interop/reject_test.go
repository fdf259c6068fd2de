//go:build verbs && linux && cgo

package interop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// A consumer reject travels as an MPA Reply with R set, carrying the
// reject's private data, and both providers send and receive it: the
// active side sees PEER_REJECTED with the data intact, at the rejecting
// provider's maximum. One byte more is refused synchronously and leaves
// the CR pending.
func TestRejectPrivateData(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		r := connectTo(t, a, p, listen(t, p), []byte("please"))
		requireCode(t, r.cr.Reject(privateData(p.maxPD+1, 40)), dat.InvalidParameter)
		pd := privateData(p.maxPD, 41)
		require.NoError(t, r.cr.Reject(pd))
		ev := next(t, a.conn, dat.ConnectionEventPeerRejected)
		require.Same(t, r.aep, ev.Conn.EP)
		requirePD(t, p.name+" reject private data in "+a.name+"'s PEER_REJECTED", pd, ev.Conn.PrivateData)
		requireState(t, r.aep, dat.EPDisconnected)
	})
}

// A reject without private data. Both providers still send an MPA Reply
// with R set (siw_reject does so whatever the length), so the iwarp
// provider as initiator reports PEER_REJECTED with no data. But the kernel
// reports an MPA reject to rdma_cm exactly as it reports a reset
// (REJECTED, -ECONNRESET), and only data tells them apart, so the verbs
// provider can only report an empty reject as NON_PEER_REJECTED
// (documented in dat/verbs). This pins both behaviours down.
func TestRejectEmpty(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		r := connectTo(t, a, p, listen(t, p), nil)
		require.NoError(t, r.cr.Reject(nil))
		want := dat.ConnectionEventPeerRejected
		if a.provider == "verbs" {
			want = dat.ConnectionEventNonPeerRejected
		}
		ev := next(t, a.conn, want)
		require.Same(t, r.aep, ev.Conn.EP)
		require.Empty(t, ev.Conn.PrivateData)
		requireState(t, r.aep, dat.EPDisconnected)
	})
}
