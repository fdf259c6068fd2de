package iwarp_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

const (
	helloID  = 1 << 40
	rwAccess = driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead
)

// hello sends the initiator's first FPDU (a zero-length Send into the
// receive prepared by prepHello), which lets the responder transmit.
func hello(t *testing.T, p dpair) {
	t.Helper()
	mustPost(t, p.ini.PostSend(driver.SendWR{ID: helloID, Op: driver.OpSend, Flags: driver.SendSignaled}))
	p.iniSink.expectSuccess(t, helloID, driver.OpSend, 0)
	p.respSink.expectSuccess(t, helloID, driver.OpRecv, 0)
}

func prepHello(q *iwarp.QP) {
	if err := q.PostRecv(driver.RecvWR{ID: helloID}); err != nil {
		panic(err)
	}
}

// variants runs f for CRC off/on and for the automatic and a small MULPDU.
func variants(t *testing.T, f func(t *testing.T, opts []string)) {
	for _, crc := range []string{"crc=0", "crc=1"} {
		for _, mulpdu := range []string{"mulpdu=auto", "mulpdu=16384"} {
			t.Run(crc+","+mulpdu, func(t *testing.T) {
				leakCheck(t)
				f(t, []string{crc, mulpdu})
			})
		}
	}
}

func TestSendRecv(t *testing.T) {
	variants(t, func(t *testing.T, opts []string) {
		a, b := newSide(t, opts...), newSide(t, opts...)
		sizes := []int{0, 1, 3, 100, 4096, 70000, 1 << 20}
		// Every message gets its own source and destination bytes: the
		// race detector cannot see that TCP orders a later message after
		// the test looked at an earlier one.
		offs, total := []int{}, 0
		for _, n := range sizes {
			offs = append(offs, total)
			total += n + 64
		}
		src := newRegion(t, a.pd, total, driver.AccessLocalWrite)
		dst := newRegion(t, b.pd, total, rwAccess)
		p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
			for i, n := range sizes {
				mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{dst.sge(offs[i], n+64)}}))
			}
		})
		if info, _ := p.ini.ConnInfo(); info.CRC != (opts[0] == "crc=1") {
			t.Fatalf("CRC negotiated %v with %s", info.CRC, opts[0])
		}
		for i, n := range sizes {
			o := offs[i]
			fillRandom(src.buf[o:o+n], uint64(i))
			mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(100 + i), Op: driver.OpSend, Flags: driver.SendSignaled,
				Local: []driver.SGE{src.sge(o, n)}}))
			p.iniSink.expectSuccess(t, uint64(100+i), driver.OpSend, uint32(n))
			c := p.respSink.expectSuccess(t, uint64(i), driver.OpRecv, uint32(n))
			if c.Solicited {
				t.Fatal("unsolicited Send completed as solicited")
			}
			if !bytes.Equal(dst.buf[o:o+n], src.buf[o:o+n]) || dst.buf[o+n] != 0 {
				t.Fatalf("size %d: received data differs", n)
			}
		}
		src.checkGuards(t)
		dst.checkGuards(t)
	})
}

// TestMultiSGE sends from three segments into a receive of two, with
// FPDU boundaries falling inside segments.
func TestMultiSGE(t *testing.T) {
	variants(t, func(t *testing.T, opts []string) {
		a, b := newSide(t, opts...), newSide(t, opts...)
		src := newRegion(t, a.pd, 200000, driver.AccessLocalWrite)
		dst := newRegion(t, b.pd, 200000, rwAccess)
		fillRandom(src.buf, 7)
		p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
			mustPost(t, q.PostRecv(driver.RecvWR{ID: 1, Local: []driver.SGE{dst.sge(100000, 40001), dst.sge(0, 60010)}}))
		})
		segs := []driver.SGE{src.sge(0, 1000), src.sge(5000, 5), src.sge(10000, 99000)}
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 2, Op: driver.OpSend, Flags: driver.SendSignaled, Local: segs}))
		p.iniSink.expectSuccess(t, 2, driver.OpSend, 100005)
		p.respSink.expectSuccess(t, 1, driver.OpRecv, 100005)
		want := append(append(append([]byte(nil), src.buf[0:1000]...), src.buf[5000:5005]...), src.buf[10000:109000]...)
		got := append(append([]byte(nil), dst.buf[100000:140001]...), dst.buf[0:60004]...)
		if !bytes.Equal(got, want) {
			t.Fatal("scattered data differs")
		}
		if dst.buf[60004] != 0 || dst.buf[140001] != 0 {
			t.Fatal("bytes written past the message")
		}
		src.checkGuards(t)
		dst.checkGuards(t)
	})
}

