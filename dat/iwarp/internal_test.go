package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

func TestResponderLimits(t *testing.T) {
	cases := []struct{ qpIRD, qpORD, peerIRD, peerORD, ird, ord int }{
		{1, 1, 1, 1, 1, 1},       // rping
		{2, 16, 4, 8, 8, 4},      // ORD lowered to peer IRD, IRD raised to peer ORD
		{16, 2, 4, 8, 16, 2},     // nothing to relax
		{1, 1, 300, 300, 128, 1}, // peer values capped at the maxima
		{0, 0, 0, 0, 0, 0},       // no RDMA Reads at all
		{128, 128, 0, 5, 128, 0}, // peer accepts no Reads: our ORD must be 0
	}
	for _, c := range cases {
		ird, ord := responderLimits(c.qpIRD, c.qpORD, c.peerIRD, c.peerORD)
		if ird != c.ird || ord != c.ord {
			t.Errorf("responderLimits(%d,%d, peer %d,%d) = %d,%d, want %d,%d",
				c.qpIRD, c.qpORD, c.peerIRD, c.peerORD, ird, ord, c.ird, c.ord)
		}
	}
}

func TestInitiatorLimits(t *testing.T) {
	cases := []struct {
		qpIRD, repIRD, repORD, ird, ord int
		fail                            bool
	}{
		{1, 1, 1, 1, 1, false},
		{4, 8, 4, 4, 8, false},       // adopt the reply's values, swapped
		{4, 8, 100, 100, 8, false},   // relaxed: IRD raised within the maximum
		{4, 200, 2, 2, 128, false},   // ORD capped at the maximum
		{4, 1, 129, 0, 0, true},      // insufficient IRD (siw Terminate 6)
		{129, 1, 129, 129, 1, false}, // unreachable via CreateQP, but not "insufficient"
	}
	for _, c := range cases {
		ird, ord, err := initiatorLimits(c.qpIRD, c.repIRD, c.repORD)
		if (err != nil) != c.fail || (!c.fail && (ird != c.ird || ord != c.ord)) {
			t.Errorf("initiatorLimits(%d, reply %d,%d) = %d,%d,%v, want %d,%d fail=%v",
				c.qpIRD, c.repIRD, c.repORD, ird, ord, err, c.ird, c.ord, c.fail)
		}
	}
}

func TestChooseRTR(t *testing.T) {
	cases := []struct {
		p2p, w, r bool
		want      RTRMode
	}{
		{false, true, true, RTRNone},
		{true, true, true, RTRWrite},
		{true, false, true, RTRRead},
		{true, false, false, RTRWrite},
	}
	for _, c := range cases {
		if got := chooseRTR(c.p2p, c.w, c.r); got != c.want {
			t.Errorf("chooseRTR(%v,%v,%v) = %v, want %v", c.p2p, c.w, c.r, got, c.want)
		}
	}
}

// TestClassify covers the outcomes that cannot be produced on loopback.
func TestClassify(t *testing.T) {
	bg := context.Background()
	sys := func(e syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", e)}
	}
	aborted, abort := context.WithCancelCause(bg)
	abort(ErrAborted)
	expired, cancel := context.WithTimeout(bg, 0)
	defer cancel()

	cases := []struct {
		name      string
		ctx, actx context.Context
		err       error
		ctxBound  bool
		want      []error
		not       []error
	}{
		{"host unreachable", bg, bg, sys(syscall.EHOSTUNREACH), false, []error{driver.ErrUnreachable, syscall.EHOSTUNREACH}, nil},
		{"net unreachable", bg, bg, sys(syscall.ENETUNREACH), false, []error{driver.ErrUnreachable}, nil},
		{"SYN timeout", bg, bg, sys(syscall.ETIMEDOUT), false, []error{driver.ErrUnreachable}, nil},
		{"refused", bg, bg, sys(syscall.ECONNREFUSED), false, []error{syscall.ECONNREFUSED}, []error{driver.ErrUnreachable}},
		{"reset", bg, bg, sys(syscall.ECONNRESET), false, []error{syscall.ECONNRESET}, []error{driver.ErrUnreachable}},
		{"EOF", bg, bg, fmt.Errorf("MPA reply: %w", io.EOF), false, []error{io.EOF}, []error{driver.ErrUnreachable}},
		{"reply timeout", bg, bg, os.ErrDeadlineExceeded, false, []error{driver.ErrUnreachable}, []error{context.DeadlineExceeded}},
		{"caller deadline first", bg, bg, os.ErrDeadlineExceeded, true, []error{context.DeadlineExceeded}, []error{driver.ErrUnreachable}},
		{"caller deadline", expired, expired, os.ErrDeadlineExceeded, false, []error{context.DeadlineExceeded}, []error{driver.ErrUnreachable}},
		{"local abort", bg, aborted, os.ErrDeadlineExceeded, false, []error{ErrAborted}, []error{driver.ErrUnreachable, context.DeadlineExceeded}},
	}
	for _, c := range cases {
		err := classify(c.ctx, c.actx, c.err, c.ctxBound, DefaultReplyTimeout)
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v does not wrap %v", c.name, err, w)
			}
		}
		for _, w := range c.not {
			if errors.Is(err, w) {
				t.Errorf("%s: %v wraps %v", c.name, err, w)
			}
		}
	}
}

