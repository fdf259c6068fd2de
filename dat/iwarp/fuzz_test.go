package iwarp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// The receiver fuzz target feeds arbitrary bytes, as the post-handshake
// stream of an initiator, into a connected responder QP with registered
// regions (inside guard bytes), posted receives and an outstanding RDMA
// Read, over a loopback TCP socket pair. It asserts that nothing panics,
// that the connection always ends (bounded), and that no byte outside the
// registered windows changes.
//
// Input layout: byte 0 holds flags (bit 0: CRC on, bit 1: peer-to-peer
// Write RTR agreed, bit 2: the QP is the initiator with an RDMA Read
// outstanding before the stream starts, bit 3: the harness recomputes the
// CRC of every complete FPDU after the substitutions below), the rest is
// the stream.
// STags and addresses are random per run, so the harness substitutes
// markers the fuzzer can learn: "\xF5\xF5\xF5<k>" becomes the STag of
// region k&3, and "\xF6\xF6\xF6<k><int32 BE>" the 8-byte address of region
// k&3 plus the signed offset.

var fuzzVerbose = os.Getenv("IWARP_FUZZ_VERBOSE") == "1"

const (
	fzGuard  = 512
	fzRegion = 4096
)

type fuzzRegion struct {
	all []byte
	mr  *MR
}

func newFuzzRegion(t testing.TB, pd *PD, size int, access driver.Access) *fuzzRegion {
	all := make([]byte, fzGuard+size+fzGuard)
	for i := range all {
		all[i] = 0xA5
	}
	mr, err := pd.Register(all[fzGuard:fzGuard+size:fzGuard+size], access)
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzRegion{all: all, mr: mr.(*MR)}
}

func (r *fuzzRegion) guardsIntact() bool {
	n := len(r.all)
	for i := 0; i < fzGuard; i++ {
		if r.all[i] != 0xA5 || r.all[n-1-i] != 0xA5 {
			return false
		}
	}
	return true
}

// substitute replaces the STag and address markers in stream.
func substitute(stream []byte, regions []*fuzzRegion) []byte {
	out := make([]byte, 0, len(stream))
	for i := 0; i < len(stream); {
		b := stream[i:]
		switch {
		case len(b) >= 4 && b[0] == 0xF5 && b[1] == 0xF5 && b[2] == 0xF5:
			out = binary.BigEndian.AppendUint32(out, regions[b[3]&3].mr.RKey())
			i += 4
		case len(b) >= 8 && b[0] == 0xF6 && b[1] == 0xF6 && b[2] == 0xF6:
			off := int32(binary.BigEndian.Uint32(b[4:]))
			out = binary.BigEndian.AppendUint64(out, regions[b[3]&3].mr.Addr()+uint64(int64(off)))
			i += 8
		default:
			out = append(out, b[0])
			i++
		}
	}
	return out
}

// fixCRCs rewrites the CRC field of every complete FPDU of stream.
func fixCRCs(stream []byte) {
	for off := 0; off+2 <= len(stream); {
		n := wire.FPDULen(int(binary.BigEndian.Uint16(stream[off:])))
		if off+n > len(stream) {
			return
		}
		binary.LittleEndian.PutUint32(stream[off+n-wire.CRCLen:], wire.Checksum(stream[off:off+n-wire.CRCLen]))
		off += n
	}
}