// TestWriteRead writes 1 MiB from three segments into the responder's
// memory, reads it back, and checks zero-length Write and Read.
func TestWriteRead(t *testing.T) {
	variants(t, func(t *testing.T, opts []string) {
		a, b := newSide(t, opts...), newSide(t, opts...)
		const n = 1 << 20
		src := newRegion(t, a.pd, n, driver.AccessLocalWrite)
		back := newRegion(t, a.pd, n, driver.AccessLocalWrite)
		remote := newRegion(t, b.pd, n, rwAccess)
		fillRandom(src.buf, 3)
		p := connectData(t, a, b, a.cfg(), b.cfg(), nil, prepHello)
		segs := []driver.SGE{src.sge(0, 4096), src.sge(4096, 100), src.sge(4196, n-4196)}
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 1, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled, Local: segs, Remote: remote.remote(0, n)}))
		p.iniSink.expectSuccess(t, 1, driver.OpRDMAWrite, n)
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 2, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{back.sge(0, n)}, Remote: remote.remote(0, n)}))
		p.iniSink.expectSuccess(t, 2, driver.OpRDMARead, n)
		// A responder-side completion orders the test after the
		// responder's placement (TCP is no happens-before edge for the
		// race detector; the stream order is what guarantees it).
		hello(t, p)
		if !bytes.Equal(remote.buf, src.buf) || !bytes.Equal(back.buf, src.buf) {
			t.Fatal("data differs after Write and Read back")
		}
		// Zero-length Write and Read, and a Read into the middle of a
		// larger local segment.
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 3, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled, Remote: remote.remote(0, 0)}))
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 4, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Remote: remote.remote(n, 0)}))
		clear(back.buf)
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 5, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{back.sge(10, 1000)}, Remote: remote.remote(500, 300)}))
		expectSet(t, p.iniSink, map[uint64]want{
			3: {driver.OpRDMAWrite, 0}, 4: {driver.OpRDMARead, 0}, 5: {driver.OpRDMARead, 300}})
		if !bytes.Equal(back.buf[10:310], src.buf[500:800]) || back.buf[9] != 0 || back.buf[310] != 0 {
			t.Fatal("partial Read placed wrongly")
		}
		// The responder can Write too (the initiator's first FPDU went).
		local := newRegion(t, b.pd, 4096, driver.AccessLocalWrite)
		fillRandom(local.buf, 11)
		mustPost(t, p.resp.PostSend(driver.SendWR{ID: 6, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled,
			Local: []driver.SGE{local.sge(0, 4096)}, Remote: driver.RemoteSegment{Addr: back.mr.Addr(), Length: 4096, RKey: back.mr.RKey()}}))
		p.respSink.expectSuccess(t, 6, driver.OpRDMAWrite, 4096)
		for _, r := range []*region{src, back, remote, local} {
			r.checkGuards(t)
		}
	})
}

// TestZeroLengthSend covers a zero-length Send into a zero-length receive.
func TestZeroLengthSend(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, prepHello)
	hello(t, p)
}

