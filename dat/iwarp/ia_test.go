package iwarp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

func TestAttr(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	a := ia.Attr()
	if a.Transport != driver.TransportIWARP || a.MaxPrivateData != 252 || a.MaxIRD != 128 || a.MaxORD != 128 ||
		a.MaxReadSGE != 1 || a.MaxSRQWR == 0 || !a.SRQPDDifference || a.Name != "iwarp:127.0.0.1" {
		t.Fatalf("attributes %+v", a)
	}
	if la := a.LocalAddr.(*net.TCPAddr); !la.IP.Equal(net.IPv4(127, 0, 0, 1)) || la.Port != 0 {
		t.Fatalf("local address %v", la)
	}
	// The optional capabilities are there.
	var dia driver.IA = ia
	if _, ok := dia.(driver.SRQCreator); !ok {
		t.Error("the IA is no driver.SRQCreator")
	}
	pd, err := ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pd.(driver.WindowAllocator); !ok {
		t.Error("the PD is no driver.WindowAllocator")
	}
	var q driver.QP = newQP(t, ia, defaultQPConfig, nil)
	if _, ok := q.(driver.WindowBinder); !ok {
		t.Error("the QP is no driver.WindowBinder")
	}
}

// TestRegistered: importing the package registers the provider.
func TestRegistered(t *testing.T) {
	d, ok := driver.Lookup("iwarp")
	if !ok {
		t.Fatal(`no provider registered as "iwarp"`)
	}
	if _, ok := d.(iwarp.Driver); !ok {
		t.Fatalf(`"iwarp" is a %T`, d)
	}
}

