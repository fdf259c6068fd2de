package dat_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Hostile peers at the DAT level. Whatever bytes arrive, nothing panics or
// hangs, and "the connection is refused cleanly, with the right DAT event"
// (active side: a malformed Reply, a reset or a close before the Reply is "any
// other failure" ⇒ NON_PEER_REJECTED; silence ⇒ TIMED_OUT or
// UNREACHABLE). On the passive side a bad request never becomes a
// DAT_CONNECTION_REQUEST_EVENT and the PSP keeps serving.

const (
	reqKey = "MPA ID Req Frame"
	repKey = "MPA ID Rep Frame"
)

// mpaFrame builds an MPA Request/Reply header (RFC 5044 §7.1) by hand —
// key, flags, revision, PD_Length — followed by body, which need not match
// PD_Length.
func mpaFrame(key string, flags, rev byte, pdLen uint16, body []byte) []byte {
	b := append([]byte(key), flags, rev)
	b = binary.BigEndian.AppendUint16(b, pdLen)
	return append(b, body...)
}

// v2 is an MPA v2 IRD/ORD block with both depths 0 and no P2P.
var v2 = []byte{0, 0, 0, 0}

// mpaRequest builds a well-formed MPA v2 Request carrying consumer data.
func mpaRequest(consumer []byte) []byte {
	return mpaFrame(reqKey, 0x10, 2, uint16(4+len(consumer)), append(append([]byte{}, v2...), consumer...))
}

// TestHostileResponder: the active side against raw peers that answer the
// MPA Request badly.
func TestHostileResponder(t *testing.T) {
	garbage := bytes.Repeat([]byte{0xAB}, 64)
	goodReply := mpaReply(false, []byte("ok"))
	cases := []struct {
		rule string
		// reply is written after the Request was read, then the
		// connection is closed. Nil: close without reading anything.
		reply []byte
	}{
		{"Reply with a wrong key (the Request's)", mpaFrame(reqKey, 0x10, 2, 4, v2)},
		{"Reply with a key of garbage", mpaFrame("MPA ID Rex Frame", 0x10, 2, 4, v2)},
		{"Reply with revision 3", mpaFrame(repKey, 0x10, 3, 4, v2)},
		{"Reply with revision 1 to a revision 2 Request", mpaFrame(repKey, 0x00, 1, 0, nil)},
		{"Reply whose PD_Length says 0xFFFF", mpaFrame(repKey, 0x10, 2, 0xFFFF, append(v2, garbage...))},
		{"Reply whose PD_Length says 257", mpaFrame(repKey, 0x10, 2, 257, append(v2, garbage...))},
		{"Reply with E but no room for the IRD/ORD block", mpaFrame(repKey, 0x10, 2, 2, []byte{0, 0})},
		{"Reply asking for markers", mpaFrame(repKey, 0x10|0x80, 2, 4, v2)},
		{"truncated Reply header, then close", goodReply[:11]},
		{"Reply cut short inside its private data, then close", mpaFrame(repKey, 0x10, 2, 4+100, append(v2, garbage[:10]...))},
		{"garbage, then close", garbage},
		{"a single byte, then close", []byte{0}},
		{"accepts and closes at once", nil},
	}
	c := newSide(t, "lo")
	for _, tc := range cases {
		t.Run(tc.rule+": NON_PEER_REJECTED", func(t *testing.T) {
			done := make(chan struct{})
			peer := newRawPeer(t, func(_ int, conn net.Conn) {
				defer close(done)
				if tc.reply == nil {
					conn.Close()
					return
				}
				if _, _, _, err := readMPARequest(conn); err != nil {
					return
				}
				conn.Write(tc.reply)
				conn.Close()
			})
			ep := c.ep(t)
			require.NoError(t, connectTo(ep, peer.qual(), dat.TimeoutOf(eventWait), nil))
			ev := waitFor(t, c.evd, dat.ConnectionEventNonPeerRejected)
			require.Same(t, ep, ev.Conn.EP)
			require.Error(t, ev.Conn.Err)
			require.Equal(t, dat.EPDisconnected, state(t, ep))
			select {
			case <-done:
			case <-time.After(eventWait):
				t.Fatal("the peer's handler did not finish")
			}
			// The EP is reusable after the refusal.
			require.NoError(t, ep.Reset())
			require.Equal(t, dat.EPUnconnected, state(t, ep))
		})
	}
	t.Run("a peer that sends nothing, consumer timeout: TIMED_OUT", func(t *testing.T) {
		peer := silentPeer(t)
		ep := c.ep(t)
		require.NoError(t, connectTo(ep, peer.qual(), dat.TimeoutOf(50*time.Millisecond), nil))
		waitFor(t, c.evd, dat.ConnectionEventTimedOut)
		require.Equal(t, dat.EPDisconnected, state(t, ep))
	})
	t.Run("a peer that sends nothing, lo-fast without a consumer timeout: UNREACHABLE", func(t *testing.T) {
		fast := newSide(t, "lo-fast")
		peer := newRawPeer(t, func(_ int, conn net.Conn) { holdOpen(conn) }) // does not even read
		ep := fast.ep(t)
		require.NoError(t, connectTo(ep, peer.qual(), dat.TimeoutInfinite, nil))
		waitFor(t, fast.evd, dat.ConnectionEventUnreachable)
		require.Equal(t, dat.EPDisconnected, state(t, ep))
	})
	_, err := c.ia.AsyncEVD().Dequeue()
	requireCode(t, err, dat.QueueEmpty, 0)
}

