package rdmanet

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedReceivesModel runs the shared receive queue's accounting
// (supply, slotsFor) with the credit rules (credits) of many connections
// that come and go, under random scheduling, and checks ctrlpool.go's
// promise: a message a peer sends within its credits never finds the SRQ
// empty (on iWARP that would end an innocent connection). The steps
// follow the real holding rules: the adapter takes a receive for a
// message unless the QP already holds K whose events were not dequeued
// (then that connection ends); the connection dequeues one event at a
// time and applies it, re-posting its slot, before it dequeues the next;
// closing loses the messages in flight and gives back what is held, then
// the reservation. One peer in six ignores its credits.
func TestSharedReceivesModel(t *testing.T) {
	type conn struct {
		k        int
		peer, us credits // the peer's credits towards us, ours towards it
		toUs     []uint16
		toPeer   []uint16
		queued   []uint16 // taken from the SRQ, event not dequeued
		inHand   []uint16 // dequeued, being applied (at most one)
		hostile  bool
		pending  int
	}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 11))
		var sup supply
		posted := 0
		var conns []*conn
		open := func() {
			c := &conn{k: 2 + r.IntN(40), hostile: r.IntN(6) == 0}
			peerK := 2 + r.IntN(40)
			c.peer = credits{avail: c.k, k: peerK}
			c.us = credits{avail: peerK, k: c.k}
			n := sup.toMake(slotsFor(c.k))
			sup.made += n
			posted += n
			sup.reserve(slotsFor(c.k))
			conns = append(conns, c)
		}
		closeConn := func(i int) {
			c := conns[i]
			posted += len(c.queued) + len(c.inHand) // dat restores, we post back
			sup.release(slotsFor(c.k))
			conns = append(conns[:i], conns[i+1:]...)
		}
		for step := 0; step < 30000; step++ {
			if len(conns) == 0 || r.IntN(60) == 0 && len(conns) < 30 {
				open()
				continue
			}
			i := r.IntN(len(conns))
			c := conns[i]
			switch r.IntN(8) {
			case 0:
				c.pending++
			case 1: // the peer sends: within its credits, or a burst if hostile
				if c.hostile && r.IntN(2) == 0 {
					for range 1 + r.IntN(2*c.k) {
						c.toUs = append(c.toUs, 0)
					}
				} else if (c.pending > 0 || c.peer.grantDue()) && c.peer.canSend() {
					c.toUs = append(c.toUs, c.peer.sent())
					c.pending = max(0, c.pending-1)
				}
			case 2: // a message arrives
				if len(c.toUs) == 0 {
					break
				}
				if len(c.queued) >= c.k {
					if !c.hostile {
						t.Fatalf("seed %d step %d: a peer within its credits met the QP limit", seed, step)
					}
					closeConn(i) // no receive for it: the connection ends
					break
				}
				if posted == 0 {
					t.Fatalf("seed %d step %d: the SRQ is empty for a %s peer (made %d, reserved %d, %d connections)",
						seed, step, map[bool]string{true: "hostile", false: "credit-keeping"}[c.hostile],
						sup.made, sup.reserved, len(conns))
				}
				posted--
				c.queued = append(c.queued, c.toUs[0])
				c.toUs = c.toUs[1:]
			case 3: // dequeue one event, unless one is being applied
				if len(c.queued) > 0 && len(c.inHand) == 0 {
					c.inHand = append(c.inHand, c.queued[0])
					c.queued = c.queued[1:]
				}
			case 4: // apply it and re-post its slot
				if len(c.inHand) > 0 {
					if !c.hostile {
						c.us.received(c.inHand[0])
					}
					c.inHand = c.inHand[:0]
					posted++
					c.us.reposted()
				}
			case 5: // we send (a grant at least, when due)
				if (r.IntN(2) == 0 || c.us.grantDue()) && c.us.canSend() {
					c.toPeer = append(c.toPeer, c.us.sent())
				}
			case 6: // the peer applies one of ours (its receives are its own)
				if len(c.toPeer) > 0 {
					c.peer.received(c.toPeer[0])
					c.toPeer = c.toPeer[1:]
					c.peer.reposted()
				}
			case 7:
				if r.IntN(20) == 0 {
					closeConn(i)
				}
			}
			if posted > sup.made || sup.made < sup.reserved {
				t.Fatalf("seed %d step %d: %d posted of %d made, %d reserved", seed, step, posted, sup.made, sup.reserved)
			}
			// The claim itself, without the slack of whole chunks: the
			// reservation alone leaves room for every credit-keeping
			// peer's remaining K − h − u.
			free, owed := sup.reserved, 0
			for _, c := range conns {
				h := len(c.queued) + len(c.inHand)
				free -= h
				if !c.hostile {
					owed += c.k - h - c.us.ungranted
				}
			}
			if free < owed {
				t.Fatalf("seed %d step %d: %d slots left of the reservation for %d sends owed", seed, step, free, owed)
			}
		}
	}
}

