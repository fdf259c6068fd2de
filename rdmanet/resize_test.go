package rdmanet

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/rdmanet/internal/wire"
)

// stream writes n pseudo-random bytes from c1 to c2 in writes of size w and
// checks that c2 reads exactly them.
func stream(t *testing.T, c1, c2 *Conn, n, w int) {
	t.Helper()
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), uint64(w)))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	done := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		io.CopyN(h, c2, int64(n))
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		done <- sum
	}()
	for off := 0; off < n; off += w {
		_, err := c1.Write(src[off:min(off+w, n)])
		require.NoError(t, err)
	}
	require.Equal(t, sha256.Sum256(src), <-done, "the stream arrived changed")
}

// TestRingGrows: a bulk stream between adaptive Conns grows the reader's
// ring and the writer's staging buffer, and not a byte is lost or
// reordered across the switches.
func TestRingGrows(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	require.Equal(t, DefaultBufferSize, c2.Stats().Params.RecvRing)
	stream(t, c1, c2, 64<<20, 1<<20)
	s1, s2 := c1.Stats(), c2.Stats()
	t.Logf("writer: send ring %d, staging %d; reader: ring %d after %d resizes", s1.Params.SendRing, uint64(c1.Stats().Params.Staging), s2.Params.RecvRing, s2.Resizes)
	require.Greater(t, s2.Params.RecvRing, DefaultBufferSize, "the reader's ring grew")
	require.LessOrEqual(t, s2.Params.RecvRing, MaxBufferSize)
	require.Equal(t, s2.Params.RecvRing, s1.Params.SendRing, "the writer adopted it")
	require.Positive(t, s2.Resizes)
	c2.mu.Lock()
	require.Nil(t, c2.recv.prev, "the old ring was freed")
	c2.mu.Unlock()
}

// TestFixedBufferDoesNotGrow: a BufferSize fixes the ring.
func TestFixedBufferDoesNotGrow(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 64<<10)
	defer stop()
	stream(t, c1, c2, 16<<20, 1<<20)
	require.Equal(t, 64<<10, c2.Stats().Params.RecvRing)
	require.Equal(t, 64<<10, c1.Stats().Params.SendRing)
	require.Zero(t, c2.Stats().Resizes)
}

// TestRingResizeLegacyPeer: a peer of the revision before ring resizing
// (no FlagRingResize in its Hello, no offers of its own) still connects,
// in either role, and the stream works both ways on fixed rings.
func TestRingResizeLegacyPeer(t *testing.T) {
	for _, legacy := range []string{"dialer", "listener"} {
		t.Run("legacy "+legacy, func(t *testing.T) {
			setHook(&testLegacy, func(c *Conn) bool { return (c.listener == nil) == (legacy == "dialer") })
			defer func() { testLegacy.Store(nil) }()
			c1, c2, stop := pipe(t, "iwarp", 0)
			defer stop()
			stream(t, c1, c2, 16<<20, 1<<20)
			stream(t, c2, c1, 16<<20, 1<<20)
			for _, c := range []*Conn{c1, c2} {
				s := c.Stats()
				require.Zero(t, s.Resizes)
				require.Equal(t, DefaultBufferSize, s.Params.RecvRing)
				require.Equal(t, DefaultBufferSize, s.Params.SendRing)
			}
		})
	}
}

// hostileOnce makes c's next control message m's edit of it.
func hostileOnce(c *Conn, edit func(m *wire.Control)) {
	var once sync.Once
	setHook(&testControl, func(from *Conn, m *wire.Control) {
		if from == c {
			once.Do(func() { edit(m) })
		}
	})
}

// wantViolation reads from c until it fails, and wants a protocol
// violation naming what.
func wantViolation(t *testing.T, c *Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	require.Error(t, err)
	require.ErrorContains(t, err, "protocol violation")
	require.ErrorContains(t, err, what)
}

// TestRingResizeHostile: a peer that breaks the resizing rules is cut off
// with a protocol violation that says which rule.
func TestRingResizeHostile(t *testing.T) {
	defer func() { testControl.Store(nil) }()
	send := func(t *testing.T, c *Conn) {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
	}
	cases := []struct {
		name, want string
		edit       func(m *wire.Control)
	}{
		{"switch without an offer", "ring switch without an offer", func(m *wire.Control) {
			m.Flags |= wire.FlagSwitch
			m.Switch = m.Prod - uint64(len(m.Inline))
		}},
		{"offer too small", "ring offer of 100 bytes", func(m *wire.Control) {
			m.Flags |= wire.FlagOffer
			m.Offer = wire.Offer{Addr: 1 << 20, Key: 1, Size: 100}
		}},
		{"offer too large", "ring offer of", func(m *wire.Control) {
			m.Flags |= wire.FlagOffer
			m.Offer = wire.Offer{Addr: 1 << 20, Key: 1, Size: 1<<30 + 1}
		}},
		{"offer wraps", "wraps the address space", func(m *wire.Control) {
			m.Flags |= wire.FlagOffer
			m.Offer = wire.Offer{Addr: ^uint64(0) - 4095, Key: 1, Size: 1 << 20}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2, stop := pipe(t, "iwarp", 0)
			defer stop()
			hostileOnce(c1, tc.edit)
			send(t, c1)
			wantViolation(t, c2, tc.want)
		})
	}

	t.Run("second offer before the first is adopted", func(t *testing.T) {
		c1, c2, stop := pipe(t, "iwarp", 0)
		defer stop()
		// While we hold c2's writeMu, c2 cannot adopt an offer.
		c2.writeMu.Lock()
		defer c2.writeMu.Unlock()
		offer := func(m *wire.Control) {
			m.Flags |= wire.FlagOffer
			m.Offer = wire.Offer{Addr: 1 << 20, Key: 1, Size: 1 << 20}
		}
		hostileOnce(c1, offer)
		send(t, c1)
		require.Eventually(t, func() bool {
			c2.applyQueued()
			c2.mu.Lock()
			defer c2.mu.Unlock()
			return c2.hasOffer
		}, 5*time.Second, time.Millisecond)
		hostileOnce(c1, offer)
		send(t, c1)
		wantViolation(t, c2, "ring offer while the previous one is not adopted")
	})

	// A switch at a position the old ring cannot hold, or one that moves
	// backwards: c2 offers c1 a ring for real, and c1 lies about where
	// it switched.
	for _, tc := range []struct {
		name string
		at   func(p uint64) uint64
	}{
		{"switch beyond what was written", func(p uint64) uint64 { return p + 1<<20 }},
		{"switch backwards", func(p uint64) uint64 { return p - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2, stop := pipe(t, "iwarp", 0)
			defer stop()
			stream(t, c1, c2, 1000, 1000)
			hostileOnce(c1, func(m *wire.Control) {
				if m.HasSwitch() {
					m.Switch = tc.at(m.Switch)
				}
			})
			c2.mu.Lock()
			c2.offering = true
			c2.mu.Unlock()
			c2.offerRing(1 << 20)
			// c1 adopts the offer when it next polls.
			go func() {
				buf := make([]byte, 1)
				c1.SetReadDeadline(time.Now().Add(10 * time.Second))
				c1.Read(buf)
			}()
			wantViolation(t, c2, "ring switch at position")
		})
	}
}

