package iwarp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// The tests below cover the receive role (rxrole.go): a goroutine waiting
// on a CQ reads the connection's socket itself, and hands the role to the
// receive goroutine when it stops waiting.

// waiterOn starts a goroutine waiting up to d for h's next completion
// and returns once it holds the receive role of q's connection; the
// channel gets the completion, if one came.
func waiterOn(t *testing.T, q *iwarp.QP, h *sink, d time.Duration) <-chan *driver.Completion {
	t.Helper()
	ch := make(chan *driver.Completion, 1)
	go func() {
		// The sink's t.Fatal paths cannot fire here: every completion
		// carries the sink's Tag and Wait fails only on a closed CQ.
		c, ok := h.nextWithin(t, d)
		if !ok {
			ch <- nil
			return
		}
		ch <- &c
	}()
	waitFor(t, "a waiter holding the receive role", func() bool { return iwarp.RxRole(q) == "waiter" })
	return ch
}

// A waiter whose deadline passes while it holds the role and part of an
// FPDU has arrived leaves that part where the next reader finds it: the
// message completes intact once the rest comes, whoever reads it. Cut in
// the length field, in the header and in the payload, for a message that
// fits the read-ahead and one that does not.
func TestWaiterDeadlineMidFrame(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	for _, size := range []int{64, 6000} {
		for _, cut := range []int{1, 3, 9, 40} {
			// A connection each: after a message larger than the
			// read-ahead, waiters leave the role to the receive
			// goroutine for a while.
			h := newSink()
			dst := newRegion(t, s.pd, 2*8192, driver.AccessLocalWrite)
			p, q := rawConnect(t, s, s.cfg(), h, false, 1, 1, func(q *iwarp.QP) {
				for i := range 2 {
					mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{dst.sge(i*8192, 8192)}}))
				}
			})
			for i := range 2 {
				payload := bytes.Repeat([]byte{byte(i + 1)}, size)
				b := p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: uint32(i + 1)}, Payload: payload})
				if i == 0 {
					// The part comes while a waiter holds the role.
					ch := waiterOn(t, q, h, 50*time.Millisecond)
					p.send(t, b[:cut])
					if c := <-ch; c != nil {
						t.Fatalf("size %d, cut at %d: completion %+v for part of a message", size, cut, *c)
					}
				} else {
					// The part comes while nobody waits.
					p.send(t, b[:cut])
					h.none(t, 20*time.Millisecond)
				}
				p.send(t, b[cut:])
				h.expectSuccess(t, uint64(i), driver.OpRecv, uint32(size))
				if got := dst.buf[i*8192 : i*8192+size]; !bytes.Equal(got, payload) {
					t.Fatalf("size %d, cut at %d: received data differs", size, cut)
				}
			}
			dst.checkGuards(t)
		}
	}
}

// Closing a QP while a goroutine waits on its CQ, reading the socket,
// returns once the connection is quiescent; the waiter returns when the
// CQ closes, and the peer sees the connection end.
func TestCloseWhileWaiterReads(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	dst := newRegion(t, b.pd, 64, driver.AccessLocalWrite)
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
		prepHello(q)
		mustPost(t, q.PostRecv(driver.RecvWR{ID: 7, Local: []driver.SGE{dst.sge(0, 64)}}))
	})
	hello(t, p)
	done := make(chan error, 1)
	go func() {
		for {
			// Nothing completes: receive 7 is dropped by the Close
			// (package dat would flush it).
			if err := p.respSink.cq.Wait(time.Time{}); err != nil {
				done <- err
				return
			}
			if n := p.respSink.cq.Len(); n > 0 {
				done <- nil
				return
			}
		}
	}()
	waitFor(t, "a waiter holding the receive role", func() bool { return iwarp.RxRole(p.resp) == "waiter" })
	closed := make(chan struct{})
	go func() {
		p.resp.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("QP.Close did not return while a waiter read its socket")
	}
	if err := p.iniSink.waitDisconnected(t); err == nil {
		t.Fatal("the initiator saw an orderly close; the responder was closed abruptly")
	}
	p.respSink.cq.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a completion arrived after Close")
		}
	case <-time.After(testTimeout):
		t.Fatal("the waiter did not return when its CQ closed")
	}
}