// fuzzOne runs one input. ln is a loopback listener for the socket pair.
func fuzzOne(t testing.TB, ln net.Listener, data []byte) {
	if len(data) == 0 {
		return
	}
	flags, stream := data[0], data[1:]
	ia := newIA(defaultOptions())
	defer ia.Close()
	dpd, _ := ia.AllocPD()
	pd := dpd.(*PD)
	otherPD, _ := ia.AllocPD()
	regions := []*fuzzRegion{
		newFuzzRegion(t, pd, fzRegion, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead),
		newFuzzRegion(t, pd, fzRegion, driver.AccessLocalWrite),
		newFuzzRegion(t, pd, fzRegion, driver.AccessRemoteRead),
		newFuzzRegion(t, otherPD.(*PD), fzRegion, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead),
	}
	stream = substitute(stream, regions)
	if flags&8 != 0 {
		fixCRCs(stream)
	}

	disc := make(chan error, 1)
	cq := newCQ(8) // nobody polls it: it must just hold what arrives
	defer cq.Close()
	dq, err := ia.CreateQP(driver.QPConfig{PD: pd, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2, IRD: 2, ORD: 2,
		OnDisconnect: func(err error) { disc <- err }})
	if err != nil {
		t.Fatal(err)
	}
	q := dq.(*QP)
	recv := regions[1].mr
	_ = q.PostRecv(driver.RecvWR{ID: 1, Local: []driver.SGE{{Addr: recv.Addr(), Length: 100, LKey: recv.LKey()}}})
	_ = q.PostRecv(driver.RecvWR{ID: 2, Local: []driver.SGE{
		{Addr: recv.Addr() + 1000, Length: 64, LKey: recv.LKey()}, {Addr: recv.Addr() + 2000, Length: 2000, LKey: recv.LKey()}}})

	// Socket pair: ours is the accepted end, the fuzz peer dials.
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	info := ConnInfo{CRC: flags&1 != 0, IRD: 2, ORD: 2, Initiator: flags&4 != 0}
	if flags&2 != 0 {
		info.RTR = RTRWrite
	}
	c := newConnection(nc.(*net.TCPConn), info)
	q.mu.Lock()
	q.state, q.conn = qpConnected, c
	parked := c.start(q)
	q.mu.Unlock()
	if parked {
		ia.watch(c) // as finishAttempt does: nobody waits, the sweeper starts the receiver
	}
	if flags&4 != 0 {
		_ = q.PostSend(driver.SendWR{ID: 3, Op: driver.OpRDMARead,
			Local:  []driver.SGE{{Addr: recv.Addr() + 3000, Length: 64, LKey: recv.LKey()}},
			Remote: driver.RemoteSegment{Addr: 0x1000, Length: 64, RKey: 0x4242}})
		// A real peer answers only after the Request left: wait for that.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Microsecond) {
			q.mu.Lock()
			out := c.reads.len() > 0 || c.dead
			q.mu.Unlock()
			if out {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the RDMA Read was never sent")
			}
		}
	}

	peerDone := make(chan struct{})
	go func() {
		defer close(peerDone)
		_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = peer.Write(stream)
		_ = peer.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, peer)
	}()
	select {
	case err := <-disc:
		if fuzzVerbose {
			t.Logf("OnDisconnect(%v)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("connection did not end within 10s for input %x", data)
	}
	_ = q.Close()
	<-peerDone
	for i, r := range regions {
		if !r.guardsIntact() {
			t.Fatalf("guard bytes of region %d changed for input %x", i, data)
		}
	}
}

func FuzzReceiver(f *testing.F) {
	// The seeds are the checked-in corpus in testdata/fuzz/FuzzReceiver.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOne(t, ln, data)
	})
}

// Marker helpers for seeds.
func stagMarker(k byte) []byte { return []byte{0xF5, 0xF5, 0xF5, k} }
func addrMarker(k byte, off int32) []byte {
	return binary.BigEndian.AppendUint32([]byte{0xF6, 0xF6, 0xF6, k}, uint32(off))
}

// seedFPDU encodes f and then replaces the STag/TO fields by markers where
// stagK/addrK are not negative (so seeds aim at real regions).
func seedFPDU(f wire.FPDU, crc bool, stagK int, addrK int, addrOff int32) []byte {
	b, err := f.Append(nil, crc)
	if err != nil {
		panic(err)
	}
	if stagK < 0 && addrK < 0 {
		return b
	}
	// Tagged: STag at 4, TO at 8. Read Request: source STag at 36, TO at 40.
	stagAt, toAt := 4, 8
	if f.Header.Opcode == wire.OpReadRequest {
		stagAt, toAt = 36, 40
	}
	out := append([]byte(nil), b[:stagAt]...)
	if stagK >= 0 {
		out = append(out, stagMarker(byte(stagK))...)
	} else {
		out = append(out, b[stagAt:stagAt+4]...)
	}
	out = append(out, b[stagAt+4:toAt]...)
	if addrK >= 0 {
		out = append(out, addrMarker(byte(addrK), addrOff)...)
	} else {
		out = append(out, b[toAt:toAt+8]...)
	}
	return append(out, b[toAt+8:]...)
}