// TestOfferAdoptedByIdleWriter: a ring offer that reaches the writer
// while its writeMu is held (a Write about to return, or the janitor's
// shrinkStage) is adopted by the janitor, although the writer never
// writes or reads again; before, it stayed pending and the reader's
// grown ring with it (seen once in the guest as TestRingShrinksWhenIdle
// timing out).
func TestOfferAdoptedByIdleWriter(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	stream(t, c1, c2, 32<<20, 32<<10)
	require.Greater(t, c2.Stats().Params.RecvRing, DefaultBufferSize)

	c2.mu.Lock()
	require.True(t, c2.canOfferLocked())
	c2.offering = true
	c2.mu.Unlock()
	c2.offerRing(uint64(DefaultBufferSize))

	hasOffer := func() bool {
		c1.mu.Lock()
		defer c1.mu.Unlock()
		return c1.hasOffer
	}
	c1.writeMu.Lock()
	for limit := time.Now().Add(10 * time.Second); !hasOffer(); time.Sleep(time.Millisecond) {
		require.False(t, time.Now().After(limit), "the offer did not arrive")
		c1.pollQueued()
	}
	c1.writeMu.Unlock()
	// Nothing drives c1 from here on but the janitor.
	for limit := time.Now().Add(10 * time.Second); hasOffer(); time.Sleep(10 * time.Millisecond) {
		require.False(t, time.Now().After(limit), "the offer is still pending after 10 s")
	}
	require.Equal(t, DefaultBufferSize, c1.Stats().Params.SendRing)
	// The next byte reaches c2 through the ring it offered.
	_, err := c1.Write([]byte{7})
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = io.ReadFull(c2, b)
	require.NoError(t, err)
	require.Equal(t, byte(7), b[0])
	require.Equal(t, DefaultBufferSize, c2.Stats().Params.RecvRing)
	stream(t, c1, c2, 4<<20, 100<<10)
	stream(t, c2, c1, 4<<20, 100<<10)
}

// TestRingShrinksWhenIdle: after a bulk stream grew them, an idle
// connection's ring and staging buffer go back to DefaultBufferSize once
// both ends sit in Read, its memory with them, and the stream still works.
func TestRingShrinksWhenIdle(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	base := c1.mappedBytes()
	stream(t, c1, c2, 64<<20, 32<<10) // staged Writes: staging grows too
	require.Greater(t, c2.Stats().Params.RecvRing, DefaultBufferSize)
	require.Greater(t, uint64(c1.Stats().Params.Staging), uint64(DefaultBufferSize))
	require.Greater(t, c1.mappedBytes()+c2.mappedBytes(), 2*base)

	// Both ends idle in Read, as a server and a client waiting for a
	// request or a response do.
	var wg sync.WaitGroup
	for _, c := range []*Conn{c1, c2} {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Read(make([]byte, 1))
		}()
	}
	state := func() string {
		r2, s1, m1, m2 := c2.Stats().Params.RecvRing, c1.Stats().Params.SendRing, c1.mappedBytes(), c2.mappedBytes()
		st1 := c1.Stats().Params.Staging
		c1.mu.Lock()
		defer c1.mu.Unlock()
		c2.mu.Lock()
		defer c2.mu.Unlock()
		return fmt.Sprintf("c2 ring %d (offered %v), c1 send ring %d (offer pending %v), c1 staging %d (%d in flight), mapped %d and %d (base %d)",
			r2, c2.offer != nil, s1, c1.hasOffer, st1, c1.stProd-c1.stCons, m1, m2, base)
	}
	for limit := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c2.Stats().Params.RecvRing == DefaultBufferSize && c1.Stats().Params.SendRing == DefaultBufferSize &&
			c1.Stats().Params.Staging == DefaultBufferSize && c1.mappedBytes() == base && c2.mappedBytes() == base {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("not shrunk after 15 s: %s", state())
		}
	}
	for _, c := range []*Conn{c1, c2} {
		c.SetReadDeadline(time.Now())
	}
	wg.Wait()
	for _, c := range []*Conn{c1, c2} {
		c.SetReadDeadline(time.Time{})
	}
	stream(t, c1, c2, 8<<20, 100<<10)
	stream(t, c2, c1, 8<<20, 100<<10)
}