// A CQ that two connections complete on, waited on by one goroutine after
// another (one at a time, as package dat allows), gets every receive of
// both; so does a CQ of one connection waited on by two goroutines in
// turn, which pass its receive role between them.
func TestTurnsOfWaiters(t *testing.T) {
	leakCheck(t)
	const msgs = 200
	run := func(t *testing.T, conns int) {
		a, b := newSide(t), newSide(t)
		cq, err := b.ia.CreateCQ(driver.CQConfig{Size: 64})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cq.Close() })
		l := listen(t, b.ia, driver.ListenConfig{})
		ctx := testCtx(t)
		dst := newRegion(t, b.pd, conns*msgs*8, driver.AccessLocalWrite)
		src := newRegion(t, a.pd, conns*msgs*8, driver.AccessLocalWrite)
		type end struct {
			ini  *iwarp.QP
			sink *sink
		}
		ends := make([]end, conns)
		for k := range conns {
			cfg := b.cfg()
			cfg.MaxRecvWR = msgs
			cfg.SendCQ, cfg.RecvCQ, cfg.Tag = cq, cq, uint32(k+1)
			q, err := b.ia.CreateQP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Close() })
			for i := range msgs {
				off := (k*msgs + i) * 8
				mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{dst.sge(off, 8)}}))
			}
			ends[k].sink = newSink()
			acfg := a.cfg()
			acfg.MaxSendWR = msgs
			ends[k].ini = newQP(t, a.ia, acfg, ends[k].sink)
			ch := connectAsync(ctx, ends[k].ini, l.Addr(), nil)
			if _, err := accept(t, ctx, l).Accept(ctx, q, nil); err != nil {
				t.Fatal(err)
			}
			if r := waitConnect(t, ch); r.err != nil {
				t.Fatal(r.err)
			}
		}
		for i := range msgs {
			for k, e := range ends {
				off := (k*msgs + i) * 8
				src.buf[off] = byte(i)
				src.buf[off+1] = byte(k)
				mustPost(t, e.ini.PostSend(driver.SendWR{ID: uint64(i), Op: driver.OpSend, Local: []driver.SGE{src.sge(off, 8)}}))
			}
		}
		// Two goroutines take turns waiting, a few completions each.
		var mu sync.Mutex
		got := make([][]int, conns)
		total := 0
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				var dst [4]driver.Completion
				for {
					mu.Lock()
					if total == conns*msgs {
						mu.Unlock()
						errs <- nil
						return
					}
					if err := cq.Wait(time.Now().Add(testTimeout)); err != nil {
						mu.Unlock()
						errs <- err
						return
					}
					n := cq.Poll(dst[:])
					for _, c := range dst[:n] {
						if c.Status != driver.StatusSuccess || c.Op != driver.OpRecv || c.QPTag < 1 || int(c.QPTag) > conns {
							mu.Unlock()
							errs <- &completionError{c}
							return
						}
						got[c.QPTag-1] = append(got[c.QPTag-1], int(c.WRID))
						total++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for k := range conns {
			for i, id := range got[k] {
				off := (k*msgs + id) * 8
				if id != i || dst.buf[off] != byte(i) || dst.buf[off+1] != byte(k) {
					t.Fatalf("connection %d: completion %d is receive %d, data %v", k, i, id, dst.buf[off:off+2])
				}
			}
		}
	}
	t.Run("one connection", func(t *testing.T) { run(t, 1) })
	t.Run("two connections", func(t *testing.T) { run(t, 2) })
}

type completionError struct{ c driver.Completion }

func (e *completionError) Error() string { return "unexpected completion" }

