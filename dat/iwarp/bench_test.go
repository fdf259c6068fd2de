package iwarp_test

// Benchmarks of the data path over loopback, next to plain-TCP baselines
// of the same shape, so that
//
//	go test -run '^$' -bench . -benchmem ./dat/iwarp/
//
// prints them side by side:
//
//	BenchmarkStream/TCP/<size>        io.Copy-style streaming of <size>-byte messages
//	BenchmarkStream/RDMAWrite/<size>  RDMA Writes of <size> bytes, 8 outstanding
//	BenchmarkStream/Send/<size>       Sends of <size> bytes into posted receives
//	BenchmarkPingPong/TCP             64-byte echo, one message in flight
//	BenchmarkPingPong/TCPHop          the same, but the client receives in a
//	                                  reader goroutine and hands each reply to
//	                                  the waiting goroutine over a channel, the
//	                                  hop every completion-based API has
//	BenchmarkPingPong/Send            64-byte Send each way, one in flight;
//	                                  each side's goroutine sleeps in CQ.Wait
//	                                  for the next completion (one hop, like
//	                                  TCPHop)
//
// Completions are taken from the CQs the way package dat takes them: poll,
// then sleep in CQ.Wait (without spinning first, as the IA advises:
// IAAttr.Spin is 0). Streams end with a round trip that proves the last
// byte arrived.

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

const (
	benchDepth   = 8  // outstanding Writes/Sends in streams
	benchCredits = 16 // receives the stream receiver keeps posted
	pingSize     = 64
)

// benchCQ takes the completions of one CQ from one goroutine.
type benchCQ struct {
	cq   *iwarp.CQ
	buf  [16]driver.Completion
	n, i int
}

// next returns the next completion, or ok false once the CQ is closed.
func (w *benchCQ) next() (c driver.Completion, ok bool) {
	for w.i == w.n {
		w.n, w.i = w.cq.Poll(w.buf[:]), 0
		if w.n > 0 {
			break
		}
		if err := w.cq.Wait(time.Time{}); err != nil {
			return driver.Completion{}, false
		}
	}
	c = w.buf[w.i]
	w.i++
	if c.Status != driver.StatusSuccess {
		panic(fmt.Sprintf("completion %+v", c))
	}
	return c, true
}

type benchRegion struct {
	buf []byte
	mr  driver.MR
}

func (r benchRegion) sge(off, n int) driver.SGE {
	return driver.SGE{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}
}

type benchEnv struct {
	ia       [2]*iwarp.IA
	pd       [2]driver.PD
	cq       [2]*iwarp.CQ
	ini, rsp *iwarp.QP
	wg       sync.WaitGroup // goroutines serving a CQ
}

// newBenchEnv connects an initiator and a responder QP over loopback,
// each completing on a CQ of its own; prep runs on each idle QP (0:
// initiator, 1: responder) with its PD. The cleanup closes the CQs, which
// ends the goroutines started with e.serve.
func newBenchEnv(b *testing.B, prep func(side int, q *iwarp.QP, pd driver.PD)) *benchEnv {
	b.Helper()
	e := &benchEnv{}
	for i := range e.ia {
		dia, err := iwarp.Driver{}.Open(context.Background(), []string{"127.0.0.1"})
		if err != nil {
			b.Fatal(err)
		}
		e.ia[i] = dia.(*iwarp.IA)
		b.Cleanup(func() { e.ia[i].Close() })
		if e.pd[i], err = e.ia[i].AllocPD(); err != nil {
			b.Fatal(err)
		}
		cq, err := e.ia[i].CreateCQ(driver.CQConfig{Size: 256})
		if err != nil {
			b.Fatal(err)
		}
		e.cq[i] = cq.(*iwarp.CQ)
	}
	cfg := func(i int) driver.QPConfig {
		return driver.QPConfig{PD: e.pd[i], SendCQ: e.cq[i], RecvCQ: e.cq[i], Tag: uint32(i),
			MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, IRD: 8, ORD: 8}
	}
	l, err := e.ia[1].Listen(driver.ListenConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	qi, err := e.ia[0].CreateQP(cfg(0))
	if err != nil {
		b.Fatal(err)
	}
	qr, err := e.ia[1].CreateQP(cfg(1))
	if err != nil {
		b.Fatal(err)
	}
	e.ini, e.rsp = qi.(*iwarp.QP), qr.(*iwarp.QP)
	prep(0, e.ini, e.pd[0])
	prep(1, e.rsp, e.pd[1])
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := e.ini.Connect(ctx, l.Addr(), nil)
		errc <- err
	}()
	req, err := l.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := req.Accept(ctx, e.rsp, nil); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		e.ini.Disconnect(false)
		e.ini.Close()
		e.rsp.Close()
		e.cq[0].Close()
		e.cq[1].Close()
		e.wg.Wait()
	})
	return e
}

