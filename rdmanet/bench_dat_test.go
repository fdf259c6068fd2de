package rdmanet

import (
	"context"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// BenchmarkDATPingPong is the floor under BenchmarkPingPong: a 64-byte
// Send/Recv round trip straight on package dat, each side waiting on its
// EVD in the benchmark's own goroutines (no rdmanet, no dispatcher hop).
func BenchmarkDATPingPong(b *testing.B) {
	for _, kind := range []string{"iwarp"} {
		b.Run(kindName(kind), func(b *testing.B) {
			ctx := context.Background()
			s, err := acquireIA(ctx, iaName(kind, netipLoopback))
			if err != nil {
				b.Fatal(err)
			}
			defer s.release()
			type end struct {
				evd *dat.EVD
				ep  *dat.EP
				mem *region
			}
			mk := func() *end {
				e := &end{}
				e.evd, _ = s.ia.CreateEVD(64, dat.EVDDefault)
				e.ep, err = s.ia.CreateEP(s.pz, e.evd, e.evd, e.evd, nil)
				if err != nil {
					b.Fatal(err)
				}
				e.mem, err = newRegion(s, 4096, dat.MemPrivLocalWrite|dat.MemPrivLocalRead)
				if err != nil {
					b.Fatal(err)
				}
				return e
			}
			cli, srv := mk(), mk()
			defer func() {
				for _, e := range []*end{cli, srv} {
					e.ep.Free()
					e.evd.Free()
					e.mem.free()
				}
			}()
			crEVD, _ := s.ia.CreateEVD(4, dat.EVDCR)
			defer crEVD.Free()
			psp, err := s.ia.CreatePSPAny(crEVD, dat.PSPConsumer, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer psp.Free()
			recvIOV := func(e *end) []dat.LMRTriplet { return []dat.LMRTriplet{e.mem.triplet(0, 64)} }
			sendIOV := func(e *end) []dat.LMRTriplet { return []dat.LMRTriplet{e.mem.triplet(1024, 64)} }
			for _, e := range []*end{cli, srv} {
				for i := 0; i < 4; i++ {
					e.ep.PostRecv(recvIOV(e), 0, dat.CompletionDefault)
				}
			}
			if err := cli.ep.Connect(netipLoopback, psp.Qual(), dat.TimeoutOf(5*time.Second), nil, dat.QoSBestEffort, dat.ConnectDefault); err != nil {
				b.Fatal(err)
			}
			ev, _, err := crEVD.Wait(dat.TimeoutOf(5*time.Second), 1)
			if err != nil {
				b.Fatal(err)
			}
			ev.CR.CR.Accept(srv.ep, nil)
			for _, e := range []*end{cli, srv} {
				if ev, _, err := e.evd.Wait(dat.TimeoutOf(5*time.Second), 1); err != nil || ev.Number != dat.ConnectionEventEstablished {
					b.Fatal(ev.Number, err)
				}
			}
			// step waits for one receive and re-posts it; send completions
			// are suppressed.
			step := func(e *end, _ bool) {
				for {
					ev, _, err := e.evd.WaitContext(ctx, 1)
					if err != nil {
						b.Error(err)
						return
					}
					if ev.Number == dat.DTOCompletionEvent && ev.DTO.Op == dat.DTOReceive {
						e.ep.PostRecv(recvIOV(e), 0, dat.CompletionDefault)
						return
					}
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < b.N; i++ {
					step(srv, false)
					srv.ep.PostSend(sendIOV(srv), 1, dat.CompletionSuppress)
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cli.ep.PostSend(sendIOV(cli), 1, dat.CompletionSuppress)
				step(cli, false)
			}
			b.StopTimer()
			<-done
			cli.ep.Disconnect(dat.CloseAbrupt)
		})
	}
}
