//go:build verbs && linux && cgo

package verbs

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestSendSoak streams small Sends both ways over many connections at
// once, the way rdmanet's control messages go: each side has 32 receive
// slots, re-posted as soon as a message is checked, and 64 send slots
// reused in turn, with credits (a message grants back the receives its
// sender re-posted) so that no Send ever finds no receive. Every message
// carries its sequence number and a payload derived from it, so a
// message whose bytes are not all its own is caught, and the report says
// which earlier message they came from. It soaks the provider's Send
// path as rdmanet uses it, without rdmanet; it found that path sound on
// both devices when rdmanet's soak saw damage on siw, which turned out
// to be small RDMA Writes across a page (see doc.go). Opt-in:
// RDMANET_VERBS_SOAK=<duration>, RDMANET_VERBS_SOAK_PAIRS (64).
func TestSendSoak(t *testing.T) {
	dur := time.Duration(0)
	if s := os.Getenv("RDMANET_VERBS_SOAK"); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil {
			t.Fatalf("RDMANET_VERBS_SOAK=%q: %v", s, err)
		}
	}
	if dur <= 0 {
		t.Skip("runs with RDMANET_VERBS_SOAK=<duration>")
	}
	pairs := 64
	if s := os.Getenv("RDMANET_VERBS_SOAK_PAIRS"); s != "" {
		fmt.Sscan(s, &pairs)
	}
	forEachDevice(t, func(t *testing.T, d testDev) {
		ia := openTestIA(t, d)
		dpd, _ := allocPD(t, ia)
		l := listenOn(t, ia, driver.ListenConfig{})

		ends := make([]*msgEnd, 0, 2*pairs)
		defer func() {
			for _, e := range ends {
				e.close()
			}
		}()
		for i := range pairs {
			c := newMsgEnd(t, ia, dpd, 0, i)
			s := newMsgEnd(t, ia, dpd, 1, i)
			ends = append(ends, c, s)
			done := make(chan error, 1)
			go func() {
				req, err := l.Accept(testCtx(t))
				if err == nil {
					_, err = req.Accept(testCtx(t), s.dqp, nil)
				}
				done <- err
			}()
			if _, err := c.qp.Connect(testCtx(t), l.Addr(), nil); err != nil {
				t.Fatalf("pair %d: connect: %v", i, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("pair %d: accept: %v", i, err)
			}
		}
		deadline := time.Now().Add(dur)
		var wg sync.WaitGroup
		for _, e := range ends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.run(deadline)
			}()
		}
		wg.Wait()
		var sent, checked int64
		bad := 0
		for _, e := range ends {
			sent += e.sent
			checked += e.checked
			if e.err != nil {
				if bad < 10 {
					t.Errorf("pair %d, side %d: %v", e.pair, e.dir, e.err)
				}
				bad++
			}
		}
		t.Logf("%d connections for %v: %d messages sent, %d checked, %d sides failed", pairs, dur, sent, checked, bad)
	})
}

// The layout of a msgEnd's buffer and of a message.
const (
	msgSlot     = 256
	msgRecvs    = 32
	msgSends    = 64
	msgHeader   = 12 // seq 8, grant 2, payload length 2
	msgMaxBytes = msgSlot - msgHeader
)

// msgEnd is one side of a TestSendSoak connection.
type msgEnd struct {
	ia        *IA
	qp        *QP
	dqp       driver.QP
	cq        *CQ
	buf       []byte
	mr        driver.MR
	dir, pair int

	sendSeq, recvSeq  uint64 // the next message to send, to receive
	posted, completed uint64 // send-side requests
	credits           int    // receives the peer has posted for us
	grants            int    // receives re-posted since our last message
	sent, checked     int64
	err               error
}