// serve runs f for every completion of side's CQ in a goroutine of its
// own, until the CQ is closed.
func (e *benchEnv) serve(side int, f func(driver.Completion)) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		w := benchCQ{cq: e.cq[side]}
		for {
			c, ok := w.next()
			if !ok {
				return
			}
			f(c)
		}
	}()
}

func benchRegister(b *testing.B, pd driver.PD, n int) benchRegion {
	buf := make([]byte, n)
	mr, err := pd.Register(buf, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead)
	if err != nil {
		b.Fatal(err)
	}
	return benchRegion{buf: buf, mr: mr}
}

func BenchmarkStream(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("TCP/"+s.name, func(b *testing.B) { benchTCPStream(b, s.n) })
		b.Run("RDMAWrite/"+s.name, func(b *testing.B) { benchRDMAStream(b, s.n, driver.OpRDMAWrite) })
		b.Run("Send/"+s.name, func(b *testing.B) { benchRDMAStream(b, s.n, driver.OpSend) })
	}
}

func BenchmarkPingPong(b *testing.B) {
	b.Run("TCP", func(b *testing.B) { benchTCPPingPong(b, false) })
	b.Run("TCPHop", func(b *testing.B) { benchTCPPingPong(b, true) })
	b.Run("Send", func(b *testing.B) { benchRDMAPingPong(b) })
}

// tcpPair returns a connected loopback TCP pair.
func tcpPair(b *testing.B) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func benchTCPStream(b *testing.B, n int) {
	client, server := tcpPair(b)
	msg := make([]byte, n)
	done := make(chan error, 1)
	go func() {
		// The receiver reads each message in full into its buffer, as the
		// RDMA receiver places each message into its own memory.
		buf := make([]byte, n)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(server, buf); err != nil {
				done <- err
				return
			}
		}
		_, err := server.Write([]byte{1})
		done <- err
	}()
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	var ack [1]byte
	if _, err := io.ReadFull(client, ack[:]); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// benchRDMAStream streams b.N Writes or Sends of n bytes with benchDepth
