package rdmanet

import (
	"math/rand/v2"
	"testing"
)

func TestCreditsRules(t *testing.T) {
	c := credits{avail: 3, k: 8}
	if !c.canSend() {
		t.Fatal("3 credits: cannot send")
	}
	if g := c.sent(); g != 0 || c.avail != 2 {
		t.Fatalf("sent: grant %d, avail %d", g, c.avail)
	}
	c.sent()
	if c.canSend() {
		t.Fatal("R1: the last credit was spent on a message without a grant")
	}
	c.reposted()
	if !c.canSend() {
		t.Fatal("R1: one credit and a grant to carry: must be allowed")
	}
	if c.grantDue() {
		t.Fatal("R2 before K/2 re-posts")
	}
	for range 3 {
		c.reposted()
	}
	if !c.grantDue() {
		t.Fatal("R2: 4 of 8 re-posted, grant due")
	}
	if g := c.sent(); g != 4 || c.avail != 0 || c.ungranted != 0 {
		t.Fatalf("grant %d, avail %d, ungranted %d", g, c.avail, c.ungranted)
	}
	if c.canSend() {
		t.Fatal("no credits: cannot send")
	}
	c.received(5)
	if c.avail != 5 {
		t.Fatalf("avail %d", c.avail)
	}
}

// TestCreditsNoDeadlock simulates two sides exchanging control messages
// through queues, with random scheduling and random urges to send, using
// only the credits type. It checks the two promises: a side never has more
// messages in flight than the peer has receives posted (no receive
// overrun, which would kill an iWARP connection), and whenever both sides
// still want to send and nothing is in flight, one of them can (no
// deadlock).
func TestCreditsNoDeadlock(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		k := [2]int{2 + r.IntN(6), 2 + r.IntN(40)}
		type side struct {
			cc      credits
			posted  int // receives posted
			pending int // messages it wants to send
			inbox   []uint16
		}
		var s [2]side
		for i := range 2 {
			s[i].cc = credits{avail: k[1-i], k: k[i]}
			s[i].posted = k[i]
		}
		canSendNow := func(x *side) bool {
			return (x.pending > 0 || x.cc.grantDue()) && x.cc.canSend()
		}
		for step := 0; step < 20000; step++ {
			i := r.IntN(2)
			x, y := &s[i], &s[1-i]
			switch r.IntN(3) {
			case 0: // the application wants to say something
				x.pending++
			case 1: // send, if the rules allow
				if canSendNow(x) {
					g := x.cc.sent()
					if x.pending > 0 {
						x.pending--
					}
					if y.posted == 0 {
						t.Fatalf("seed %d: receive overrun", seed)
					}
					y.posted--
					y.inbox = append(y.inbox, g)
				}
			case 2: // process one delivered message and re-post its receive
				if len(x.inbox) > 0 {
					x.cc.received(x.inbox[0])
					x.inbox = x.inbox[1:]
					x.posted++
					x.cc.reposted()
				}
			}
			if x.cc.avail > k[1-i] {
				t.Fatalf("seed %d: %d credits for %d receives", seed, x.cc.avail, k[1-i])
			}
			quiet := len(s[0].inbox) == 0 && len(s[1].inbox) == 0
			wants := s[0].pending > 0 || s[1].pending > 0
			if quiet && wants && !canSendNow(&s[0]) && !canSendNow(&s[1]) {
				t.Fatalf("seed %d step %d: deadlock: %+v / %+v", seed, step, s[0].cc, s[1].cc)
			}
		}
	}
}