// TestControlReceivesShared: on iwarp, every connection's control
// receives come from its IA's shared receive queue, connections that end
// in every way (graceful closes, a peer gone mid-stream, a write cut off)
// give every slot back, and once they are all gone each SRQ holds all the
// slots it was given and no reservation is left.
func TestControlReceivesShared(t *testing.T) {
	lc := ListenConfig{IA: "iwarp"}
	l, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var acceptLoop, served sync.WaitGroup
	acceptLoop.Add(1)
	go func() {
		defer acceptLoop.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer served.Done()
				defer c.Close()
				io.Copy(c, c) // echo until EOF or a reset
			}()
		}
	}()
	// Dialing from the listener's address puts both ends on one IA, which
	// the listener keeps open after the connections are gone.
	d := Dialer{IA: "iwarp", LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 10 * time.Second}
	var pool *ctrlPool
	var dialed sync.WaitGroup
	for i := range 40 {
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		c := nc.(*Conn)
		require.NotNil(t, c.arena, "connection %d posts its own receives", i)
		if pool == nil {
			pool = c.arena.pool
		}
		require.Same(t, pool, c.arena.pool)
		dialed.Add(1)
		go func() {
			defer dialed.Done()
			msg := bytes.Repeat([]byte{byte(i)}, 64<<10)
			switch i % 4 {
			case 0, 1: // an echoed stream, then a graceful close
				go c.Write(msg)
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
					t.Errorf("connection %d: echo: %v", i, err)
				}
				c.Close()
			case 2: // closed while the echo is still coming (a message
				// both rings hold: nobody reads the echo)
				c.Write(msg[:4<<10])
				c.Close()
			case 3: // closed while writing
				go func() { time.Sleep(time.Millisecond); c.Close() }()
				for {
					if _, err := c.Write(msg); err != nil {
						return
					}
				}
			}
		}()
	}
	dialed.Wait()
	served.Wait()
	defer acceptLoop.Wait()
	defer l.Close()
	require.Eventually(t, func() bool {
		registry.mu.Lock()
		defer registry.mu.Unlock()
		return len(registry.conns) == 0
	}, 10*time.Second, 10*time.Millisecond)

	pool.mu.Lock()
	defer pool.mu.Unlock()
	require.NotEmpty(t, pool.arenas, "the last SRQ stays for the next connections")
	for _, a := range pool.arenas {
		q, err := a.srq.Query()
		require.NoError(t, err)
		require.Zero(t, a.conns)
		require.Zero(t, a.sup.reserved)
		require.Equal(t, a.sup.made, q.Posted, "every slot is back on the SRQ")
	}
}

// TestOwnReceives: where receives are a connection's own (the verbs
// provider; forced here on iwarp), streams still flow both ways.
func TestOwnReceives(t *testing.T) {
	// The IAs pipe's dialer and listener use, held for the test.
	for _, local := range []netip.Addr{{}, testIP("iwarp")} {
		s, err := acquireIA(context.Background(), iaName("iwarp", local))
		require.NoError(t, err)
		setOwn := func(own bool) {
			s.ctrl.mu.Lock()
			s.ctrl.own = own
			s.ctrl.mu.Unlock()
		}
		setOwn(true)
		defer func() {
			setOwn(false)
			s.release()
		}()
	}
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	require.Nil(t, c1.arena)
	require.Nil(t, c2.arena)
	stream(t, c1, c2, 8<<20, 100<<10)
	stream(t, c2, c1, 8<<20, 3000)
}

