package rdmanet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Conn life cycle, as a table of allowed moves (lifecycleMoves):
//
//	handshake → open | failed | closing
//	open      → peer-gone | closing
//	peer-gone → closing
//	failed    → closing
//	closing   → closed
//	closed    → (none)
func TestLifecycleTable(t *testing.T) {
	want := map[lifecycle][]lifecycle{
		lcHandshake: {lcOpen, lcFailed, lcClosing},
		lcOpen:      {lcPeerGone, lcClosing},
		lcPeerGone:  {lcClosing},
		lcFailed:    {lcClosing},
		lcClosing:   {lcClosed},
		lcClosed:    nil,
	}
	for from := lcHandshake; from <= lcClosed; from++ {
		for to := lcHandshake; to <= lcClosed; to++ {
			allowed := false
			for _, s := range want[from] {
				allowed = allowed || s == to
			}
			require.Equal(t, allowed, canMove(from, to), "%v → %v", from, to)
			c := &Conn{lc: from}
			require.Equal(t, allowed, c.moveLocked(to), "%v → %v", from, to)
			if allowed {
				require.Equal(t, to, c.lc)
			} else {
				require.Equal(t, from, c.lc, "a refused move leaves the state alone")
			}
		}
	}
}

// A Conn's state follows its life: open once dialed and accepted,
// peer-gone on the side whose peer disconnected, closed after Close.
func TestLifecycleOfAConn(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		state := func(c *Conn) lifecycle {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.lc
		}
		require.Equal(t, lcOpen, state(c1))
		require.Equal(t, lcOpen, state(c2))
		require.NoError(t, c1.Close())
		require.Equal(t, lcClosed, state(c1))
		_, err := c2.Read(make([]byte, 1)) // the FIN: EOF
		require.Error(t, err)
		// The disconnect follows the FIN; nobody reads c2 any more, so
		// apply its events here.
		require.Eventually(t, func() bool { c2.applyQueued(); return state(c2) == lcPeerGone },
			10*time.Second, time.Millisecond)
		require.NoError(t, c2.Close())
		require.Equal(t, lcClosed, state(c2))
	})
}