// TestWriteThenSendOrdering: a Send posted after a Write is delivered
// after the Write's data landed; the receiver checks its memory when it
// polls the Send's completion. The unsignalled Write produces no
// completion of its own: the Send's implies it.
func TestWriteThenSendOrdering(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t, "mulpdu=16384"), newSide(t)
	const n = 256 << 10
	const rounds = 8
	// One window per round (see TestSendRecv on the race detector).
	src := newRegion(t, a.pd, n*rounds, driver.AccessLocalWrite)
	remote := newRegion(t, b.pd, n*rounds, rwAccess)
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
		for i := range rounds {
			mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i)}))
		}
	})
	for i := range rounds {
		for j := range n {
			src.buf[i*n+j] = byte(i + 1)
		}
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(2 * i), Op: driver.OpRDMAWrite, Local: []driver.SGE{src.sge(i*n, n)}, Remote: remote.remote(i*n, n)}))
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(2*i + 1), Op: driver.OpSend, Flags: driver.SendSignaled}))
		p.iniSink.expectSuccess(t, uint64(2*i+1), driver.OpSend, 0)
		c := p.respSink.expectSuccess(t, uint64(i), driver.OpRecv, 0)
		w := remote.buf[int(c.WRID)*n : int(c.WRID+1)*n]
		if bytes.Count(w, []byte{byte(i + 1)}) != n {
			t.Fatalf("round %d: the Send completed before the Write's data was in place", i)
		}
	}
	p.iniSink.none(t, 0)
	remote.checkGuards(t)
}

// TestOutOfOrderCompletions: a Read completes when its Response has
// been placed, so Writes and Sends posted behind it complete before it.
// Every request still completes exactly once, Sends and Writes in their
// post order among themselves and Reads in theirs.
func TestOutOfOrderCompletions(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	local := newRegion(t, a.pd, 1<<20, driver.AccessLocalWrite)
	remote := newRegion(t, b.pd, 1<<20, rwAccess)
	fillRandom(remote.buf, 5)
	const rounds = 5
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
		for i := range 3 * rounds {
			mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i)}))
		}
	})
	ops := []driver.Opcode{driver.OpRDMARead, driver.OpRDMAWrite, driver.OpSend, driver.OpRDMARead, driver.OpSend, driver.OpRDMAWrite, driver.OpSend}
	reordered := 0
	for round := range rounds {
		base := uint64(round * len(ops))
		for i, op := range ops {
			wr := driver.SendWR{ID: base + uint64(i), Op: op, Flags: driver.SendSignaled}
			switch op {
			case driver.OpRDMARead:
				wr.Local = []driver.SGE{local.sge(0, 512<<10)}
				wr.Remote = remote.remote(0, 512<<10)
			case driver.OpRDMAWrite:
				wr.Local = []driver.SGE{local.sge(900<<10, 100)}
				wr.Remote = remote.remote(900<<10, 100)
			}
			mustPost(t, p.ini.PostSend(wr))
		}
		var order []int
		seen := map[int]bool{}
		for _, c := range p.iniSink.wait(t, len(ops)) {
			i := int(c.WRID - base)
			if c.WRID < base || i >= len(ops) || seen[i] || c.Op != ops[i] || c.Status != driver.StatusSuccess {
				t.Fatalf("round %d: completion %+v", round, c)
			}
			seen[i] = true
			order = append(order, i)
		}
		p.iniSink.none(t, 20*time.Millisecond)
		lastRead, lastOther := -1, -1
		for _, i := range order {
			last := &lastOther
			if ops[i] == driver.OpRDMARead {
				last = &lastRead
			}
			if i < *last {
				t.Fatalf("round %d: completion order %v: %v %d after %d", round, order, ops[i], i, *last)
			}
			*last = i
		}
		if order[0] != 0 {
			reordered++
		}
		t.Logf("round %d: completion order %v", round, order)
		// The receives take the place of a completion of the responder:
		// its Read Responses (and so the Reads' data) are in place.
		p.respSink.wait(t, 3)
		if !bytes.Equal(local.buf[:512<<10], remote.buf[:512<<10]) {
			t.Fatal("read data differs")
		}
	}
	// A Write posted right behind a 512 KiB Read is handed to TCP long
	// before the Read's Response has arrived: out of order, every time
	// the machine is not stalled for that long.
	if reordered == 0 {
		t.Fatalf("in %d rounds no request completed before the Read posted ahead of it", rounds)
	}
}