// receiverSeeds is the seed corpus (also checked in under
// testdata/fuzz/FuzzReceiver, see TestWriteReceiverFuzzSeeds).
func receiverSeeds() map[string][]byte {
	cat := func(flags byte, parts ...[]byte) []byte {
		b := []byte{flags}
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	data := make([]byte, 300)
	for i := range data {
		data[i] = byte(i)
	}
	send := func(msn, mo uint32, last bool, p []byte, crc bool) []byte {
		return seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: last, MSN: msn, MO: mo}, Payload: p}, crc, -1, -1, 0)
	}
	write := func(last bool, off int32, p []byte, crc bool) []byte {
		return seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: last}, Payload: p}, crc, 0, 0, off)
	}
	rreq := func(msn uint32, size uint32, crc bool) []byte {
		return seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: msn},
			ReadRequest: wire.ReadRequest{SinkSTag: 0x77, SinkTO: 0x1000, Size: size}}, crc, 0, 0, 16)
	}
	rresp := func(p []byte) []byte {
		return seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpReadResponse, Last: true}, Payload: p}, false, 1, 1, 3000)
	}
	term := wire.SiwTerminate(wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPTaggedBuffer}, nil, wire.TermLayoutRFC, nil)
	termFPDU, _ := wire.AppendTerminate(nil, &term, false)
	return map[string][]byte{
		"send":              cat(0, send(1, 0, true, data[:16], false)),
		"send-crc":          cat(1, send(1, 0, true, data[:16], true)),
		"send-bad-crc":      cat(1, send(1, 0, true, data[:16], false)),
		"send-multiseg":     cat(0, send(1, 0, false, data[:40], false), send(1, 40, true, data[40:80], false), send(2, 0, true, data[:200], false)),
		"send-too-long":     cat(0, send(1, 0, true, data[:101], false)),
		"write":             cat(0, write(true, 0, data[:100], false)),
		"write-crc":         cat(9, write(true, 100, data[:100], true)),
		"write-multiseg":    cat(0, write(false, 0, data[:64], false), seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: true}, Payload: data[:64]}, false, 0, 0, 64)),
		"write-end":         cat(0, write(true, fzRegion-16, data[:16], false)),
		"read-request":      cat(0, send(1, 0, true, nil, false), rreq(1, 64, false)),
		"read-response":     cat(4, rresp(data[:64]), send(1, 0, true, nil, false)),
		"read-response-crc": cat(13, rresp(data[:64]), write(true, 0, data[:10], true)),
		"rtr-write":         cat(2, seedFPDU(wire.FPDU{Header: wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}}, false, -1, -1, 0), send(1, 0, true, data[:4], false)),
		"terminate":         cat(0, termFPDU),
		"ulpdu-underflow":   cat(0, []byte{0, 0, 0x41, 0x43, 0, 0, 0, 0}),
		"truncated":         cat(0, write(true, 0, data[:100], false)[:50]),
		"read-request-crc":  cat(9, send(1, 0, true, nil, true), rreq(1, 4096, true)),
		"send-then-garbage": cat(0, send(1, 0, true, nil, false), data[:50]),
	}
}

// TestWriteReceiverFuzzSeeds regenerates testdata/fuzz/FuzzReceiver when
// IWARP_WRITE_FUZZ_SEEDS=1; otherwise it checks the corpus is there.
func TestWriteReceiverFuzzSeeds(t *testing.T) {
	write := os.Getenv("IWARP_WRITE_FUZZ_SEEDS") == "1"
	seeds := receiverSeeds()
	names := make([]string, 0, len(seeds))
	for n := range seeds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join("testdata", "fuzz", "FuzzReceiver", n)
		if !write {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("missing seed %s (run with IWARP_WRITE_FUZZ_SEEDS=1)", p)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seeds[n])
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