func TestSTagTable(t *testing.T) {
	tab := newSTagTable(3)
	mrs := make([]*MR, 4)
	for i := range mrs {
		mrs[i] = &MR{}
	}
	for i := 0; i < 3; i++ {
		stag, ok := tab.alloc(mrs[i])
		if !ok || stag>>8 != uint32(i+1) {
			t.Fatalf("alloc %d: %#x %v", i, stag, ok)
		}
		mrs[i].stag = stag
	}
	if _, ok := tab.alloc(mrs[3]); ok {
		t.Fatal("alloc beyond the limit")
	}
	if tab.lookup(mrs[1].stag) != mrs[1] || tab.lookup(mrs[1].stag^0xFF) != nil || tab.lookup(0) != nil {
		t.Fatal("lookup by STag is wrong")
	}
	tab.release(mrs[1].stag)
	if tab.lookup(mrs[1].stag) != nil {
		t.Fatal("released STag still found")
	}
	stag, ok := tab.alloc(mrs[3])
	if !ok || stag>>8 != mrs[1].stag>>8 {
		t.Fatalf("freed index not reused: %#x", stag)
	}
}

func TestMRSliceAndPDLookup(t *testing.T) {
	ia := newIA(defaultOptions())
	defer ia.Close()
	dpd, _ := ia.AllocPD()
	pd := dpd.(*PD)
	buf := make([]byte, 16)
	dmr, _ := pd.Register(buf, driver.AccessRemoteWrite)
	mr := dmr.(*MR)
	if pd.lookup(mr.RKey()) != mr || ia.stags.lookup(mr.RKey()) != mr {
		t.Fatal("region not found by its STag")
	}
	if b, ok := mr.slice(mr.Addr()+4, 12); !ok || &b[0] != &buf[4] || len(b) != 12 {
		t.Fatal("in-bounds slice refused")
	}
	for _, c := range []struct {
		off uint64
		n   uint32
	}{{0, 17}, {16, 1}, {17, 0}, {^uint64(0) - mr.Addr(), 2}} {
		if _, ok := mr.slice(mr.Addr()+c.off, c.n); ok {
			t.Errorf("slice(+%d, %d) accepted", c.off, c.n)
		}
	}
	if _, ok := mr.slice(mr.Addr()-1, 1); ok {
		t.Error("slice below the region accepted")
	}
	mr.Close()
	if pd.lookup(mr.RKey()) != nil || ia.stags.lookup(mr.RKey()) != nil {
		t.Fatal("closed region still found")
	}
}

func TestSRQTakeWatermark(t *testing.T) {
	ia := newIA(defaultOptions())
	defer ia.Close()
	pd, _ := ia.AllocPD()
	low := 0
	ds, _ := ia.CreateSRQ(pd, driver.SRQConfig{MaxRecvWR: 4, LowWatermark: 2, OnLowWatermark: func() { low++ }})
	s := ds.(*SRQ)
	for i := 0; i < 3; i++ {
		s.PostRecv(driver.RecvWR{ID: uint64(i)})
	}
	for i := 0; i < 3; i++ {
		wr, ok := s.take()
		if !ok || wr.id != uint64(i) {
			t.Fatalf("take %d: %+v %v", i, wr, ok)
		}
	}
	if _, ok := s.take(); ok {
		t.Fatal("take from an empty SRQ")
	}
	if low != 1 {
		t.Fatalf("OnLowWatermark called %d times, want once", low)
	}
}