func TestSolicited(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	p := connectData(t, a, b, a.cfg(), b.cfg(), nil, func(q *iwarp.QP) {
		mustPost(t, q.PostRecv(driver.RecvWR{ID: 1}))
		mustPost(t, q.PostRecv(driver.RecvWR{ID: 2}))
	})
	mustPost(t, p.ini.PostSend(driver.SendWR{ID: 1, Op: driver.OpSend, Flags: driver.SendSolicited}))
	mustPost(t, p.ini.PostSend(driver.SendWR{ID: 2, Op: driver.OpSend}))
	if c := p.respSink.expectSuccess(t, 1, driver.OpRecv, 0); !c.Solicited {
		t.Fatal("Send with SE not solicited")
	}
	if c := p.respSink.expectSuccess(t, 2, driver.OpRecv, 0); c.Solicited {
		t.Fatal("plain Send solicited")
	}
	// Successful unsignalled Sends produce no completion here.
	p.iniSink.none(t, 20*time.Millisecond)
}

// TestReadORD1 queues several Reads on a connection whose ORD is 1 (and
// whose responder IRD is 1, so one Read too many would be terminated).
func TestReadORD1(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	acfg, bcfg := a.cfg(), b.cfg()
	acfg.ORD, acfg.IRD, bcfg.IRD, bcfg.ORD = 1, 1, 1, 1
	const chunk, reads = 64 << 10, 8
	local := newRegion(t, a.pd, chunk*reads, driver.AccessLocalWrite)
	remote := newRegion(t, b.pd, chunk*reads, rwAccess)
	fillRandom(remote.buf, 9)
	p := connectData(t, a, b, acfg, bcfg, nil, nil)
	if info, _ := p.ini.ConnInfo(); info.ORD != 1 {
		t.Fatalf("ORD %d, want 1", info.ORD)
	}
	if info, _ := p.resp.ConnInfo(); info.IRD != 1 {
		t.Fatalf("responder IRD %d, want 1", info.IRD)
	}
	for i := range reads {
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(i), Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{local.sge(i*chunk, chunk)}, Remote: remote.remote((reads-1-i)*chunk, chunk)}))
	}
	for i := range reads {
		if c := p.iniSink.next(t); c.WRID != uint64(i) || c.Status != driver.StatusSuccess || c.Length != chunk {
			select {
			case err := <-p.respSink.disc:
				t.Logf("responder OnDisconnect(%v)", err)
			case <-time.After(time.Second):
			}
			select {
			case err := <-p.iniSink.disc:
				t.Logf("initiator OnDisconnect(%v)", err)
			case <-time.After(time.Second):
			}
			t.Fatalf("read %d: %+v", i, c)
		}
	}
	for i := range reads {
		if !bytes.Equal(local.buf[i*chunk:(i+1)*chunk], remote.buf[(reads-1-i)*chunk:(reads-i)*chunk]) {
			t.Fatalf("read %d data differs", i)
		}
	}
	select {
	case err := <-p.respSink.disc:
		t.Fatalf("responder disconnected: %v", err)
	default:
	}
}

// TestFence: a fenced Write that overwrites the memory an earlier Read
// reads must wait for the Read: the Read sees the old bytes.
func TestFence(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	const n = 1 << 20
	local := newRegion(t, a.pd, n, driver.AccessLocalWrite)
	newData := newRegion(t, a.pd, n, driver.AccessLocalWrite)
	remote := newRegion(t, b.pd, n, rwAccess)
	for round := range 5 {
		for i := range remote.buf {
			remote.buf[i] = byte(round)
		}
		for i := range newData.buf {
			newData.buf[i] = 0xEE
		}
		p := connectData(t, a, b, a.cfg(), b.cfg(), nil, nil)
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 1, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{local.sge(0, n)}, Remote: remote.remote(0, n)}))
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: 2, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled | driver.SendFence,
			Local: []driver.SGE{newData.sge(0, n)}, Remote: remote.remote(0, n)}))
		p.iniSink.expectSuccess(t, 1, driver.OpRDMARead, n)
		p.iniSink.expectSuccess(t, 2, driver.OpRDMAWrite, n)
		if bytes.Count(local.buf, []byte{byte(round)}) != n {
			t.Fatalf("round %d: the Read saw the fenced Write's data", round)
		}
		p.ini.Disconnect(true) // graceful: the Write's bytes are delivered
		if err := p.respSink.waitDisconnected(t); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(remote.buf, []byte{0xEE}) != n {
			t.Fatalf("round %d: fenced Write did not land", round)
		}
	}
}