func newMsgEnd(t *testing.T, ia *IA, pd driver.PD, dir, pair int) *msgEnd {
	t.Helper()
	e := &msgEnd{ia: ia, dir: dir, pair: pair, credits: msgRecvs}
	e.buf = make([]byte, (msgRecvs+msgSends)*msgSlot)
	p, _ := pdOf(pd)
	var err error
	if e.mr, err = p.Register(e.buf, driver.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	cq, err := ia.CreateCQ(driver.CQConfig{Size: msgRecvs + msgSends})
	if err != nil {
		t.Fatal(err)
	}
	e.cq = cq.(*CQ)
	cfg := defaultQPConfig(pd)
	cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxSendSGE, cfg.MaxRecvSGE = msgSends, msgRecvs, 1, 1
	cfg.SendCQ, cfg.RecvCQ, cfg.Tag = e.cq, e.cq, nextTag.Add(1)
	if e.dqp, err = ia.CreateQP(cfg); err != nil {
		t.Fatal(err)
	}
	e.qp, _ = qpOf(e.dqp)
	for i := range msgRecvs {
		if err := e.postRecv(i); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *msgEnd) close() {
	e.qp.Close()
	e.cq.Close()
	e.mr.Close()
}

func (e *msgEnd) sge(off, n int) []driver.SGE {
	return []driver.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
}

func (e *msgEnd) postRecv(slot int) error {
	return e.qp.PostRecv(driver.RecvWR{ID: uint64(slot), Local: e.sge(slot*msgSlot, msgSlot)})
}

// msgByte is byte i of the payload of message seq from side dir: the
// report turns a wrong byte back into the message it came from.
func msgByte(dir int, seq uint64, i int) byte { return byte(seq) + byte(i) + byte(dir*101) }

// run sends and checks until deadline, in one goroutine: a loop that
// polls the CQ, handles what completed, sends what credits and the send
// queue allow, and sleeps in Wait when there is nothing to do.
func (e *msgEnd) run(deadline time.Time) {
	r := rand.New(rand.NewPCG(uint64(e.pair), uint64(e.dir)))
	var comps [32]driver.Completion
	for e.err == nil && time.Now().Before(deadline) {
		n := e.cq.Poll(comps[:])
		for _, c := range comps[:n] {
			if c.Status != driver.StatusSuccess {
				e.err = fmt.Errorf("completion %+v", c)
				return
			}
			if c.Op == driver.OpRecv {
				e.received(int(c.WRID), int(c.Length))
			} else {
				e.completed++
			}
		}
		k := 0
		for e.err == nil && e.posted-e.completed < msgSends && (e.credits >= 2 || (e.credits == 1 && e.grants > 0)) {
			size := 0
			if e.credits >= 2 {
				size = r.IntN(msgMaxBytes + 1)
			}
			e.send(size)
			k++
		}
		if n == 0 && k == 0 && e.err == nil {
			if err := e.cq.Wait(time.Now().Add(100 * time.Millisecond)); err != nil {
				e.err = err
			}
		}
	}
}

// send posts the next message with size payload bytes.
func (e *msgEnd) send(size int) {
	off := (msgRecvs + int(e.posted%msgSends)) * msgSlot
	m := e.buf[off : off+msgHeader+size]
	binary.LittleEndian.PutUint64(m, e.sendSeq)
	binary.LittleEndian.PutUint16(m[8:], uint16(e.grants))
	binary.LittleEndian.PutUint16(m[10:], uint16(size))
	for i := range size {
		m[msgHeader+i] = msgByte(e.dir, e.sendSeq, i)
	}
	if err := e.qp.PostSend(driver.SendWR{ID: e.posted, Op: driver.OpSend, Flags: driver.SendSignaled, Local: e.sge(off, len(m))}); err != nil {
		e.err = fmt.Errorf("post send: %w", err)
		return
	}
	e.posted++
	e.sendSeq++
	e.credits--
	e.grants = 0
	e.sent++
}

// received checks the message in slot, takes its grant and re-posts the
// slot.
func (e *msgEnd) received(slot, n int) {
	m := e.buf[slot*msgSlot : slot*msgSlot+msgSlot]
	seq := binary.LittleEndian.Uint64(m)
	grant := int(binary.LittleEndian.Uint16(m[8:]))
	size := int(binary.LittleEndian.Uint16(m[10:]))
	peer := 1 - e.dir
	switch {
	case seq != e.recvSeq:
		e.err = fmt.Errorf("message %d in slot %d, want %d (%d bytes)", seq, slot, e.recvSeq, n)
		return
	case n != msgHeader+size || size > msgMaxBytes:
		e.err = fmt.Errorf("message %d in slot %d: %d bytes, header says %d of payload", seq, slot, n, size)
		return
	}
	for i := range size {
		if got := m[msgHeader+i]; got != msgByte(peer, seq, i) {
			from := seq - uint64(byte(seq)-(got-byte(i)-byte(peer*101)))
			e.err = fmt.Errorf("message %d (%d bytes) in slot %d: payload byte %d is %#x, want %#x: it is message %d's (%d earlier) or %d's",
				seq, n, slot, i, got, msgByte(peer, seq, i), from, seq-from, from-256)
			return
		}
	}
	e.recvSeq++
	e.credits += grant
	e.checked++
	if err := e.postRecv(slot); err != nil {
		e.err = fmt.Errorf("re-post slot %d: %w", slot, err)
		return
	}
	e.grants++
}