// TestHostileInitiator: raw clients that send a bad MPA Request, or
// nothing, to a PSP produce no connection request event; afterwards a
// normal DAT connect to the same PSP works. The server IA is lo-fast (1 s
// request timeout) so the silent client is dropped quickly.
func TestHostileInitiator(t *testing.T) {
	s, c := newMarkedSide(t, "lo-fast"), newSide(t, "lo")
	psp := s.psp(t)
	addr := psp.Addr().(*net.TCPAddr)
	dst := net.JoinHostPort(loopback.String(), strconv.Itoa(addr.Port))
	garbage := bytes.Repeat([]byte{0x5A}, 64)

	cases := []struct {
		rule      string
		send      []byte
		closeSend bool // half-close after sending, so the server sees EOF
		// rejected: the server answers with an MPA reject Reply (siw's
		// behaviour for requests it never supports) before closing.
		rejected bool
	}{
		{"garbage", garbage, false, false},
		{"a wrong key (the Reply's)", mpaFrame(repKey, 0x10, 2, 4, v2), false, false},
		{"revision 3", mpaFrame(reqKey, 0x10, 3, 4, v2), false, false},
		{"PD_Length 0xFFFF", mpaFrame(reqKey, 0x10, 2, 0xFFFF, append(v2, garbage...)), false, false},
		{"PD_Length 257", mpaFrame(reqKey, 0x10, 2, 257, append(v2, garbage...)), false, false},
		{"a truncated header", mpaRequest(nil)[:10], true, false},
		{"a Request cut short inside its private data", mpaFrame(reqKey, 0x10, 2, 4+50, append(v2, garbage[:5]...)), true, false},
		{"an empty stream", nil, true, false},
		{"nothing at all (silence until the request timeout)", nil, false, false},
		{"E without room for the IRD/ORD block", mpaFrame(reqKey, 0x10, 2, 2, []byte{0, 0}), false, true},
		{"markers", mpaFrame(reqKey, 0x10|0x80, 2, 4, v2), false, true},
	}
	for _, tc := range cases {
		t.Run(tc.rule+": no request event, the PSP still serves", func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", dst, eventWait)
			require.NoError(t, err)
			defer conn.Close()
			if len(tc.send) > 0 {
				_, err = conn.Write(tc.send)
				require.NoError(t, err)
			}
			if tc.closeSend {
				require.NoError(t, conn.(*net.TCPConn).CloseWrite())
			}
			// The server drops the connection: reading ends (EOF or reset)
			// within the bound.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(eventWait)))
			got, rerr := io.ReadAll(conn)
			require.False(t, errors.Is(rerr, os.ErrDeadlineExceeded), "the server never dropped the connection")
			if tc.rejected {
				require.GreaterOrEqual(t, len(got), 20, "a reject Reply")
				require.Equal(t, repKey, string(got[:16]))
				require.NotZero(t, got[16]&0x20, "R is set")
			} else {
				require.Empty(t, got, "no Reply to a malformed Request")
			}

			// A proper request is the next (and only) thing the EVD sees.
			pd := []byte("after: " + tc.rule)
			if len(pd) > 200 {
				pd = pd[:200]
			}
			ep := c.ep(t)
			require.NoError(t, connectTo(ep, psp.Qual(), dat.TimeoutOf(eventWait), pd))
			req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			crp, err := req.CR.CR.Query()
			require.NoError(t, err)
			require.Equal(t, pd, crp.PrivateData, "the first request event is the proper one")
			require.NoError(t, req.CR.CR.Reject(nil))
			waitFor(t, c.evd, dat.ConnectionEventPeerRejected)
			requireNothingQueued(t, s.evd)
		})
	}
	t.Run("a raw initiator that closes right behind the Reply: ESTABLISHED, then DISCONNECTED", func(t *testing.T) {
		for i := 0; i < 10; i++ {
			conn, err := net.DialTimeout("tcp", dst, eventWait)
			require.NoError(t, err)
			_, err = conn.Write(mpaRequest([]byte("hit and run")))
			require.NoError(t, err)
			req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			sep := s.ep(t)
			require.NoError(t, req.CR.CR.Accept(sep, nil))
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(eventWait)))
			var h [24]byte
			_, err = io.ReadFull(conn, h[:])
			require.NoError(t, err)
			require.Equal(t, repKey, string(h[:16]))
			conn.Close()
			ev, _, err := s.evd.Wait(dat.TimeoutOf(eventWait), 1)
			require.NoError(t, err)
			if ev.Number == dat.ConnectionEventAcceptCompletionErr {
				require.Equal(t, dat.EPDisconnected, state(t, sep))
				continue
			}
			require.Equal(t, dat.ConnectionEventEstablished, ev.Number)
			ev, _, err = s.evd.Wait(dat.TimeoutOf(eventWait), 1)
			require.NoError(t, err)
			require.Contains(t, []dat.EventNumber{dat.ConnectionEventDisconnected, dat.ConnectionEventBroken}, ev.Number, "iteration %d", i)
			require.Same(t, sep, ev.Conn.EP)
			require.Equal(t, dat.EPDisconnected, state(t, sep))
			require.NoError(t, sep.Free())
		}
	})
	for {
		ev, err := s.ia.AsyncEVD().Dequeue()
		if err != nil {
			requireCode(t, err, dat.QueueEmpty, 0)
			break
		}
		// A broken connection above may report EP_BROKEN; nothing else.
		require.Equal(t, dat.AsyncErrorEPBroken, ev.Number)
	}
}
