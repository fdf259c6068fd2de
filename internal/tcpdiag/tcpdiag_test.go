package tcpdiag

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLookupLoopback asks about a real TCP connection on loopback, both
// ways, and about one that does not exist.
func TestLookupLoopback(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sock_diag is Linux's")
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // some time since the exchange

	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	info, err := Lookup(local, remote)
	if err != nil {
		t.Fatalf("lookup of a live connection: %v", err)
	}
	t.Logf("%v -> %v: %+v", local, remote, info)
	if !info.Established() || info.Unacked != 0 {
		t.Errorf("client end %+v, want established with nothing unacknowledged", info)
	}
	if info.LastAckRecv < 40*time.Millisecond || info.LastAckRecv > time.Minute {
		t.Errorf("last acknowledgement %v ago, want about the 50 ms slept", info.LastAckRecv)
	}
	// Data now from the client: the server end heard it just now, the
	// client end nothing since before the sleep. (The ages have the
	// kernel's jiffy resolution, a few ms; the sleep is far longer.)
	if _, err := c.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	sinfo, err := Lookup(remote, local)
	if err != nil {
		t.Fatalf("lookup of the server end: %v", err)
	}
	cinfo, err := Lookup(local, remote)
	if err != nil {
		t.Fatalf("lookup of the client end: %v", err)
	}
	if cinfo.LastDataRecv < sinfo.LastDataRecv+40*time.Millisecond {
		t.Errorf("last data received: client end %v ago, server end %v ago; want the server's later by about the 50 ms slept", cinfo.LastDataRecv, sinfo.LastDataRecv)
	}

	gone := netip.AddrPortFrom(remote.Addr(), remote.Port()+1)
	if remote.Port() == 65535 {
		gone = netip.AddrPortFrom(remote.Addr(), 1)
	}
	if _, err := Lookup(local, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup of a connection that does not exist: %v, want ErrNotFound", err)
	}
	if _, err := Lookup(local, netip.MustParseAddrPort("[::1]:80")); err == nil {
		t.Error("lookup across address families succeeded")
	}
}

// reply builds a kernel reply as the codec expects it: one netlink
// message of type typ and body, numbered seq.
func reply(seq uint32, typ uint16, body []byte) []byte {
	ne := binary.NativeEndian
	b := ne.AppendUint32(nil, uint32(nlmsgHdrLen+len(body)))
	b = ne.AppendUint16(b, typ)
	b = ne.AppendUint16(b, 0)
	b = ne.AppendUint32(b, seq)
	b = ne.AppendUint32(b, 0)
	return append(b, body...)
}

// diagBody is an inet_diag_msg in state with a tcp_info attribute.
func diagBody(state uint8, unacked, lastDataMS, lastAckMS uint32) []byte {
	ne := binary.NativeEndian
	b := make([]byte, diagMsgLen)
	b[0], b[1] = syscall.AF_INET, state
	ti := make([]byte, 232)
	ti[0], ti[2], ti[4] = state, 3, 2
	ne.PutUint32(ti[24:], unacked)
	ne.PutUint32(ti[52:], lastDataMS)
	ne.PutUint32(ti[56:], lastAckMS)
	// An attribute before the one wanted, to be skipped.
	b = ne.AppendUint16(b, rtaHdrLen+1)
	b = ne.AppendUint16(b, 1)
	b = append(b, 7, 0, 0, 0)
	b = ne.AppendUint16(b, uint16(rtaHdrLen+len(ti)))
	b = ne.AppendUint16(b, inetDiagInfo)
	return append(b, ti...)
}

func errBody(errno int32) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(-errno))
	return append(b, make([]byte, nlmsgHdrLen)...)
}

func TestParseReply(t *testing.T) {
	ok := reply(9, sockDiagByFamily, diagBody(1, 2, 1500, 250))
	info, err := ParseReply(ok, 9)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{State: 1, Retransmits: 3, Backoff: 2, Unacked: 2, LastDataRecv: 1500 * time.Millisecond, LastAckRecv: 250 * time.Millisecond}
	if info != want {
		t.Errorf("parsed %+v, want %+v", info, want)
	}
	// An older request's answer first is skipped.
	stale := reply(8, sockDiagByFamily, diagBody(7, 0, 0, 0))
	if got, err := ParseReply(append(stale, ok...), 9); err != nil || got != want {
		t.Errorf("after a stale answer: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"not found", reply(9, nlmsgError, errBody(int32(syscall.ENOENT))), ErrNotFound},
		{"unsupported", reply(9, nlmsgError, errBody(int32(syscall.EOPNOTSUPP))), syscall.EOPNOTSUPP},
		{"done", reply(9, nlmsgDone, nil), ErrNotFound},
		{"empty", nil, nil},
		{"short header", ok[:10], nil},
		{"length past the end", ok[:nlmsgHdrLen+8], nil},
		{"short diag msg", reply(9, sockDiagByFamily, make([]byte, 20)), nil},
		{"no tcp_info", reply(9, sockDiagByFamily, make([]byte, diagMsgLen)), nil},
		{"short tcp_info", reply(9, sockDiagByFamily, diagBody(1, 0, 0, 0)[:diagMsgLen+8+rtaHdrLen+20]), nil},
		{"error without errno", reply(9, nlmsgError, []byte{1}), nil},
	} {
		_, err := ParseReply(tc.b, 9)
		if err == nil {
			t.Errorf("%s: parsed", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestAppendRequest(t *testing.T) {
	local, remote := netip.MustParseAddrPort("10.1.2.3:4000"), netip.MustParseAddrPort("10.9.8.7:80")
	b, err := AppendRequest(nil, 5, local, remote)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != nlmsgHdrLen+reqLen || binary.NativeEndian.Uint32(b) != uint32(len(b)) {
		t.Fatalf("request of %d bytes, length field %d", len(b), binary.NativeEndian.Uint32(b))
	}
	id := b[nlmsgHdrLen+8:]
	if binary.BigEndian.Uint16(id) != 4000 || binary.BigEndian.Uint16(id[2:]) != 80 {
		t.Errorf("ports %d, %d", binary.BigEndian.Uint16(id), binary.BigEndian.Uint16(id[2:]))
	}
	if netip.AddrFrom4([4]byte(id[4:8])) != local.Addr() || netip.AddrFrom4([4]byte(id[20:24])) != remote.Addr() {
		t.Errorf("addresses %v, %v", id[4:8], id[20:24])
	}
	if _, err := AppendRequest(nil, 1, local, netip.MustParseAddrPort("[2001:db8::1]:80")); err == nil {
		t.Error("mixed families accepted")
	}
	if _, err := AppendRequest(nil, 1, netip.AddrPort{}, remote); err == nil {
		t.Error("invalid address accepted")
	}
}

// FuzzParseReply: whatever the kernel (or a corrupted buffer) says, the
// parser returns an Info or an error, never panics.
func FuzzParseReply(f *testing.F) {
	f.Add(reply(1, sockDiagByFamily, diagBody(1, 2, 1500, 250)), uint32(1))
	f.Add(reply(1, nlmsgError, errBody(int32(syscall.ENOENT))), uint32(1))
	f.Add(append(reply(0, sockDiagByFamily, diagBody(7, 0, 0, 0)), reply(1, nlmsgDone, nil)...), uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, seq uint32) {
		info, err := ParseReply(b, seq)
		if err != nil && info != (Info{}) {
			t.Fatalf("an error with a non-zero Info: %v, %+v", err, info)
		}
	})
}