// With nobody waiting on the responder's CQ, after a waiter had the
// receive role, the responder still places the initiator's RDMA Writes,
// answers its RDMA Reads and sees it close.
func TestNoWaiterAfterWaiter(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	remote := newRegion(t, b.pd, 4096, rwAccess)
	src := newRegion(t, a.pd, 4096, driver.AccessLocalWrite)
	back := newRegion(t, a.pd, 4096, driver.AccessLocalWrite)
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, prepHello)
	// A waiter on the responder takes the role and parks it when it has
	// its message; from then on nobody waits there.
	ch := waiterOn(t, p.resp, p.respSink, testTimeout)
	mustPost(t, p.ini.PostSend(driver.SendWR{ID: helloID, Op: driver.OpSend}))
	if c := <-ch; c == nil || c.WRID != helloID {
		t.Fatalf("responder's waiter got %v, want the hello", c)
	}
	for i := range 3 {
		n := 100 + 1000*i
		fillRandom(src.buf[:n], uint64(i))
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 1, Op: driver.OpRDMAWrite, Local: []driver.SGE{src.sge(0, n)}, Remote: remote.remote(0, n)}))
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 2, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{back.sge(0, n)}, Remote: remote.remote(0, n)}))
		p.iniSink.expectSuccess(t, 2, driver.OpRDMARead, uint32(n))
		if !bytes.Equal(back.buf[:n], src.buf[:n]) {
			t.Fatalf("round %d: read back data differs", i)
		}
	}
	if _, ok := p.respSink.poll(t); ok {
		t.Fatal("the responder completed something for one-sided operations")
	}
	if err := p.ini.Disconnect(true); err != nil {
		t.Fatal(err)
	}
	if err := p.respSink.waitDisconnected(t); err != nil {
		t.Fatalf("responder saw %v, want the peer's orderly close", err)
	}
	remote.checkGuards(t)
}

// A connection whose CQ is its own starts with the receive role parked
// and no receive goroutine (rxStartParked); with nobody waiting on the
// CQ, what arrives is still read, once the sweeper gives the role to the
// receive goroutine, which starts then.
func TestReceiverStartsWithoutWaiter(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	h := newSink()
	dst := newRegion(t, s.pd, 64, driver.AccessLocalWrite)
	p, q := rawConnect(t, s, s.cfg(), h, false, 1, 1, func(q *iwarp.QP) {
		mustPost(t, q.PostRecv(driver.RecvWR{ID: 1, Local: []driver.SGE{dst.sge(0, 64)}}))
	})
	if r := iwarp.RxRole(q); r != "parked" && r != "loop" {
		t.Fatalf("receive role %q at start", r)
	}
	p.send(t, p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}, Payload: []byte("hello")}))
	// Nobody waits on the CQ: look at it without waiting.
	waitFor(t, "the Send to be received with no waiter", func() bool { return h.cq.Len() > 0 })
	waitFor(t, "the receive goroutine holding the role", func() bool { return iwarp.RxRole(q) == "loop" })
	h.expectSuccess(t, 1, driver.OpRecv, 5)
	if string(dst.buf[:5]) != "hello" {
		t.Fatalf("received %q", dst.buf[:5])
	}
}