// TestStartupGate: the initiator may send at once; the responder only
// after the initiator's first complete FPDU arrived (a partial one is not
// enough).
func TestStartupGate(t *testing.T) {
	ctx := context.Background()
	ia := newIA(defaultOptions())
	ia.opts.ip = net.IPv4(127, 0, 0, 1)
	defer ia.Close()
	dl, err := ia.Listen(driver.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	pd, _ := ia.AllocPD()
	cfg := driver.QPConfig{PD: pd, MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	iq, _ := ia.CreateQP(cfg)
	rq, _ := ia.CreateQP(cfg)
	ini, resp := iq.(*QP), rq.(*QP)
	if err := resp.PostRecv(driver.RecvWR{ID: 1}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := ini.Connect(ctx, dl.Addr(), nil)
		errc <- err
	}()
	req, err := dl.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := req.Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	select {
	case <-ini.canSend():
	default:
		t.Fatal("initiator may not send")
	}
	select {
	case <-resp.canSend():
		t.Fatal("responder may send before the initiator's first FPDU")
	default:
	}
	if info, _ := ini.ConnInfo(); !info.Initiator {
		t.Fatal("initiator not marked")
	}
	// The initiator's first FPDU (a zero-length Send), written by hand in
	// two pieces: the first piece must not open the gate.
	f := wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}}
	fpdu, _ := f.Append(nil, false)
	ini.mu.Lock()
	tc := ini.conn.tc
	ini.mu.Unlock()
	if _, err := tc.Write(fpdu[:10]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resp.canSend():
		t.Fatal("responder's gate opened by a partial FPDU")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := tc.Write(fpdu[10:]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resp.canSend():
	case <-time.After(10 * time.Second):
		t.Fatal("responder's gate still closed after the initiator's first FPDU")
	}
}

// TestReadCompletesAfterItsBatch: a Read whose Response is placed before
// the writer finished the batch that carried its Request (the writer was
// descheduled between the writev and taking the lock) completes only when
// the writer does, after the unsignalled Write written ahead of it, whose
// send-queue slot is free by then; answered after the batch finished, it
// completes at once.
func TestReadCompletesAfterItsBatch(t *testing.T) {
	for _, answeredFirst := range []bool{true, false} {
		q := &QP{}
		cq := newCQ(0)
		c := &connection{q: q, scq: cq, tag: 7}
		c.tx = &sender{c: c}
		write := &sendWR{id: 1, op: driver.OpRDMAWrite}
		read := &sendWR{id: 2, op: driver.OpRDMARead, flags: driver.SendSignaled, total: 64}
		c.outstanding = 2
		c.tx.items = append(c.tx.items, txItem{wr: write}, txItem{wr: read, read: true})
		c.tx.done = 2
		c.reads.push(read)

		respond := func() {
			c.reads.pop()
			read.status = driver.StatusSuccess
			c.readDoneLocked(read)
		}
		if answeredFirst {
			respond()
			if cq.Len() != 0 || c.outstanding != 2 {
				t.Fatalf("Read completed (%d in the CQ, %d outstanding) before the batch ahead of it", cq.Len(), c.outstanding)
			}
			c.tx.finishLocked()
		} else {
			c.tx.finishLocked()
			if cq.Len() != 0 || c.outstanding != 1 {
				t.Fatalf("after the batch: %d in the CQ, %d outstanding; want 0 and 1", cq.Len(), c.outstanding)
			}
			respond()
		}
		var dst [2]driver.Completion
		if n := cq.Poll(dst[:]); n != 1 || dst[0].WRID != 2 || dst[0].QPTag != 7 || dst[0].Length != 64 || dst[0].Status != driver.StatusSuccess {
			t.Fatalf("answered first %v: %d completions %+v, want the Read's alone", answeredFirst, n, dst[:n])
		}
		if c.outstanding != 0 || len(c.tx.items) != 0 {
			t.Fatalf("answered first %v: %d outstanding, %d items left", answeredFirst, c.outstanding, len(c.tx.items))
		}
		cq.Close()
	}
}

// TestSegmentsAuto: with mulpdu=auto a sender asks the socket for its MSS
// only for a message that could need more than one segment, and sizes
// segments from it as autoMULPDU does; an explicit mulpdu is used as is.
func TestSegmentsAuto(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := newSender(&connection{tc: nc.(*net.TCPConn)})
	if got := s.segments(smallest, false); got != smallest || s.segTagged != 0 {
		t.Fatalf("a %d-byte message: segment %d, sizes known %v", smallest, got, s.segTagged != 0)
	}
	want := newSender(&connection{mulpdu: autoMULPDU(nc.(*net.TCPConn))})
	if got := s.segments(smallest+1, true); got != want.segTagged || s.segUntagged != want.segUntagged {
		t.Fatalf("segments %d/%d, want %d/%d", s.segTagged, s.segUntagged, want.segTagged, want.segUntagged)
	}
	fixed := newSender(&connection{mulpdu: 1000})
	if fixed.segments(1, true) != (1000-14)&^7 || fixed.segments(1, false) != (1000-18)&^7 {
		t.Fatalf("mulpdu=1000: segments %d/%d", fixed.segTagged, fixed.segUntagged)
	}
}