// outstanding; Sends are flow-controlled by the receiver's reposting (the
// credit a real protocol would carry in its messages). The benchmark
// goroutine posts and takes the send completions; a goroutine on the
// responder takes the receive completions and reposts.
func benchRDMAStream(b *testing.B, n int, op driver.Opcode) {
	recvDone := make(chan struct{}, benchCredits+2)
	var dst, src benchRegion
	e := newBenchEnv(b, func(side int, q *iwarp.QP, pd driver.PD) {
		if side == 0 {
			src = benchRegister(b, pd, n)
			return
		}
		dst = benchRegister(b, pd, n*benchCredits)
		for i := range benchCredits {
			if err := q.PostRecv(driver.RecvWR{ID: uint64(i), Local: []driver.SGE{dst.sge(i*n, n)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	e.serve(1, func(c driver.Completion) {
		// Repost the same slot, then grant the credit.
		slot := int(c.WRID)
		if err := e.rsp.PostRecv(driver.RecvWR{ID: c.WRID, Local: []driver.SGE{dst.sge(slot*n, n)}}); err != nil {
			panic(err)
		}
		recvDone <- struct{}{}
	})
	sendCQ := benchCQ{cq: e.cq[0]}
	remote := driver.RemoteSegment{Addr: dst.mr.Addr(), Length: uint32(n), RKey: dst.mr.RKey()}
	credits := benchCredits
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	posted, completed := 0, 0
	for completed < b.N {
		for posted < b.N && posted-completed < benchDepth {
			wr := driver.SendWR{ID: uint64(posted), Op: op, Flags: driver.SendSignaled, Local: []driver.SGE{src.sge(0, n)}}
			if op == driver.OpRDMAWrite {
				wr.Remote = remote
			} else {
				for credits == 0 {
					<-recvDone
					credits++
				}
				credits--
			}
			if err := e.ini.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		if _, ok := sendCQ.next(); !ok {
			b.Fatal("CQ closed")
		}
		completed++
	}
	// A final zero-length Send proves everything arrived.
	for credits == 0 {
		<-recvDone
		credits++
	}
	if err := e.ini.PostSend(driver.SendWR{ID: 1 << 40, Op: driver.OpSend, Flags: driver.SendSignaled}); err != nil {
		b.Fatal(err)
	}
	sendCQ.next()
	want := benchCredits - credits + 1
	if op == driver.OpRDMAWrite {
		want = 1
	}
	for range want {
		<-recvDone
	}
}

func benchTCPPingPong(b *testing.B, hop bool) {
	client, server := tcpPair(b)
	go func() {
		buf := make([]byte, pingSize)
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			if _, err := server.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, pingSize)
	got := make(chan struct{}, 1)
	if hop {
		go func() {
			rb := make([]byte, pingSize)
			for {
				if _, err := io.ReadFull(client, rb); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Write(buf); err != nil {
			b.Fatal(err)
		}
		if hop {
			<-got
		} else if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRDMAPingPong: a goroutine on the responder echoes every Send it
// receives, as the TCP echo server does from its read loop; the
// benchmark goroutine posts each ping and waits for the reply's receive
// completion.
func benchRDMAPingPong(b *testing.B) {
	var ibuf, rbuf benchRegion
	e := newBenchEnv(b, func(side int, q *iwarp.QP, pd driver.PD) {
		r := benchRegister(b, pd, 2*pingSize)
		if err := q.PostRecv(driver.RecvWR{Local: []driver.SGE{r.sge(pingSize, pingSize)}}); err != nil {
			b.Fatal(err)
		}
		if side == 0 {
			ibuf = r
		} else {
			rbuf = r
		}
	})
	e.serve(1, func(c driver.Completion) {
		if c.Op != driver.OpRecv {
			return
		}
		if err := e.rsp.PostRecv(driver.RecvWR{Local: []driver.SGE{rbuf.sge(0, pingSize)}}); err != nil {
			panic(err)
		}
		if err := e.rsp.PostSend(driver.SendWR{Op: driver.OpSend, Local: []driver.SGE{rbuf.sge(0, pingSize)}}); err != nil {
			panic(err)
		}
	})
	w := benchCQ{cq: e.cq[0]}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.ini.PostSend(driver.SendWR{Op: driver.OpSend, Local: []driver.SGE{ibuf.sge(0, pingSize)}}); err != nil {
			b.Fatal(err)
		}
		for {
			c, ok := w.next()
			if !ok {
				b.Fatal("CQ closed")
			}
			if c.Op == driver.OpRecv {
				break
			}
		}
		if err := e.ini.PostRecv(driver.RecvWR{Local: []driver.SGE{ibuf.sge(pingSize, pingSize)}}); err != nil {
			b.Fatal(err)
		}
	}
}
