package iwarp_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func TestConnectAcceptPrivateData(t *testing.T) {
	leakCheck(t)
	for _, n := range []int{0, 1, iwarp.MaxPrivateData} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := testCtx(t)
			ia := openIA(t)
			l := listen(t, ia, driver.ListenConfig{})
			ini := newQP(t, ia, defaultQPConfig, nil)
			resp := newQP(t, ia, defaultQPConfig, nil)
			reqPD, repPD := pattern(n), bytes.Repeat([]byte{0xA5}, n)

			ch := connectAsync(ctx, ini, l.Addr(), reqPD)
			r := accept(t, ctx, l)
			info := r.Info()
			if !bytes.Equal(info.PrivateData, reqPD) {
				t.Fatalf("request private data %x, want %x", info.PrivateData, reqPD)
			}
			if info.IRD != 1 || info.ORD != 1 {
				t.Fatalf("request IRD/ORD = %d/%d, want 1/1", info.IRD, info.ORD)
			}
			if info.Local.String() != l.Addr().String() || info.Remote == nil {
				t.Fatalf("request addresses %v <- %v, listener %v", info.Local, info.Remote, l.Addr())
			}
			acc, err := r.Accept(ctx, resp, repPD)
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			res := waitConnect(t, ch)
			if res.err != nil {
				t.Fatalf("connect: %v", res.err)
			}
			if !bytes.Equal(res.res.PrivateData, repPD) {
				t.Fatalf("accept private data %x, want %x", res.res.PrivateData, repPD)
			}
			if acc.PrivateData != nil {
				t.Fatalf("accepting side got private data %x", acc.PrivateData)
			}

			il, ir := res.res.Local, res.res.Remote
			rl, rr := acc.Local, acc.Remote
			if il == nil || ir == nil || il.String() != rr.String() || ir.String() != rl.String() {
				t.Fatalf("addresses do not match: initiator %v->%v, responder %v->%v", il, ir, rl, rr)
			}
			if rr.String() != info.Remote.String() {
				t.Fatalf("responder remote %v, request from %v", rr, info.Remote)
			}
			if ir.String() != l.Addr().String() {
				t.Fatalf("initiator remote %v, listener %v", ir, l.Addr())
			}
			ii, _ := ini.ConnInfo()
			ri, _ := resp.ConnInfo()
			if !ii.Initiator || ri.Initiator || ii.Revision != 2 || ri.Revision != 2 || !ii.Enhanced || !ri.Enhanced || ii.CRC || ri.CRC {
				t.Fatalf("conn info: initiator %+v, responder %+v", ii, ri)
			}
		})
	}
}

func TestPrivateDataTooLong(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	ini := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)
	long := pattern(iwarp.MaxPrivateData + 1)

	_, err := ini.Connect(ctx, l.Addr(), long)
	if err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("connect with %d bytes: %v, want a length error", len(long), err)
	}
	// The refused call left the QP unconnected: a normal connect works.
	ch := connectAsync(ctx, ini, l.Addr(), nil)
	r := accept(t, ctx, l)
	if _, err := r.Accept(ctx, resp, long); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("accept with %d bytes: %v, want a length error", len(long), err)
	}
	if err := r.Reject(long); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("reject with %d bytes: %v, want a length error", len(long), err)
	}
	// Still pending: a valid accept goes through.
	if _, err := r.Accept(ctx, resp, nil); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatalf("connect: %v", res.err)
	}
	if _, err := r.Accept(ctx, resp, nil); err == nil {
		t.Fatal("second accept of the same request succeeded")
	}
}

