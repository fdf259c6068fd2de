//go:build verbs && linux && cgo

package interop_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// sendCases are the Send/Recv messages: the segment lengths of the Send
// and of the receive it lands in. Sizes run from one byte to several
// FPDUs: on the guest's loopback path both providers size FPDUs to the
// TCP MSS (about 64 KiB), so 64 KiB already takes two and 256 KiB five.
var sendCases = []struct {
	name       string
	send, recv []int
}{
	{"1B", []int{1}, []int{1}},
	{"1B_into_2_segments", []int{1}, []int{3, 64}},
	{"4100B_3_into_4_segments", []int{1, 1000, 3099}, []int{17, 2048, 2000, 100}},
	{"64KiB", []int{65536}, []int{65536}},
	{"64KiB_2_into_3_segments", []int{32768, 32768}, []int{1, 65534, 1}},
	{"256KiB+3_2_into_2_segments", []int{3, 262144}, []int{131072, 131115}},
}

// Send/Recv both ways over each connection: every message lands in its
// receive's segments in order, the completion reports its length, and no
// byte outside it changes (gaps between segments, the unused tail of a
// larger receive).
func TestSendRecv(t *testing.T) {
	bothDirections(t, func(t *testing.T, a, p *side) {
		l := connect(t, a, p)
		t.Run(a.name+"_sends", func(t *testing.T) { sendAll(t, a, p, l.aep, l.pep, 100) })
		t.Run(p.name+"_sends", func(t *testing.T) { sendAll(t, p, a, l.pep, l.aep, 200) })
	})
}

// sendAll posts a receive per case on the receiver, then every Send, and
// checks the completions and the received bytes.
func sendAll(t *testing.T, from, to *side, fromEP, toEP *dat.EP, seed uint32) {
	type msg struct {
		src, dst *region
		send     spread
		data     []byte
		want     []byte
	}
	msgs := make([]msg, len(sendCases))
	for i, c := range sendCases {
		m := &msgs[i]
		m.send = newSpread(c.send...)
		src, data := m.send.source(seed + uint32(i))
		m.src, m.data = from.register(t, src, dat.MemPrivLocalRead), data
		recv := newSpread(c.recv...)
		require.GreaterOrEqual(t, recv.total(), len(data), "case %s", c.name)
		dst, want := recv.sink(data, seed+uint32(i)+50)
		m.dst, m.want = to.register(t, dst, dat.MemPrivLocalWrite), want
		require.NoError(t, toEP.PostRecv(recv.iov(m.dst), uint64(i), dat.CompletionDefault))
	}
	for i := range msgs {
		require.NoError(t, fromEP.PostSend(msgs[i].send.iov(msgs[i].src), uint64(i), dat.CompletionDefault))
	}
	for i := range msgs {
		done(t, from.req, uint64(i), dat.DTOSend)
	}
	for i, m := range msgs {
		c := done(t, to.recv, uint64(i), dat.DTOReceive)
		require.Equal(t, uint32(len(m.data)), c.Length, "case %s", sendCases[i].name)
		requireBytes(t, fmt.Sprintf("%s: %s's receive", sendCases[i].name, to.name), m.want, m.dst.buf)
	}
}