// TestSRQThreeQPs: one SRQ feeds the receives of three QPs.
func TestSRQThreeQPs(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	const perQP, size = 20, 1000
	buf := newRegion(t, b.pd, 3*perQP*size, driver.AccessLocalWrite)
	low := make(chan struct{}, 1)
	srq, err := b.ia.CreateSRQ(b.pd, driver.SRQConfig{MaxRecvWR: 3 * perQP, MaxRecvSGE: 1, LowWatermark: 5,
		OnLowWatermark: func() { low <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	for i := range 3 * perQP {
		mustPost(t, srq.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{buf.sge(i*size, size)}}))
	}
	src := newRegion(t, a.pd, size, driver.AccessLocalWrite)
	bcfg := b.cfg()
	bcfg.SRQ = srq
	var pairs []dpair
	for range 3 {
		pairs = append(pairs, connectData(t, a, b, a.cfg(), bcfg, nil, nil))
	}
	seen := map[uint64]bool{}
	for k := range perQP {
		for qi, p := range pairs {
			for j := range src.buf {
				src.buf[j] = byte(qi*perQP + k)
			}
			mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(k), Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{src.sge(0, size)}}))
			p.iniSink.expectSuccess(t, uint64(k), driver.OpSend, size)
			c := p.respSink.next(t)
			if c.Status != driver.StatusSuccess || c.Length != size || seen[c.WRID] {
				t.Fatalf("SRQ completion %+v", c)
			}
			seen[c.WRID] = true
			if got := buf.buf[int(c.WRID)*size]; got != byte(qi*perQP+k) {
				t.Fatalf("receive %d holds %d, want %d", c.WRID, got, qi*perQP+k)
			}
		}
	}
	if srq.Posted() != 0 || len(seen) != 3*perQP {
		t.Fatalf("SRQ still has %d receives, %d completed", srq.Posted(), len(seen))
	}
	select {
	case <-low:
	default:
		t.Fatal("low watermark not reported")
	}
	buf.checkGuards(t)
}

// deafResponder is a raw MPA responder that accepts and then only reads
// (it never answers a Read).
func deafResponder(t *testing.T) *rawListener {
	return newRawListener(t, func(c net.Conn) {
		if _, err := readFrame(c); err != nil {
			return
		}
		c.Write(mpaFrame(keyRep, flagE, 2, v2Block(1, 1)))
		io.Copy(io.Discard, c)
	})
}

// TestDisconnectDropsUnfinished: an abrupt Disconnect drops every
// outstanding receive and send-side request without completing it
// (package dat flushes them), including a Read waiting for its Response
// and requests queued behind ORD, and requests posted afterwards are
// accepted and dropped too. Successful unsignalled Sends and Writes never
// complete.
func TestDisconnectDropsUnfinished(t *testing.T) {
	leakCheck(t)
	a := newSide(t)
	rl := deafResponder(t)
	s := newSink()
	cfg := a.cfg()
	cfg.ORD = 1
	q := newQP(t, a.ia, cfg, s)
	for i := range 4 {
		mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(100 + i)}))
	}
	if _, err := q.Connect(testCtx(t), rl.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	local := newRegion(t, a.pd, 4096, driver.AccessLocalWrite)
	rem := driver.RemoteSegment{Addr: 0x1000, Length: 64, RKey: 0x1234}
	wrs := []driver.SendWR{
		{ID: 1, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Local: []driver.SGE{local.sge(0, 64)}, Remote: rem},
		{ID: 2, Op: driver.OpRDMAWrite, Local: []driver.SGE{local.sge(0, 64)}, Remote: rem},
		{ID: 3, Op: driver.OpSend, Local: []driver.SGE{local.sge(0, 10)}},
		{ID: 4, Op: driver.OpRDMARead, Flags: driver.SendSignaled, Local: []driver.SGE{local.sge(0, 64)}, Remote: rem},
		{ID: 5, Op: driver.OpSend, Flags: driver.SendSignaled},
	}
	for _, wr := range wrs {
		mustPost(t, q.PostSend(wr))
	}
	// The Read is never answered, the second waits for its ORD slot and
	// the last Send behind it; the unsignalled Write and Send went out.
	s.none(t, 100*time.Millisecond)
	if err := q.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	s.none(t, 50*time.Millisecond)
	mustPost(t, q.PostSend(driver.SendWR{ID: 6, Op: driver.OpSend, Flags: driver.SendSignaled}))
	mustPost(t, q.PostRecv(driver.RecvWR{ID: 7}))
	s.none(t, 50*time.Millisecond)
	if err := q.Disconnect(true); err != nil {
		t.Fatalf("second disconnect: %v", err)
	}
	select {
	case err := <-s.disc:
		t.Fatalf("OnDisconnect(%v) called for a local Disconnect", err)
	default:
	}
}