// A waiter places a large Send itself as it comes, also when it comes in
// pieces with pauses between them, without losing a byte: the message
// completes intact for the waiter. Several messages in a row, each cut
// at a different place, with a pause on some.
func TestWaiterLargeFrames(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	const size, slot = 60000, 65536
	const n = 6
	h := newSink()
	dst := newRegion(t, s.pd, n*slot, driver.AccessLocalWrite)
	p, q := rawConnect(t, s, s.cfg(), h, false, 1, 1, func(q *iwarp.QP) {
		for i := range n {
			mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{dst.sge(i*slot, slot)}}))
		}
	})
	for i := range n {
		payload := bytes.Repeat([]byte{byte(i + 1)}, size)
		b := p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: uint32(i + 1)}, Payload: payload})
		ch := waiterOn(t, q, h, testTimeout)
		cut := []int{30, 4000, 5000, 30000, len(b) - 3, len(b) - 1}[i]
		p.send(t, b[:cut])
		if i%2 == 1 {
			time.Sleep(5 * time.Millisecond)
		}
		p.send(t, b[cut:])
		c := <-ch
		if c == nil || c.WRID != uint64(i) || c.Status != driver.StatusSuccess || c.Length != size {
			t.Fatalf("message %d (cut at %d): completion %+v", i, cut, c)
		}
		if got := dst.buf[i*slot : i*slot+size]; !bytes.Equal(got, payload) {
			t.Fatalf("message %d (cut at %d): received data differs", i, cut)
		}
	}
	dst.checkGuards(t)
}

// A waiter places the payload of a Write or Send as it comes, holding
// the role while it waits for the rest, and whoever holds the role next
// carries on from where it stopped: the same waiter, another one after
// the first left at its deadline mid-payload, or the receive goroutine
// when nobody waits. Each message completes (a Write with the Send after
// it) with all its bytes in place, with and without CRCs, cut in the
// payload and in the trailer; the Send spans two pieces of its receive.
func TestWaiterPlacesAsItComes(t *testing.T) {
	for _, op := range []wire.Opcode{wire.OpWrite, wire.OpSend} {
		for _, crc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/crc=%v", op, crc), func(t *testing.T) { waiterPlaces(t, op, crc) })
		}
	}
}

func waiterPlaces(t *testing.T, op wire.Opcode, crc bool) {
	leakCheck(t)
	s := newSide(t)
	const size, slot, piece = 60000, 65536, 20000
	const n = 3
	h := newSink()
	w := newRegion(t, s.pd, n*slot, driver.AccessLocalWrite|driver.AccessRemoteWrite)
	r := newRegion(t, s.pd, n*64, driver.AccessLocalWrite)
	p, q := rawConnect(t, s, s.cfg(), h, crc, 1, 1, func(q *iwarp.QP) {
		for i := range n {
			sge := []driver.SGE{r.sge(i*64, 64)}
			if op == wire.OpSend {
				sge = []driver.SGE{w.sge(i*slot, piece), w.sge(i*slot+piece, slot-piece)}
			}
			mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i), Local: sge}))
		}
	})
	for i := range n {
		payload := make([]byte, size)
		fillRandom(payload, uint64(i+1))
		hdr := wire.Header{Opcode: wire.OpSend, Last: true, MSN: uint32(i + 1)}
		if op == wire.OpWrite {
			hdr = wire.Header{Opcode: wire.OpWrite, Last: true, STag: w.mr.RKey(), TO: w.mr.Addr() + uint64(i*slot)}
		}
		b := p.fpdu(t, wire.FPDU{Header: hdr, Payload: payload})
		wlen, want := len(b), uint32(size)
		if op == wire.OpWrite {
			b = append(b, p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: uint32(i + 1)}, Payload: []byte("done")})...)
			want = 4
		}
		dst := w.buf[i*slot : i*slot+size]
		cut := 30000
		d := testTimeout
		if i > 0 {
			// This waiter leaves at its deadline, part of the payload
			// placed.
			d = time.Second
		}
		ch := waiterOn(t, q, h, d)
		p.send(t, b[:cut])
		waitFor(t, "the waiter to wait for the rest of the payload, holding the role", func() bool { return iwarp.RxMidFrame(q) })
		switch i {
		case 1:
			// Another waiter finishes it.
			if c := <-ch; c != nil {
				t.Fatalf("message %d: completion %+v before it is all in", i, *c)
			}
			ch = waiterOn(t, q, h, testTimeout)
		case 2:
			// The receive goroutine finishes it, cut in the trailer.
			if c := <-ch; c != nil {
				t.Fatalf("message %d: completion %+v before it is all in", i, *c)
			}
			ch = nil
			p.send(t, b[cut:wlen-3])
			cut = wlen - 3 // in the CRC
		}
		p.send(t, b[cut:])
		var c *driver.Completion
		if ch != nil {
			c = <-ch
		} else {
			comp := h.next(t)
			c = &comp
		}
		if c == nil || c.WRID != uint64(i) || c.Status != driver.StatusSuccess || c.Length != want {
			t.Fatalf("message %d: completion %+v", i, c)
		}
		if !bytes.Equal(dst, payload) {
			t.Fatalf("message %d: the bytes placed differ", i)
		}
	}
	w.checkGuards(t)
}

