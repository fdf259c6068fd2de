//go:build verbs && linux && cgo

package verbs_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/dat/verbs"
)

// The lead registers Driver as "verbs"; this test uses its own name so the
// two can coexist in one binary.
func init() { dat.Register("verbs-under-test", verbs.Driver{}) }

const datWait = 20 * time.Second

type datSide struct {
	ia  *dat.IA
	pz  *dat.PZ
	evd *dat.EVD
	buf []byte
	lmr *dat.LMR
	lp  dat.LMRParam
}

func newDatSide(t *testing.T, addr string) *datSide {
	t.Helper()
	ia, err := dat.OpenIA(context.Background(), "verbs-under-test:"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ia.Close(dat.CloseAbrupt); err != nil {
			t.Error(err)
		}
	})
	s := &datSide{ia: ia, buf: make([]byte, 1<<16)}
	if s.pz, err = ia.CreatePZ(); err != nil {
		t.Fatal(err)
	}
	if s.evd, err = ia.CreateEVD(256, dat.EVDDefault); err != nil {
		t.Fatal(err)
	}
	if s.lmr, err = ia.CreateLMR(s.pz, s.buf, dat.MemPrivAll); err != nil {
		t.Fatal(err)
	}
	if s.lp, err = s.lmr.Query(); err != nil {
		t.Fatal(err)
	}
	return s
}

// ep creates an EP with the default attributes plus RDMA Read depths
// (the defaults allow no Reads).
func (s *datSide) ep(t *testing.T) *dat.EP {
	t.Helper()
	probe, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := probe.Query()
	if err != nil {
		t.Fatal(err)
	}
	probe.Free()
	attr := p.Attr
	attr.MaxRDMAReadIn, attr.MaxRDMAReadOut = 4, 4
	ep, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, &attr)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func (s *datSide) iov(off, n int) []dat.LMRTriplet {
	return []dat.LMRTriplet{{Addr: s.lp.Addr + uint64(off), Length: uint32(n), Context: s.lp.Context}}
}

func (s *datSide) wait(t *testing.T, want dat.EventNumber) dat.Event {
	t.Helper()
	ev, _, err := s.evd.Wait(dat.TimeoutOf(datWait), 1)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Number != want {
		t.Fatalf("event %v (%+v %+v), want %v", ev.Number, ev.Conn, ev.DTO, want)
	}
	return ev
}

// TestThroughDAT drives the provider from package dat: connection
// establishment with private data, receives posted before the connection,
// suppressed and signalled sends (dat pairs completions with posts in
// order), RDMA Write and Read, graceful disconnect and flushes.
func TestThroughDAT(t *testing.T) {
	if os.Getenv("IN_RDMA_VM") != "1" {
		t.Skip("needs the RDMA test VM (see TestMain's devices)")
	}
	for _, d := range []struct{ name, addr string }{{"rxe", os.Getenv("RDMA_RXE_ADDR")}, {"siw", os.Getenv("RDMA_SIW_ADDR")}} {
		t.Run(d.name, func(t *testing.T) {
			cli, srv := newDatSide(t, d.addr), newDatSide(t, d.addr)
			psp, err := srv.ia.CreatePSPAny(srv.evd, dat.PSPConsumer, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer psp.Free()
			sep := srv.ep(t)
			for i := 0; i < 4; i++ {
				if err := sep.PostRecv(srv.iov(1024*i, 1024), uint64(100+i), dat.CompletionDefault); err != nil {
					t.Fatal(err)
				}
			}
			cep := cli.ep(t)
			if err := cep.Connect(netip.MustParseAddr(d.addr), psp.Qual(), dat.TimeoutOf(datWait), []byte("hi"), dat.QoSBestEffort, dat.ConnectDefault); err != nil {
				t.Fatal(err)
			}
			cr := srv.wait(t, dat.ConnectionRequestEvent).CR.CR
			crp, err := cr.Query()
			if err != nil || !bytes.HasPrefix(crp.PrivateData, []byte("hi")) {
				t.Fatalf("CR private data %q, %v", crp.PrivateData, err)
			}
			if err := cr.Accept(sep, []byte("welcome")); err != nil {
				t.Fatal(err)
			}
			srv.wait(t, dat.ConnectionEventEstablished)
			if est := cli.wait(t, dat.ConnectionEventEstablished); !bytes.HasPrefix(est.Conn.PrivateData, []byte("welcome")) {
				t.Fatalf("accept private data %q", est.Conn.PrivateData)
			}

			// Three sends, the middle one suppressed: two request events,
			// three receive events, cookies in order.
			copy(cli.buf, "abcdefgh")
			for i, f := range []dat.CompletionFlags{dat.CompletionDefault, dat.CompletionSuppress, dat.CompletionDefault} {
				if err := cep.PostSend(cli.iov(0, 8), uint64(i), f); err != nil {
					t.Fatal(err)
				}
			}
			for _, want := range []uint64{0, 2} {
				if ev := cli.wait(t, dat.DTOCompletionEvent); ev.DTO.Cookie != want || ev.DTO.Status != dat.DTOSuccess {
					t.Fatalf("send event %+v, want cookie %d", ev.DTO, want)
				}
			}
			for i := 0; i < 3; i++ {
				if ev := srv.wait(t, dat.DTOCompletionEvent); ev.DTO.Cookie != uint64(100+i) || ev.DTO.Length != 8 {
					t.Fatalf("receive event %+v", ev.DTO)
				}
			}

			// RDMA Write into the server's buffer, then read it back.
			copy(cli.buf[8192:], "one-sided")
			remote := dat.RMRTriplet{Addr: srv.lp.Addr + 30000, Length: 9, Context: srv.lp.RMRContext}
			if err := cep.PostRDMAWrite(cli.iov(8192, 9), 10, remote, dat.CompletionDefault); err != nil {
				t.Fatal(err)
			}
			cli.wait(t, dat.DTOCompletionEvent)
			if err := cep.PostRDMARead(cli.iov(16384, 9), 11, remote, dat.CompletionDefault); err != nil {
				t.Fatal(err)
			}
			if ev := cli.wait(t, dat.DTOCompletionEvent); ev.DTO.Cookie != 11 || ev.DTO.Status != dat.DTOSuccess {
				t.Fatalf("read event %+v", ev.DTO)
			}
			if string(srv.buf[30000:30009]) != "one-sided" || string(cli.buf[16384:16393]) != "one-sided" {
				t.Fatal("RDMA data mismatch")
			}

			// Graceful disconnect: both sides see DISCONNECTED, the
			// server's last receive flushes.
			if err := cep.Disconnect(dat.CloseGraceful); err != nil {
				t.Fatal(err)
			}
			cli.wait(t, dat.ConnectionEventDisconnected)
			var gotFlush, gotDisc bool
			for !gotFlush || !gotDisc {
				ev, _, err := srv.evd.Wait(dat.TimeoutOf(datWait), 1)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case ev.Number == dat.ConnectionEventDisconnected:
					gotDisc = true
				case ev.Number == dat.DTOCompletionEvent && ev.DTO.Cookie == 103 && ev.DTO.Status == dat.DTOErrFlushed:
					gotFlush = true
				default:
					t.Fatalf("unexpected server event %v %+v", ev.Number, ev.DTO)
				}
			}
			if err := cep.Free(); err != nil {
				t.Fatal(err)
			}
			if err := sep.Free(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
