package rdmanet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// immPipe connects a pair on ia with the given NoWriteImm settings.
func immPipe(t *testing.T, ia string, dialerNo, listenerNo bool) (c1, c2 *Conn) {
	t.Helper()
	c1, c2, err := connect(ListenConfig{IA: ia, NoWriteImm: listenerNo},
		Dialer{IA: ia, NoWriteImm: dialerNo, NoDup: true, Timeout: 10 * time.Second}, ia)
	require.NoError(t, err)
	t.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

// TestWriteImm: where the transport has RDMA Write with Immediate (rxe in
// the VM suite), data announcements ride the Writes both ways, through
// ring resizes, and the streams arrive intact; where it has not (iWARP),
// none is attempted.
func TestWriteImm(t *testing.T) {
	for _, ia := range providers(t) {
		t.Run(ia, func(t *testing.T) {
			c1, c2 := immPipe(t, ia, false, false)
			stream(t, c1, c2, 16<<20, 1<<20)
			stream(t, c2, c1, 16<<20, 100_000)
			s1, s2 := c1.Stats(), c2.Stats()
			for _, s := range []Stats{s1, s2} {
				if !c1.ia.writeImm {
					require.Zero(t, s.ImmWrites, "immediate announcements on a transport without them")
					continue
				}
				require.NotZero(t, s.ImmWrites, "no announcement rode a Write")
				require.LessOrEqual(t, s.ImmWrites, s.ControlSent)
			}
			if c1.ia.writeImm {
				require.NotZero(t, s1.Resizes+s2.Resizes, "no ring was resized: the test does not cover switches")
			}
		})
	}
}

// TestWriteImmPeerWithout: a peer that does not announce the capability
// (NoWriteImm, or a peer of the previous revision) gets only control
// Sends, whichever side it is, and both directions work.
func TestWriteImmPeerWithout(t *testing.T) {
	for _, ia := range providers(t) {
		for _, side := range []string{"dialer", "listener"} {
			t.Run(ia+"/"+side, func(t *testing.T) {
				c1, c2 := immPipe(t, ia, side == "dialer", side == "listener")
				stream(t, c1, c2, 4<<20, 200_000)
				stream(t, c2, c1, 4<<20, 200_000)
				require.Zero(t, c1.Stats().ImmWrites)
				require.Zero(t, c2.Stats().ImmWrites)
				require.NotZero(t, c1.Stats().ControlSent)
			})
		}
	}
}

// TestWriteImmHostile: a peer whose immediate announcements break the
// rules is cut off with a protocol violation naming the rule. It needs a
// transport with RDMA Write with Immediate (rxe0 in the VM suite).
func TestWriteImmHostile(t *testing.T) {
	defer func() { testImm.Store(nil); testImmForce.Store(nil) }()
	value := func(m wire.Imm) uint32 {
		v, err := wire.AppendImm(m)
		require.NoError(t, err)
		return v
	}
	for _, ia := range providers(t) {
		cases := []struct {
			name, want string
			v          uint32
		}{
			{"unknown kind", "unknown kind", 0},
			{"advance beyond the ring", "producer position", value(wire.Imm{Advance: wire.MaxImmAdvance})},
			{"grant beyond the receives", "grant of 255", value(wire.Imm{Grant: 255, Advance: 1000})},
		}
		for _, tc := range cases {
			t.Run(ia+"/"+tc.name, func(t *testing.T) {
				c1, c2 := immPipe(t, ia, false, false)
				if !c1.ia.writeImm {
					t.Skipf("%s has no RDMA Write with Immediate", ia)
				}
				setHook(&testImm, func(from *Conn, v *uint32) {
					if from == c1 {
						*v = tc.v
					}
				})
				writeFew(t, c1)
				wantViolation(t, c2, tc.want)
				testImm.Store(nil)
			})
		}
		t.Run(ia+"/not negotiated", func(t *testing.T) {
			c1, c2 := immPipe(t, ia, false, true)
			if !c1.ia.writeImm {
				t.Skipf("%s has no RDMA Write with Immediate", ia)
			}
			setHook(&testImmForce, func(from *Conn) bool { return from == c1 })
			writeFew(t, c1)
			wantViolation(t, c2, "did not negotiate")
			testImmForce.Store(nil)
		})
	}
}

// writeFew writes three chunks above the inline size, so each goes as an
// RDMA Write (the first may still be announced by the dialer's first
// control Send), and within the peer's initial ring, so no Write waits for
// a reader.
func writeFew(t *testing.T, c *Conn) {
	t.Helper()
	for range 3 {
		if _, err := c.Write(make([]byte, 1000)); err != nil {
			return // the peer cut us off already
		}
	}
}
