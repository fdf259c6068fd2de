//go:build verbs && linux && cgo

package interop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// The private-data limits both providers report for iWARP: siw's
// MPA_MAX_PRIVDATA of 256 bytes
// counts the 4-byte MPA v2 IRD/ORD block, leaving 252 for the consumer,
// which the iwarp provider offers. The verbs provider offers 251, because
// kernel siw adds the block to a u8 length when it sends a Request or
// Reply, so 252 consumer bytes would go out as PD_Length 0.
const (
	maxPDIWARP = 252
	maxPDSiw   = 251
)

// The connect's private data arrives intact in the passive side's CR and
// the accept's in the active side's ESTABLISHED event, at the largest size
// each provider accepts; one byte more is refused synchronously with
// DAT_INVALID_PARAMETER, nothing of it reaches the peer, and the EP or CR
// stays usable.
func TestPrivateDataMaximum(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		for _, s := range []*side{a, p} {
			want := maxPDIWARP
			if s.provider == "verbs" {
				want = maxPDSiw
			}
			require.Equal(t, want, s.maxPD, "%s's MaxPrivateDataSize", s.name)
		}
		psp := listen(t, p)

		over := a.newEP(t)
		requireCode(t, over.Connect(p.addr, psp.Qual(), dat.TimeoutOf(eventWait), privateData(a.maxPD+1, 10),
			dat.QoSBestEffort, dat.ConnectDefault), dat.InvalidParameter)
		requireState(t, over, dat.EPUnconnected)

		// The next request on the PSP is this one: the refused connect
		// sent nothing, so no truncated request can arrive before it.
		r := connectTo(t, a, p, psp, privateData(a.maxPD, 11))
		requireCode(t, r.cr.Accept(p.newEP(t), privateData(p.maxPD+1, 12)), dat.InvalidParameter)
		r.accept(t, privateData(p.maxPD, 13))
	})
}

// Private data of every size class arrives exactly, including none at
// all: the MPA frame's PD_Length says where it ends.
func TestPrivateDataSizes(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		psp := listen(t, p)
		for _, n := range []int{0, 1, 100} {
			var cpd, apd []byte
			if n > 0 {
				cpd, apd = privateData(n, uint32(20+n)), privateData(n, uint32(30+n))
			}
			connectTo(t, a, p, psp, cpd).accept(t, apd)
		}
	})
}