// TestPeerFailureDrops: when the peer resets the connection, the QP
// reports OnDisconnect with an error and drops its receives.
func TestPeerFailureDrops(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	p := connectData(t, a, b, a.cfg(), b.cfg(), func(q *iwarp.QP) {
		for i := range 3 {
			mustPost(t, q.PostRecv(driver.RecvWR{ID: uint64(i)}))
		}
	}, nil)
	if err := p.resp.Disconnect(false); err != nil {
		t.Fatal(err)
	}
	if err := p.iniSink.waitDisconnected(t); err == nil {
		t.Fatal("OnDisconnect(nil) after a reset")
	}
	p.iniSink.none(t, 20*time.Millisecond)
}

// TestGracefulDisconnectDrains: a graceful Disconnect lets queued Writes
// and Reads finish (successfully) before the connection closes, and their
// completions are all in the CQ when it returns.
func TestGracefulDisconnectDrains(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	const n, writes = 256 << 10, 16
	src := newRegion(t, a.pd, n, driver.AccessLocalWrite)
	back := newRegion(t, a.pd, n, driver.AccessLocalWrite)
	remote := newRegion(t, b.pd, n*writes, rwAccess)
	fillRandom(src.buf, 1)
	acfg := a.cfg()
	p := connectData(t, a, b, acfg, b.cfg(), nil, nil)
	for i := range writes {
		mustPost(t, p.ini.PostSend(driver.SendWR{ID: uint64(i), Op: driver.OpRDMAWrite, Flags: driver.SendSignaled,
			Local: []driver.SGE{src.sge(0, n)}, Remote: remote.remote(i*n, n)}))
	}
	mustPost(t, p.ini.PostSend(driver.SendWR{ID: writes, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
		Local: []driver.SGE{back.sge(0, n)}, Remote: remote.remote(0, n)}))
	if err := p.ini.Disconnect(true); err != nil {
		t.Fatal(err)
	}
	if got := p.iniSink.cq.Len(); got != writes+1 {
		t.Fatalf("%d completions in the CQ when Disconnect returned, want %d", got, writes+1)
	}
	for i, c := range p.iniSink.wait(t, writes+1) {
		if c.WRID != uint64(i) || c.Status != driver.StatusSuccess {
			t.Fatalf("completion %+v, want success", c)
		}
	}
	if err := p.respSink.waitDisconnected(t); err != nil {
		t.Fatalf("responder OnDisconnect(%v), want nil", err)
	}
	for i := range writes {
		if !bytes.Equal(remote.buf[i*n:(i+1)*n], src.buf) {
			t.Fatalf("write %d did not land", i)
		}
	}
	if !bytes.Equal(back.buf, src.buf) {
		t.Fatal("read data differs")
	}
}