func TestReject(t *testing.T) {
	leakCheck(t)
	for _, n := range []int{0, 5, iwarp.MaxPrivateData} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := testCtx(t)
			ia := openIA(t)
			l := listen(t, ia, driver.ListenConfig{})
			ini := newQP(t, ia, defaultQPConfig, nil)
			pd := pattern(n)

			ch := connectAsync(ctx, ini, l.Addr(), []byte("hello"))
			r := accept(t, ctx, l)
			if err := r.Reject(pd); err != nil {
				t.Fatalf("reject: %v", err)
			}
			res := waitConnect(t, ch)
			var rej *driver.RejectError
			if !errors.As(res.err, &rej) {
				t.Fatalf("connect: %v, want a *driver.RejectError", res.err)
			}
			if !bytes.Equal(rej.PrivateData, pd) && !(n == 0 && len(rej.PrivateData) == 0) {
				t.Fatalf("reject private data %x, want %x", rej.PrivateData, pd)
			}
			if !strings.Contains(res.err.Error(), "iwarp: connect "+l.Addr().String()) {
				t.Fatalf("error %q does not say what failed", res.err)
			}
			// A QP connects at most once: a rejected one cannot try
			// again; package dat makes a new QP.
			if _, err := ini.Connect(ctx, l.Addr(), nil); !errors.Is(err, driver.ErrNotConnected) {
				t.Fatalf("second connect of a QP: %v, want ErrNotConnected", err)
			}
			ini = newQP(t, ia, defaultQPConfig, nil)
			ch = connectAsync(ctx, ini, l.Addr(), nil)
			r = accept(t, ctx, l)
			if err := r.Reject(nil); err != nil {
				t.Fatal(err)
			}
			if res := waitConnect(t, ch); !errors.As(res.err, &rej) {
				t.Fatalf("second connect: %v, want a reject", res.err)
			}
		})
	}
}

func TestNobodyListening(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	// Take a free port and release it: nobody listens there now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr()
	ln.Close()

	q := newQP(t, ia, defaultQPConfig, nil)
	_, err = q.Connect(ctx, addr, nil)
	assertNonPeer(t, err)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect: %v, want ECONNREFUSED in the chain", err)
	}
}

func TestConnectInvalidAddress(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	for _, a := range []net.Addr{nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.TCPAddr{Port: 5}} {
		if _, err := q.Connect(ctx, a, nil); !errors.Is(err, driver.ErrInvalidAddress) {
			t.Errorf("connect %v: %v, want ErrInvalidAddress", a, err)
		}
	}
}