// A large FPDU that is neither a Write, a Send nor a Read Response can
// only be a protocol error, and a waiter holding the receive role fails
// it on its header: the peer that sent the header alone, and never the
// rest, sees the connection end. A Send with Invalidate is answered with
// the Terminate it earns; a Terminate whose attachment is too long for
// any Terminate ends the connection unanswered, as malformed.
func TestWaiterLargeProtocolError(t *testing.T) {
	for _, kind := range []string{"send with invalidate", "oversized terminate"} {
		t.Run(kind, func(t *testing.T) {
			leakCheck(t)
			s := newSide(t)
			h := newSink()
			dst := newRegion(t, s.pd, 65536, driver.AccessLocalWrite)
			p, q := rawConnect(t, s, s.cfg(), h, false, 1, 1, func(q *iwarp.QP) {
				mustPost(t, q.PostRecv(driver.RecvWR{ID: 1, Local: []driver.SGE{dst.sge(0, 65536)}}))
			})
			var b []byte
			if kind == "send with invalidate" {
				b = p.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSendInvalidate, Last: true, MSN: 1, STag: dst.mr.RKey()}, Payload: make([]byte, 60000)})
			} else {
				term := wire.SiwTerminate(wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, ECode: wire.ECodeRDMAPCannotInvalidate}, nil, wire.TermLayoutRFC, nil)
				var err error
				if b, err = wire.AppendTerminate(nil, &term, false); err != nil {
					t.Fatal(err)
				}
				// The length field claims 60000 bytes of attachment.
				binary.BigEndian.PutUint16(b, uint16(wire.TerminateHeaderLen-wire.ULPDULengthLen+60000))
			}
			// The waiter gives up after 2 s: nothing completes on its CQ
			// (package dat, not the provider, flushes the receive).
			ch := waiterOn(t, q, h, 2*time.Second)
			p.send(t, b[:wire.TerminateHeaderLen+8]) // the header, and no more
			if kind == "send with invalidate" {
				ctl, _ := p.readTerminate(t)
				if got := [3]uint8{uint8(ctl.Layer), ctl.EType, ctl.ECode}; got != [3]uint8{uint8(wire.LayerRDMAP), wire.ETypeRDMAPRemoteOperation, wire.ECodeRDMAPCannotInvalidate} {
					t.Fatalf("Terminate %v, want RDMAP cannot-invalidate", got)
				}
				assertTerminateError(t, h.waitDisconnected(t), wire.LayerRDMAP, wire.ETypeRDMAPRemoteOperation, wire.ECodeRDMAPCannotInvalidate)
			} else {
				err := h.waitDisconnected(t)
				var te *iwarp.TerminateError
				if !errors.As(err, &te) || !te.Remote || !te.Malformed {
					t.Fatalf("OnDisconnect(%v), want the peer's malformed Terminate", err)
				}
				p.c.SetReadDeadline(time.Now().Add(testTimeout))
				if f, _, err := p.readFPDU(); err == nil {
					t.Fatalf("answered a Terminate with %v", f.Header.Opcode)
				}
			}
			p.c.Close()
			q.Close()
			if c := <-ch; c != nil && c.Status == driver.StatusSuccess {
				t.Fatalf("completion %+v for a message that failed", *c)
			}
		})
	}
}