// TestResponderStartupGate: a Send the responder posts before the
// initiator's first FPDU goes out only after that FPDU arrived.
func TestResponderStartupGate(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	buf := newRegion(t, s.pd, 64, driver.AccessLocalWrite)
	copy(buf.buf, "from the responder")
	sk := newSink()
	raw, q := rawConnect(t, s, s.cfg(), sk, false, 1, 1, func(q *iwarp.QP) {
		mustPost(t, q.PostRecv(driver.RecvWR{ID: 1}))
	})
	mustPost(t, q.PostSend(driver.SendWR{ID: 2, Op: driver.OpSend, Flags: driver.SendSignaled, Local: []driver.SGE{buf.sge(0, 18)}}))
	raw.expectNothing(t, 200*time.Millisecond)
	sk.none(t, 0)
	raw.send(t, raw.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}}))
	f, _, err := raw.readFPDU()
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.Opcode != wire.OpSend || f.Header.MSN != 1 || string(f.Payload) != "from the responder" {
		t.Fatalf("responder sent %+v %q", f.Header, f.Payload)
	}
	sk.expectSuccess(t, 1, driver.OpRecv, 0)
	sk.expectSuccess(t, 2, driver.OpSend, 18)
}

// TestRTRWrite: with peer-to-peer mode agreed, the initiator's zero-length
// RTR Write (siw: STag 1, TO 0) is accepted and opens the startup gate.
func TestRTRWrite(t *testing.T) {
	leakCheck(t)
	s := newSide(t)
	ctx := testCtx(t)
	l := listen(t, s.ia, driver.ListenConfig{})
	sk := newSink()
	q := newQP(t, s.ia, s.cfg(), sk)
	c := dialRaw(t, l.Addr())
	c.SetDeadline(time.Now().Add(testTimeout))
	req := wire.MPAFrame{Header: wire.MPAHeader{Kind: wire.MPARequest, Revision: 2, Flags: wire.MPAFlagEnhanced},
		V2: wire.MPAv2{PeerToPeer: true, WriteRTR: true, IRD: 1, ORD: 1}}
	b, _ := req.Append(nil)
	c.Write(b)
	if _, err := accept(t, ctx, l).Accept(ctx, q, nil); err != nil {
		t.Fatal(err)
	}
	if info, _ := q.ConnInfo(); info.RTR != iwarp.RTRWrite {
		t.Fatalf("RTR %v", info.RTR)
	}
	if _, err := readFrame(c); err != nil {
		t.Fatal(err)
	}
	raw := &rawPeer{c: c}
	mustPost(t, q.PostSend(driver.SendWR{ID: 1, Op: driver.OpRDMAWrite, Remote: driver.RemoteSegment{Addr: 0, RKey: 0x77}}))
	raw.expectNothing(t, 100*time.Millisecond)
	raw.send(t, raw.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}}))
	f, _, err := raw.readFPDU()
	if err != nil || f.Header.Opcode != wire.OpWrite || f.Header.STag != 0x77 {
		t.Fatalf("after RTR: %+v %v", f.Header, err)
	}
	c.Close()
	if err := sk.waitDisconnected(t); err != nil {
		t.Fatalf("OnDisconnect(%v)", err)
	}
}