func TestOpenArgs(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	good := [][]string{
		nil,
		{""},
		{"0.0.0.0"},
		{"lo"},
		{"127.0.0.1", "crc=1", "mpa_rev=1", "backlog=3", "max_handshakes=9", "req_timeout=1s", "rep_timeout=2s", "close_timeout=3s"},
		{"crc=0"},
	}
	for _, args := range good {
		ia, err := iwarp.Driver{}.Open(ctx, args)
		if err != nil {
			t.Errorf("open %q: %v", args, err)
			continue
		}
		ia.Close()
	}
	bad := [][]string{
		{"127.0.0.1", "nonsense"},
		{"127.0.0.1", "colour=blue"},
		{"127.0.0.1", "mpa_rev=3"},
		{"127.0.0.1", "backlog=0"},
		{"127.0.0.1", "req_timeout=soon"},
		{"127.0.0.1", "crc=maybe"},
	}
	for _, args := range bad {
		if ia, err := (iwarp.Driver{}).Open(ctx, args); err == nil {
			ia.Close()
			t.Errorf("open %q succeeded", args)
		}
	}
	for _, addr := range []string{"192.0.2.1", "no-such-interface0"} {
		if _, err := (iwarp.Driver{}).Open(ctx, []string{addr}); !errors.Is(err, driver.ErrInvalidAddress) {
			t.Errorf("open %q: %v, want ErrInvalidAddress", addr, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (iwarp.Driver{}).Open(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("open with a cancelled context: %v", err)
	}
}

// TestUnboundIA: without an address the IA connects from whatever address
// the kernel picks (and would listen on every address).
func TestUnboundIA(t *testing.T) {
	leakCheck(t)
	dia, err := iwarp.Driver{}.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ia := dia.(*iwarp.IA)
	t.Cleanup(func() { ia.Close() })
	if la := ia.Attr().LocalAddr; !la.(*net.TCPAddr).IP.IsUnspecified() {
		t.Fatalf("local address %v", la)
	}
	// (Tests stay on 127.0.0.1, so only the dialing side is unbound.)
	p := connectPair(t, ia, openIA(t), defaultQPConfig, defaultQPConfig)
	if info, _ := p.ini.ConnInfo(); !info.Local.(*net.TCPAddr).IP.IsLoopback() {
		t.Fatalf("local address %v", info.Local)
	}
}

func TestRegister(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	pd, err := ia.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	seen := map[uint32]bool{}
	var mrs []driver.MR
	for i := 0; i < 50; i++ {
		mr, err := pd.Register(buf[i:], driver.AccessLocalWrite|driver.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		mrs = append(mrs, mr)
		if mr.Addr() != uint64(uintptr(unsafe.Pointer(&buf[i]))) {
			t.Fatalf("Addr %#x, want the address of buf[%d]", mr.Addr(), i)
		}
		if mr.RKey() == 0 || mr.RKey() == 1 || mr.LKey() != mr.RKey() {
			t.Fatalf("keys L %#x R %#x", mr.LKey(), mr.RKey())
		}
		if seen[mr.RKey()>>8] {
			t.Fatalf("STag index %#x reused while live", mr.RKey()>>8)
		}
		seen[mr.RKey()>>8] = true
	}
	for _, mr := range mrs {
		if err := mr.Close(); err != nil {
			t.Fatal(err)
		}
		if err := mr.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
	if _, err := pd.Register(nil, 0); err != nil {
		t.Fatalf("zero-length region: %v", err)
	}
	pd.Close()
	if _, err := pd.Register(buf, 0); err == nil {
		t.Fatal("register on a closed PD succeeded")
	}
}

// foreignCQ is a CQ of some other provider.
type foreignCQ struct{ driver.CQ }

func TestCreateQPValidation(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	other := openIA(t)
	opd, _ := other.AllocPD()
	bad := []driver.QPConfig{
		{IRD: 129},
		{ORD: -1},
		{MaxSendWR: 1 << 20},
		{MaxRecvSGE: 7},
		{PD: opd},
		{SendCQ: foreignCQ{}},
		{RecvCQ: foreignCQ{}},
	}
	for _, cfg := range bad {
		if q, err := ia.CreateQP(cfg); err == nil {
			q.Close()
			t.Errorf("create QP %+v succeeded", cfg)
		}
	}
}

func TestSRQ(t *testing.T) {
	leakCheck(t)
	ia := openIA(t)
	pd, _ := ia.AllocPD()
	if _, err := ia.CreateSRQ(pd, driver.SRQConfig{MaxRecvWR: 0}); err == nil {
		t.Fatal("SRQ without receives created")
	}
	s, err := ia.CreateSRQ(pd, driver.SRQConfig{MaxRecvWR: 2, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.PostRecv(driver.RecvWR{ID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PostRecv(driver.RecvWR{}); !errors.Is(err, driver.ErrQueueFull) {
		t.Fatalf("third receive: %v, want ErrQueueFull", err)
	}
	if s.Posted() != 2 {
		t.Fatalf("Posted %d", s.Posted())
	}
	if err := s.SetLowWatermark(1); err != nil {
		t.Fatal(err)
	}
	// A QP on the SRQ (in another PD: SRQPDDifference) takes its receives
	// from it and refuses its own.
	pd2, _ := ia.AllocPD()
	q := newQP(t, ia, driver.QPConfig{PD: pd2, SRQ: s, MaxRecvSGE: 1}, nil)
	if err := q.PostRecv(driver.RecvWR{}); !errors.Is(err, driver.ErrNotSupported) {
		t.Fatalf("post recv on an SRQ QP: %v", err)
	}
	s.Close()
}

func TestIACloseClosesEverything(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	connectPair(t, ia, ia, defaultQPConfig, defaultQPConfig)
	pending := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, pending, l.Addr(), nil)
	waitQueued(t, l, 1)
	if err := ia.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitConnect(t, ch).err; err == nil {
		t.Fatal("connect to a closed IA's listener succeeded")
	}
	if _, err := ia.AllocPD(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("alloc PD on a closed IA: %v", err)
	}
	if _, err := ia.Listen(driver.ListenConfig{}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listen on a closed IA: %v", err)
	}
	if err := ia.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestMULPDUOption(t *testing.T) {
	for _, bad := range []string{"mulpdu=63", "mulpdu=65536", "mulpdu=x", "mulpdu=0"} {
		if _, err := (iwarp.Driver{}).Open(context.Background(), []string{"127.0.0.1", bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for _, good := range []string{"mulpdu=64", "mulpdu=65535", "mulpdu=auto"} {
		ia, err := (iwarp.Driver{}).Open(context.Background(), []string{"127.0.0.1", good})
		if err != nil {
			t.Errorf("%s: %v", good, err)
			continue
		}
		ia.Close()
	}
}