// TestControlFloodBreaksOnlyItsConnection: a peer that sends control
// messages beyond its credits, to a connection that is not reading,
// loses its own connection once it holds that connection's K receives;
// the other connections on the same shared receive queue keep theirs
// and go on streaming.
func TestControlFloodBreaksOnlyItsConnection(t *testing.T) {
	lc := ListenConfig{IA: "iwarp"}
	l, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	// NoDup: the second dial to the same address would otherwise go
	// through dup-connect and start spares, which the listener may
	// accept before the dial's own connection.
	d := Dialer{IA: "iwarp", NoDup: true, Timeout: 10 * time.Second}
	accept := func() (dialed, accepted *Conn) {
		ch := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			ch <- c
		}()
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { nc.Close() })
		ac := <-ch
		require.NotNil(t, ac)
		t.Cleanup(func() { ac.Close() })
		return nc.(*Conn), ac.(*Conn)
	}
	hostile, victim := accept()
	honest, other := accept()
	require.NotNil(t, victim.arena)
	require.Same(t, victim.arena, other.arena)

	// The hostile side posts control messages with no regard for its
	// credits, as fast as its send queue lets it, to a victim that never
	// reads: 500 of them would take 500 of the shared receives.
	sent := 0
	for limit := time.Now().Add(10 * time.Second); sent < 500 && time.Now().Before(limit); {
		hostile.postMu.Lock()
		hostile.mu.Lock()
		if hostile.err != nil {
			hostile.mu.Unlock()
			hostile.postMu.Unlock()
			break
		}
		if hostile.posted-hostile.completed < uint64(hostile.cfg.sendDepth) {
			hostile.postControlLocked(nil)
			sent++
		} else {
			hostile.mu.Unlock()
		}
		hostile.postMu.Unlock()
		hostile.pollQueued()
	}
	t.Logf("the hostile side posted %d control messages", sent)
	victim.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = victim.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET, "the flooded connection must end")

	// Deadlines make a starved connection fail the test rather than hang
	// it.
	for _, c := range []*Conn{honest, other} {
		c.SetDeadline(time.Now().Add(20 * time.Second))
	}
	stream(t, honest, other, 16<<20, 64<<10)
	stream(t, other, honest, 16<<20, 64<<10)
}

// testPool returns a pool of its own on a loopback iwarp IA, whose
// chunks newChunk makes (it may fail or stop one), and closes both when
// the test ends.
func testPool(t *testing.T, newChunk func(s *sharedIA) (*region, error)) *ctrlPool {
	s, err := acquireIA(context.Background(), iaName("iwarp", netip.MustParseAddr("127.0.0.1")))
	require.NoError(t, err)
	p := &ctrlPool{s: s, newChunk: func() (*region, error) { return newChunk(s) }}
	t.Cleanup(func() {
		p.close()
		s.release()
	})
	return p
}

func newTestChunk(s *sharedIA) (*region, error) { return newRegion(s, ctrlChunk*ctrlSlot, ctrlPriv) }

// checkSupply checks what every arena of p must show once no reserve is
// under way: its slots cover its reservations, and all of them are
// posted (none is held: no connection uses them).
func checkSupply(t *testing.T, p *ctrlPool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.arenas {
		require.Zero(t, a.sup.toMake(0), "made %d, reserved %d", a.sup.made, a.sup.reserved)
		require.Equal(t, a.sup.made, int(a.made.Load()))
		q, err := a.srq.Query()
		require.NoError(t, err)
		require.Equal(t, a.sup.made, q.Posted, "every slot made is posted")
	}
}

// TestReserveRegistersOutsideLock: while one reserver registers a chunk,
// the pool's lock, which every dial, accept and close takes, is free; a
// second reserver that the chunk also covers waits for it instead of
// registering one of its own.
func TestReserveRegistersOutsideLock(t *testing.T) {
	entered, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	p := testPool(t, func(s *sharedIA) (*region, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-proceed
		}
		return newTestChunk(s)
	})
	type res struct {
		a   *ctrlArena
		err error
	}
	reserve := func(ch chan<- res) {
		a, err := p.reserve(8)
		ch <- res{a, err}
	}
	first, second := make(chan res, 1), make(chan res, 1)
	go reserve(first)
	<-entered
	if !p.mu.TryLock() {
		close(proceed) // for the reserver to leave and the pool to close
		<-first
		t.Fatal("the pool's lock is held while a chunk registers")
	}
	arenas := slices.Clone(p.arenas)
	p.mu.Unlock()
	require.Len(t, arenas, 1)
	a := arenas[0]

	go reserve(second)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return a.sup.reserved == 2*slotsFor(8)
	}, 10*time.Second, time.Millisecond, "the second reserver never counted its slots")
	close(proceed)
	for _, ch := range []chan res{first, second} {
		r := <-ch
		require.NoError(t, r.err)
		require.Same(t, a, r.a)
	}
	require.EqualValues(t, 1, calls.Load(), "one chunk covers both reservers")
	checkSupply(t, p)
	a.release(8)
	a.release(8)
	require.Zero(t, a.sup.reserved)
}

