//go:build verbs && linux && cgo

package interop_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// A graceful disconnect posted right behind a Write, a Read and a Send
// lets them finish first (dat_ep_disconnect: DISCONNECT_PENDING until the
// outstanding send-side DTOs are done): all three complete successfully
// at the closer, the Read with the peer's bytes, the peer receives the
// Send and the Write's data intact, and only then does the connection
// close, in order, on both sides. Whichever provider closes, the other
// must see the data before the FIN (iwarp) or rdma_disconnect (siw).
//
// The Send behind a Read is also the order kernel siw completes out of
// post order (the Send when transmitted, the Read when its Response is
// in): the verbs provider must still report the completions in post
// order, or the Send's is lost and the drain never ends (dat/verbs
// reorder.go).
func TestDisconnectDrains(t *testing.T) {
	const write, read, send = 1, 2, 3
	eachCloser(t, func(t *testing.T, a, p *side, activeCloses bool) {
		l := connect(t, a, p)
		ends := l.ends(activeCloses)
		c, o := ends[0], ends[1]
		big := newSpread(262144 + 5)
		one := newSpread(8)

		src, data := big.source(800)
		wsrc := c.side.register(t, src, dat.MemPrivLocalRead)
		buf, windowWant := big.sink(data, 801)
		window := o.side.register(t, buf, dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite)

		src, rdata := big.source(802)
		rsrc := o.side.register(t, src, dat.MemPrivRemoteRead)
		buf, sinkWant := big.sink(rdata, 803)
		sink := c.side.register(t, buf, dat.MemPrivLocalWrite)

		src, sdata := big.source(804)
		ssrc := c.side.register(t, src, dat.MemPrivLocalRead)
		buf, recvWant := big.sink(sdata, 805)
		recv := o.side.register(t, buf, dat.MemPrivLocalWrite)

		require.NoError(t, o.ep.PostRecv(big.iov(recv), send, dat.CompletionDefault))
		for _, e := range ends {
			in := e.side.register(t, make([]byte, one.size), dat.MemPrivLocalWrite)
			require.NoError(t, e.ep.PostRecv(one.iov(in), flushCookie, dat.CompletionDefault))
		}
		n := len(data)
		require.NoError(t, c.ep.PostRDMAWrite(big.iov(wsrc), write, window.remote(big.offs[0], n), dat.CompletionDefault))
		require.NoError(t, c.ep.PostRDMARead(big.iov(sink), read, rsrc.remote(big.offs[0], n), dat.CompletionDefault))
		require.NoError(t, c.ep.PostSend(big.iov(ssrc), send, dat.CompletionDefault))
		require.NoError(t, c.ep.Disconnect(dat.CloseGraceful))

		done(t, c.side.req, write, dat.DTORDMAWrite)
		done(t, c.side.req, read, dat.DTORDMARead)
		done(t, c.side.req, send, dat.DTOSend)
		requireBytes(t, "the Read's sink at "+c.side.name, sinkWant, sink.buf)
		got := done(t, o.side.recv, send, dat.DTOReceive)
		require.Equal(t, uint32(n), got.Length)
		requireBytes(t, "the Send's receive at "+o.side.name, recvWant, recv.buf)
		requireBytes(t, "the Write's window at "+o.side.name, windowWant, window.buf)
		for _, e := range ends {
			ev := next(t, e.side.recv, dat.DTOCompletionEvent)
			require.Equal(t, dat.DTOErrFlushed, ev.DTO.Status, "%s's spare receive", e.side.name)
			require.Equal(t, uint64(flushCookie), ev.DTO.Cookie)
			ev = next(t, e.side.conn, dat.ConnectionEventDisconnected)
			require.Same(t, e.ep, ev.Conn.EP, "%s's DISCONNECTED", e.side.name)
		}
	})
}