func TestMPARevision1(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ini := openIA(t, "mpa_rev=1")
	resp := openIA(t)
	l := listen(t, resp, driver.ListenConfig{})
	iq := newQP(t, ini, driver.QPConfig{MaxRecvWR: 1, IRD: 3, ORD: 5}, nil)
	rq := newQP(t, resp, driver.QPConfig{MaxRecvWR: 1, IRD: 7, ORD: 2}, nil)

	ch := connectAsync(ctx, iq, l.Addr(), []byte("v1"))
	r := accept(t, ctx, l)
	if info := r.Info(); info.IRD != iwarp.MaxIRD || info.ORD != iwarp.MaxORD {
		t.Fatalf("rev 1 request IRD/ORD = %d/%d, want the maxima", info.IRD, info.ORD)
	}
	if string(r.Info().PrivateData) != "v1" {
		t.Fatalf("private data %q", r.Info().PrivateData)
	}
	if _, err := r.Accept(ctx, rq, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	res := waitConnect(t, ch)
	if res.err != nil || string(res.res.PrivateData) != "ok" {
		t.Fatalf("connect: %v %q", res.err, res.res.PrivateData)
	}
	ii, _ := iq.ConnInfo()
	ri, _ := rq.ConnInfo()
	// Without the v2 block each side keeps its own depths.
	if ii.Revision != 1 || ri.Revision != 1 || ii.Enhanced || ri.Enhanced || ii.IRD != 3 || ii.ORD != 5 || ri.IRD != 7 || ri.ORD != 2 {
		t.Fatalf("conn info: initiator %+v, responder %+v", ii, ri)
	}
}

// TestMPARevision1Raw checks the bytes of the Reply to a hand-made rev 1
// Request: revision 1, no E, no v2 block.
func TestMPARevision1Raw(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	q := newQP(t, ia, defaultQPConfig, nil)
	c := dialRaw(t, l.Addr())
	if _, err := c.Write(mpaFrame(keyReq, 0, 1, []byte("abc"))); err != nil {
		t.Fatal(err)
	}
	r := accept(t, ctx, l)
	if string(r.Info().PrivateData) != "abc" {
		t.Fatalf("private data %q", r.Info().PrivateData)
	}
	if _, err := r.Accept(ctx, q, []byte("xyz")); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	if f.key != keyRep || f.rev != 1 || f.flags != 0 || string(f.pd) != "xyz" {
		t.Fatalf("reply %+v", f)
	}
}

func TestCRCNegotiation(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name        string
		ini, resp   []string
		want        bool
		wantReqFlag bool
	}{
		{"off", nil, nil, false, false},
		{"initiator asks", []string{"crc=1"}, nil, true, true},
		{"responder requires", nil, []string{"crc=1"}, true, false},
		{"both", []string{"crc=1"}, []string{"crc=1"}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, openIA(t, tc.ini...), openIA(t, tc.resp...), defaultQPConfig, defaultQPConfig)
			ii, _ := p.ini.ConnInfo()
			ri, _ := p.resp.ConnInfo()
			if ii.CRC != tc.want || ri.CRC != tc.want {
				t.Fatalf("CRC initiator %v responder %v, want %v", ii.CRC, ri.CRC, tc.want)
			}
		})
	}
	t.Run("raw request with C", func(t *testing.T) {
		ctx := testCtx(t)
		ia := openIA(t)
		l := listen(t, ia, driver.ListenConfig{})
		q := newQP(t, ia, defaultQPConfig, nil)
		c := dialRaw(t, l.Addr())
		c.Write(mpaFrame(keyReq, flagC|flagE, 2, v2Block(1, 1)))
		if _, err := accept(t, ctx, l).Accept(ctx, q, nil); err != nil {
			t.Fatal(err)
		}
		f, err := readFrame(c)
		if err != nil || f.flags != flagC|flagE || f.rev != 2 {
			t.Fatalf("reply %+v %v, want C|E rev 2", f, err)
		}
	})
	t.Run("initiator refuses reply without C", func(t *testing.T) {
		ctx := testCtx(t)
		ia := openIA(t, "crc=1")
		rl := newRawListener(t, func(c net.Conn) {
			if f, err := readFrame(c); err == nil && f.flags&flagC != 0 {
				c.Write(mpaFrame(keyRep, flagE, 2, v2Block(1, 1)))
			}
			readFrame(c) // wait for the initiator to go away
		})
		_, err := newQP(t, ia, defaultQPConfig, nil).Connect(ctx, rl.Addr(), nil)
		assertNonPeer(t, err)
	})
}

