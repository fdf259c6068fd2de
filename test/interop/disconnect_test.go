//go:build verbs && linux && cgo

package interop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// flushCookie marks the receive left posted across a disconnect.
const flushCookie = 0xf1a5

// A graceful dat_ep_disconnect from either end is an orderly close on
// both: each EP reports DISCONNECTED (not BROKEN, which would mean the
// providers disagreed about the teardown), ends DISCONNECTED, and a
// receive still posted on either side completes flushed.
func TestDisconnect(t *testing.T) {
	eachCloser(t, func(t *testing.T, a, p *side, activeCloses bool) {
		l := connect(t, a, p)
		ends := l.ends(activeCloses)
		one := newSpread(8)
		for _, e := range ends {
			in := e.side.register(t, make([]byte, one.size), dat.MemPrivLocalWrite)
			require.NoError(t, e.ep.PostRecv(one.iov(in), flushCookie, dat.CompletionDefault))
		}
		require.NoError(t, ends[0].ep.Disconnect(dat.CloseGraceful))
		for _, e := range ends {
			ev := next(t, e.side.conn, dat.ConnectionEventDisconnected)
			require.Same(t, e.ep, ev.Conn.EP, "%s's DISCONNECTED", e.side.name)
			requireState(t, e.ep, dat.EPDisconnected)
			ev = next(t, e.side.recv, dat.DTOCompletionEvent)
			require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status, "%s's posted receive", e.side.name)
			require.Equal(t, uint64(flushCookie), ev.DTO.Cookie)
		}
	})
}

// eachCloser runs fn for the active side closing and for the passive side
// closing, each in both directions with fresh IAs, so that an event left
// over from one case cannot be taken for the next one's.
func eachCloser(t *testing.T, fn func(t *testing.T, a, p *side, activeCloses bool)) {
	for _, activeCloses := range []bool{true, false} {
		name := "passive_closes"
		if activeCloses {
			name = "active_closes"
		}
		t.Run(name, func(t *testing.T) {
			bothDirections(t, func(t *testing.T, a, p *side) { fn(t, a, p, activeCloses) })
		})
	}
}

// ends returns the link's two ends, the closing one first.
func (l *link) ends(activeCloses bool) [2]end {
	if activeCloses {
		return [2]end{{l.a, l.aep}, {l.p, l.pep}}
	}
	return [2]end{{l.p, l.pep}, {l.a, l.aep}}
}

// end is one end of a link.
type end struct {
	side *side
	ep   *dat.EP
}