// TestSegmentationOnTheWire checks the FPDUs this provider puts on the
// wire, as a raw peer sees them: MULPDU respected, each message's segments
// back to back, non-last segments unpadded with L clear, MSN per queue
// from 1, MO/TO advancing by the bytes sent, valid CRCs.
func TestSegmentationOnTheWire(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			leakCheck(t)
			const mulpdu = 1000
			s := newSide(t, fmt.Sprintf("mulpdu=%d", mulpdu))
			src := newRegion(t, s.pd, 10000, driver.AccessLocalWrite)
			fillRandom(src.buf, 5)
			sk := newSink()
			raw, q := rawConnect(t, s, s.cfg(), sk, crc, 1, 1, func(q *iwarp.QP) {
				mustPost(t, q.PostRecv(driver.RecvWR{ID: 1}))
			})
			raw.send(t, raw.fpdu(t, wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}}))
			segs := []driver.SGE{src.sge(0, 3333), src.sge(5000, 5000)}
			mustPost(t, q.PostSend(driver.SendWR{ID: 2, Op: driver.OpSend, Local: segs}))
			mustPost(t, q.PostSend(driver.SendWR{ID: 3, Op: driver.OpRDMAWrite, Local: segs, Remote: driver.RemoteSegment{Addr: 1 << 40, Length: 8333, RKey: 0xabcdef}}))
			mustPost(t, q.PostSend(driver.SendWR{ID: 4, Op: driver.OpSend, Flags: driver.SendSolicited, Local: []driver.SGE{src.sge(0, 7)}}))
			mustPost(t, q.PostSend(driver.SendWR{ID: 5, Op: driver.OpRDMARead, Local: []driver.SGE{src.sge(0, 10)}, Remote: driver.RemoteSegment{Addr: 77, Length: 10, RKey: 0x1234}}))
			want := append(append([]byte(nil), src.buf[:3333]...), src.buf[5000:]...)
			type msg struct {
				op   wire.Opcode
				data []byte
				msn  uint32
				base uint64
			}
			var got []msg
			var cur *msg
			for len(got) < 4 {
				f, raw8, err := raw.readFPDU()
				if err != nil {
					t.Fatal(err)
				}
				h := f.Header
				l := len(raw8) - wire.TrailerLen(int(h.ULPDULength)) - 2
				if l > mulpdu {
					t.Fatalf("ULPDU of %d bytes exceeds MULPDU %d", l, mulpdu)
				}
				if !h.Last && wire.PadLen(int(h.ULPDULength)) != 0 {
					t.Fatalf("non-last segment padded: ULPDU_Length %d", h.ULPDULength)
				}
				if h.Opcode == wire.OpReadRequest {
					rr := f.ReadRequest
					if !h.Last || h.MSN != 1 || rr.Size != 10 || rr.SourceSTag != 0x1234 || rr.SourceTO != 77 || rr.SinkSTag != src.mr.LKey() || rr.SinkTO != src.mr.Addr() {
						t.Fatalf("Read Request %+v %+v", h, rr)
					}
					got = append(got, msg{op: h.Opcode})
					continue
				}
				if cur == nil {
					cur = &msg{op: h.Opcode, msn: h.MSN, base: h.TO}
				} else if h.Opcode != cur.op || h.MSN != cur.msn || (h.Opcode.Tagged() && h.STag != 0xabcdef) {
					t.Fatalf("segments of two messages interleave: %+v after %v", h, cur.op)
				}
				if h.Opcode.Tagged() && h.TO != cur.base+uint64(len(cur.data)) || !h.Opcode.Tagged() && h.MO != uint32(len(cur.data)) {
					t.Fatalf("segment offset %+v after %d bytes", h, len(cur.data))
				}
				cur.data = append(cur.data, f.Payload...)
				if h.Last {
					got = append(got, *cur)
					cur = nil
				}
			}
			if got[0].op != wire.OpSend || got[0].msn != 1 || !bytes.Equal(got[0].data, want) {
				t.Fatalf("first Send: %v msn %d, %d bytes", got[0].op, got[0].msn, len(got[0].data))
			}
			if got[1].op != wire.OpWrite || got[1].base != 1<<40 || !bytes.Equal(got[1].data, want) {
				t.Fatalf("Write: %v base %#x, %d bytes", got[1].op, got[1].base, len(got[1].data))
			}
			if got[2].op != wire.OpSendSE || got[2].msn != 2 || !bytes.Equal(got[2].data, src.buf[:7]) {
				t.Fatalf("second Send: %v msn %d", got[2].op, got[2].msn)
			}
			if got[3].op != wire.OpReadRequest {
				t.Fatalf("fourth message %v", got[3].op)
			}
		})
	}
}

type want struct {
	op     driver.Opcode
	length uint32
}

// expectSet waits for one successful completion of each ID in ws, in any
// order.
func expectSet(t testing.TB, s *sink, ws map[uint64]want) {
	t.Helper()
	for range len(ws) {
		c := s.next(t)
		w, ok := ws[c.WRID]
		if !ok || c.Op != w.op || c.Status != driver.StatusSuccess || c.Length != w.length {
			t.Fatalf("completion %+v, want one of %+v", c, ws)
		}
		delete(ws, c.WRID)
	}
}