func TestIRDORDNegotiation(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	iq := newQP(t, ia, driver.QPConfig{MaxRecvWR: 1, IRD: 4, ORD: 8}, nil)
	rq := newQP(t, ia, driver.QPConfig{MaxRecvWR: 1, IRD: 2, ORD: 16}, nil)
	ch := connectAsync(ctx, iq, l.Addr(), nil)
	r := accept(t, ctx, l)
	if info := r.Info(); info.IRD != 4 || info.ORD != 8 {
		t.Fatalf("request IRD/ORD %d/%d, want 4/8", info.IRD, info.ORD)
	}
	if _, err := r.Accept(ctx, rq, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
	// Responder: ORD := min(16, peer IRD 4) = 4, IRD := max(2, peer ORD 8) = 8.
	// Initiator adopts IRD := reply ORD = 4, ORD := reply IRD = 8.
	ii, _ := iq.ConnInfo()
	ri, _ := rq.ConnInfo()
	if ri.IRD != 8 || ri.ORD != 4 || ii.IRD != 4 || ii.ORD != 8 {
		t.Fatalf("responder %d/%d (want 8/4), initiator %d/%d (want 4/8)", ri.IRD, ri.ORD, ii.IRD, ii.ORD)
	}
}

// TestIRDORDRaw drives the responder with hand-made Requests: values over
// the maxima are capped, and peer-to-peer requests get siw's RTR choice.
func TestIRDORDRaw(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name             string
		reqIRD, reqORD   uint16
		wantIRD, wantORD uint16
		wantRTR          iwarp.RTRMode
	}{
		{"over max", 200, 300, 128, 1, iwarp.RTRNone},
		{"p2p write", 0x8000 | 2, 0x8000 | 2, 2, 1, iwarp.RTRWrite},
		{"p2p read", 0x8000 | 2, 0x4000 | 2, 2, 1, iwarp.RTRRead},
		{"p2p both", 0x8000 | 2, 0xC000 | 2, 2, 1, iwarp.RTRWrite},
		{"p2p none offered", 0x8000 | 2, 2, 2, 1, iwarp.RTRWrite},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			ia := openIA(t)
			l := listen(t, ia, driver.ListenConfig{})
			q := newQP(t, ia, defaultQPConfig, nil) // IRD 1, ORD 1
			c := dialRaw(t, l.Addr())
			c.Write(mpaFrame(keyReq, flagE, 2, v2Block(tc.reqIRD, tc.reqORD)))
			if _, err := accept(t, ctx, l).Accept(ctx, q, nil); err != nil {
				t.Fatal(err)
			}
			f, err := readFrame(c)
			if err != nil || len(f.pd) != 4 {
				t.Fatalf("reply %+v %v", f, err)
			}
			want := v2Block(tc.wantIRD, tc.wantORD)
			switch tc.wantRTR {
			case iwarp.RTRWrite:
				want = v2Block(0x8000|tc.wantIRD, 0x8000|tc.wantORD)
			case iwarp.RTRRead:
				want = v2Block(0x8000|tc.wantIRD, 0x4000|tc.wantORD)
			}
			if !bytes.Equal(f.pd, want) {
				t.Fatalf("v2 block %x, want %x", f.pd, want)
			}
			info, _ := q.ConnInfo()
			if info.RTR != tc.wantRTR || info.IRD != int(tc.wantIRD) || info.ORD != int(tc.wantORD) {
				t.Fatalf("conn info %+v", info)
			}
		})
	}
}

// TestInitiatorReplyChecks feeds the initiator bad Replies from a raw
// responder; each is a non-peer failure.
func TestInitiatorReplyChecks(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name  string
		reply []byte
	}{
		{"wrong key", mpaFrame(keyReq, flagE, 2, v2Block(1, 1))},
		{"markers", mpaFrame(keyRep, flagM|flagE, 2, v2Block(1, 1))},
		{"rev 1 to rev 2", mpaFrame(keyRep, 0, 1, nil)},
		{"no E", mpaFrame(keyRep, 0, 2, nil)},
		{"rev 3", mpaFrame(keyRep, flagE, 3, v2Block(1, 1))},
		{"PD too long", mpaFrame(keyRep, flagE, 2, make([]byte, 257))},
		{"insufficient IRD", mpaFrame(keyRep, flagE, 2, v2Block(1, 200))},
		{"truncated", mpaFrame(keyRep, flagE, 2, v2Block(1, 1))[:22]},
		{"bytes behind the Reply", append(mpaFrame(keyRep, flagE, 2, v2Block(1, 1)), "an early FPDU"...)},
		{"closed", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			ia := openIA(t)
			rl := newRawListener(t, func(c net.Conn) {
				if _, err := readFrame(c); err != nil {
					return
				}
				c.Write(tc.reply)
				c.Close()
			})
			_, err := newQP(t, ia, defaultQPConfig, nil).Connect(ctx, rl.Addr(), nil)
			assertNonPeer(t, err)
		})
	}
}