// TestReserveRacing: reservers that race, some of whose registrations
// fail, leave every SRQ's slots covering its reservations and all
// posted; without failures they made no more chunks than the
// reservations need; and a reserver that failed left no reservation.
func TestReserveRacing(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(map[bool]string{false: "ok", true: "failing"}[failing], func(t *testing.T) {
			var calls atomic.Int32
			p := testPool(t, func(s *sharedIA) (*region, error) {
				if failing && calls.Add(1)%3 == 0 {
					return nil, syscall.ENOMEM
				}
				return newTestChunk(s)
			})
			type held struct {
				a *ctrlArena
				k int
			}
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				got  []held
				errs int
			)
			for i := range 60 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := 2 + i*37%190
					a, err := p.reserve(k)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						assert.ErrorIs(t, err, syscall.ENOMEM)
						errs++
						return
					}
					assert.NotNil(t, a)
					got = append(got, held{a, k})
				}()
			}
			wg.Wait()
			if failing {
				require.NotZero(t, errs, "no registration failed")
			} else {
				require.Zero(t, errs)
			}
			checkSupply(t, p)
			want := map[*ctrlArena]int{}
			for _, h := range got {
				want[h.a] += slotsFor(h.k)
			}
			// Read under the lock, checked after it: a failed require
			// must not leave the lock held for the cleanup.
			type counts struct{ made, reserved, want int }
			var arenas []counts
			p.mu.Lock()
			for _, a := range p.arenas {
				arenas = append(arenas, counts{a.sup.made, a.sup.reserved, want[a]})
			}
			p.mu.Unlock()
			if !failing {
				// With failures, a second SRQ whose reservers all failed
				// is gone again.
				require.Greater(t, len(arenas), 1, "the reservations fit one SRQ: the test needs more")
			}
			for i, a := range arenas {
				require.Equal(t, a.want, a.reserved, "SRQ %d: the reservations of the reservers that succeeded", i)
				if !failing {
					require.Equal(t, (a.want+ctrlChunk-1)/ctrlChunk*ctrlChunk, a.made, "SRQ %d: more chunks made than its reservations need", i)
				}
			}
			for _, h := range got {
				h.a.release(h.k)
			}
			p.mu.Lock()
			n, last := len(p.arenas), p.arenas[0]
			reserved, conns := last.sup.reserved, last.conns
			p.mu.Unlock()
			require.Equal(t, 1, n, "only the last SRQ stays")
			require.Zero(t, reserved)
			require.Zero(t, conns)
		})
	}
}

// TestGoneEPGivesBackReservation: a connection whose EP is already
// freed when it closes (its QP closed with it: nothing can land in the
// SRQ's receives for it any more) gives its reservation back, as one
// whose EP its close frees does, and every slot is posted again.
func TestGoneEPGivesBackReservation(t *testing.T) {
	c1, _, stop := pipe(t, "iwarp", 0)
	defer stop()
	require.NotNil(t, c1.arena)
	// Keep c1's IA, and with it the SRQ, open after c1 is gone.
	c1.ia.hold()
	defer c1.ia.release()
	a, k := c1.arena, c1.cfg.recvs
	p := a.pool
	p.mu.Lock()
	before := a.sup.reserved
	p.mu.Unlock()

	c1.pollMu.Lock() // no Read or Write is inside the EP while it goes
	require.NoError(t, c1.ep.Free())
	c1.pollMu.Unlock()
	c1.Close()

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Equal(t, before-slotsFor(k), a.sup.reserved, "the closed connection still holds its reservation")
	if a.conns == 0 {
		q, err := a.srq.Query()
		require.NoError(t, err)
		require.Equal(t, a.sup.made, q.Posted, "every slot is back on the SRQ")
	}
}
