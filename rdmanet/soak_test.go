package rdmanet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The soak tests keep many connections busy for a while, each carrying a
// pseudo-random stream both ways that the receiving side regenerates and
// compares byte for byte, with a CRC and a byte count at the end: any
// byte lost, duplicated, reordered or damaged fails them.
//
//	RDMANET_SOAK=60s          TestSoak's duration (default: 60s on a verbs
//	                          IA in the test VM, as its suite runs it;
//	                          2s elsewhere)
//	RDMANET_SOAK_CONNS=128    TestSoak's connections (default: 128 in the
//	                          VM, 16 elsewhere)
//	RDMANET_SOAK_BUF=65536    the connections' BufferSize (0: adaptive;
//	                          default: adaptive on the host, 128 KiB in
//	                          the VM, whose 2 GiB would not hold 256
//	                          rings grown to MaxBufferSize; 64 KiB for
//	                          the process pair)
//	RDMANET_HOST_SOAK=10m     runs TestSoakProcessPair for that long (it
//	                          skips otherwise: not for CI)
//	RDMANET_HOST_SOAK_CONNS   its connections (default 1024)

// inTestVM reports whether the tests run on a kernel RDMA device of the
// test VM (the verbs provider), as its suite runs them.
func inTestVM(ia string) bool {
	return ia != "iwarp" && os.Getenv("IN_RDMA_VM") == "1"
}

// envDuration reads a duration from the environment (def if unset).
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, s)
	}
	return d
}

// envInt reads an integer of at least lo from the environment (def if
// unset).
func envInt(t testing.TB, name string, def, lo int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo {
		t.Fatalf("%s=%q: want an integer of at least %d", name, s, lo)
	}
	return n
}

// TestSoak keeps RDMANET_SOAK_CONNS connections in this process streaming
// both ways for RDMANET_SOAK; the VM suite runs it for 60 s with 128
// connections on rxe0 and on siw0.
func TestSoak(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		dur, conns, buf := 2*time.Second, 16, 0
		if inTestVM(ia) {
			dur, conns, buf = 60*time.Second, 128, 128<<10
		}
		dur = envDuration(t, "RDMANET_SOAK", dur)
		conns = envInt(t, "RDMANET_SOAK_CONNS", conns, 1)
		buf = envInt(t, "RDMANET_SOAK_BUF", buf, 0)

		lc := ListenConfig{IA: ia, BufferSize: buf}
		l, err := lc.Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan soakResult, conns)
		serve(t, l, func(c net.Conn) { served <- soakServe(c, dur) })

		d := Dialer{IA: ia, BufferSize: buf, Timeout: 30 * time.Second, NoDup: true}
		dialed := soakDial(t, d, l.Addr().String(), conns, dur)
		var total soakResult
		for i, r := range dialed {
			if r.err != nil {
				t.Errorf("dialed connection %d: %v", i, r.err)
			}
			total.add(r)
		}
		for range conns {
			select {
			case r := <-served:
				if r.err != nil {
					t.Errorf("accepted connection %d: %v", r.id, r.err)
				}
				total.add(r)
			case <-time.After(soakGrace):
				t.Fatal("accepted connections did not finish")
			}
		}
		if total.sent != total.got {
			t.Errorf("%d bytes sent, %d received", total.sent, total.got)
		}
		t.Logf("%d connections for %v: %s", conns, dur, total.rate(dur))
	})
}

// TestSoakProcessPair is the host soak: RDMANET_HOST_SOAK_CONNS (1024)
// connections between this process and a child process (this test binary
// running TestSoakPeer), over the pure-Go iWARP provider on loopback, for
// RDMANET_HOST_SOAK. Opt-in: it skips unless RDMANET_HOST_SOAK is set.
func TestSoakProcessPair(t *testing.T) {
	if os.Getenv("RDMANET_HOST_SOAK") == "" {
		t.Skip("the host soak runs only with RDMANET_HOST_SOAK=<duration> (e.g. 10m)")
	}
	dur := envDuration(t, "RDMANET_HOST_SOAK", 0)
	conns := envInt(t, "RDMANET_HOST_SOAK_CONNS", 1024, 1)
	buf := envInt(t, "RDMANET_SOAK_BUF", 64<<10, 0)

	ctx, cancel := context.WithTimeout(context.Background(), dur+2*soakGrace)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSoakPeer$", "-test.v", "-test.timeout=0")
	cmd.Env = append(os.Environ(), "RDMANET_SOAK_PEER=1", fmt.Sprintf("RDMANET_SOAK_PEER_CONNS=%d", conns),
		fmt.Sprintf("RDMANET_SOAK_PEER_DUR=%s", dur), fmt.Sprintf("RDMANET_SOAK_BUF=%d", buf))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, the child does not outlive the test.
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	addr := ""
	for addr == "" && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "soak peer listening on "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatal("the peer process never listened")
	}
	var peerOut bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		for lines.Scan() {
			peerOut.WriteString(lines.Text() + "\n")
		}
	}()

	d := Dialer{IA: "iwarp", BufferSize: buf, Timeout: 30 * time.Second, NoDup: true}
	dialed := soakDial(t, d, addr, conns, dur)
	var total soakResult
	for i, r := range dialed {
		if r.err != nil {
			t.Errorf("dialed connection %d: %v", i, r.err)
		}
		total.add(r)
	}
	werr := cmd.Wait()
	<-copied
	if werr != nil || !strings.Contains(peerOut.String(), "--- PASS: TestSoakPeer") {
		t.Errorf("peer process: %v\n%s", werr, peerOut.String())
	} else {
		t.Logf("peer: %s", strings.TrimSpace(grepLine(peerOut.String(), "soak peer:")))
	}
	t.Logf("%d connections to another process for %v, this side: %s", conns, dur, total.rate(dur))
}

// grepLine returns the first line of s that contains sub.
func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestSoakPeer is TestSoakProcessPair's child: it listens on loopback,
// prints its address, serves the connections and exits.
func TestSoakPeer(t *testing.T) {
	if os.Getenv("RDMANET_SOAK_PEER") == "" {
		t.Skip("the child process of TestSoakProcessPair")
	}
	conns := envInt(t, "RDMANET_SOAK_PEER_CONNS", 1, 1)
	dur := envDuration(t, "RDMANET_SOAK_PEER_DUR", time.Second)
	buf := envInt(t, "RDMANET_SOAK_BUF", 64<<10, 0)
	lc := ListenConfig{IA: "iwarp", BufferSize: buf}
	l, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan soakResult, conns)
	serve(t, l, func(c net.Conn) { served <- soakServe(c, dur) })
	fmt.Printf("soak peer listening on %s\n", l.Addr())
	var total soakResult
	for range conns {
		r := <-served
		if r.err != nil {
			t.Errorf("accepted connection %d: %v", r.id, r.err)
		}
		total.add(r)
	}
	fmt.Printf("soak peer: %d connections: %s\n", conns, total.rate(dur))
}

// soakGrace is how long past its duration a soak may take to finish
// (establishment, the last frames, closing) before it counts as stuck.
const soakGrace = 2 * time.Minute

// soakResult is what one side of a connection did, or the sum of many.
type soakResult struct {
	id        uint64
	sent, got int64
	err       error
}

func (r *soakResult) add(o soakResult) { r.sent += o.sent; r.got += o.got }

func (r *soakResult) rate(d time.Duration) string {
	return fmt.Sprintf("%.1f MiB sent, %.1f MiB received and checked, %.1f MiB/s",
		float64(r.sent)/(1<<20), float64(r.got)/(1<<20), float64(r.got)/d.Seconds()/(1<<20))
}

// soakDial dials n connections a few at a time, has each announce its id,
// and runs the client side of the soak on all of them at once.
func soakDial(t *testing.T, d Dialer, addr string, n int, dur time.Duration) []soakResult {
	res := make([]soakResult, n)
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := d.Dial("rdma", addr)
			if err != nil {
				res[i].err = fmt.Errorf("dial: %w", err)
				failed.Add(1)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	if k := failed.Load(); k > 0 {
		for _, r := range res {
			if r.err != nil {
				t.Fatalf("%d of %d dials failed, e.g. %v", k, n, r.err)
			}
		}
	}
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hdr [8]byte
			binary.LittleEndian.PutUint64(hdr[:], uint64(i))
			c.SetDeadline(time.Now().Add(dur + soakGrace))
			if _, err := c.Write(hdr[:]); err != nil {
				res[i] = soakResult{id: uint64(i), err: fmt.Errorf("id: %w", err)}
				return
			}
			res[i] = soakRun(c, uint64(i), true, dur)
			if err := c.Close(); err != nil && res[i].err == nil {
				res[i].err = fmt.Errorf("close: %w", err)
			}
			conns[i] = nil
		}()
	}
	wg.Wait()
	return res
}

// soakServe is the accepting side: it reads the connection's id and runs
// the soak on it.
func soakServe(c net.Conn, dur time.Duration) soakResult {
	defer c.Close()
	c.SetDeadline(time.Now().Add(dur + soakGrace))
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return soakResult{err: fmt.Errorf("id: %w", err)}
	}
	return soakRun(c, binary.LittleEndian.Uint64(hdr[:]), false, dur)
}

// soakRun streams one direction and checks the other until dur has
// passed and the peer's stream has ended.
func soakRun(c net.Conn, id uint64, dialer bool, dur time.Duration) soakResult {
	r := soakResult{id: id}
	deadline := time.Now().Add(dur)
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.sent, werr = soakWrite(c, soakSeed(id, dialer), deadline)
	}()
	var rerr error
	base := int64(0)
	if !dialer {
		base = 8 // the dialer's id came first
	}
	r.got, rerr = soakCheck(c, soakSeed(id, !dialer), base)
	<-done
	r.err = errors.Join(werr, rerr)
	return r
}

// soakSeed is the stream of connection id sent by its dialer or by its
// acceptor.
func soakSeed(id uint64, dialer bool) [32]byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], id)
	if dialer {
		s[8] = 1
	}
	copy(s[16:], "rdmanet soak")
	return s
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// A stream is a sequence of frames, each a 4-byte length and that many
// bytes, ended by a frame of length 0 followed by the byte count and the
// CRC-64 of everything sent. The lengths (mostly small, some large) and
// the bytes come from generators seeded per connection and direction, so
// the receiver regenerates the whole stream, headers included.
const maxFrame = 96 << 10

// soakGen generates a stream's frames.
type soakGen struct {
	sizes *rand.PCG
	data  *rand.ChaCha8
}

func newSoakGen(seed [32]byte) *soakGen {
	return &soakGen{sizes: rand.NewPCG(binary.LittleEndian.Uint64(seed[:]), uint64(seed[8])), data: rand.NewChaCha8(seed)}
}

// next writes the next frame, header and bytes, into buf and returns it.
func (g *soakGen) next(buf []byte) []byte {
	r := rand.New(g.sizes)
	k := 1 + r.IntN(512)
	if r.IntN(8) == 0 {
		k = 1 + r.IntN(maxFrame)
	}
	binary.LittleEndian.PutUint32(buf, uint32(k))
	g.data.Read(buf[4 : 4+k])
	return buf[:4+k]
}

// clone returns a generator at the same point of the stream.
func (g *soakGen) clone() *soakGen {
	c := &soakGen{sizes: new(rand.PCG), data: new(rand.ChaCha8)}
	b, _ := g.sizes.MarshalBinary()
	c.sizes.UnmarshalBinary(b)
	b, _ = g.data.MarshalBinary()
	c.data.UnmarshalBinary(b)
	return c
}

// soakWrite sends frames until deadline, then the end frame. It returns
// the stream bytes sent (frame contents, headers not counted).
func soakWrite(c net.Conn, seed [32]byte, deadline time.Time) (int64, error) {
	g := newSoakGen(seed)
	crc := uint64(0)
	var n int64
	buf := make([]byte, 4+maxFrame)
	for time.Now().Before(deadline) {
		f := g.next(buf)
		crc = crc64.Update(crc, crcTable, f[4:])
		if _, err := c.Write(f); err != nil {
			return n, fmt.Errorf("write after %d bytes: %w", n, err)
		}
		n += int64(len(f) - 4)
	}
	var end [20]byte
	binary.LittleEndian.PutUint64(end[4:], uint64(n))
	binary.LittleEndian.PutUint64(end[12:], crc)
	if _, err := c.Write(end[:]); err != nil {
		return n, fmt.Errorf("write the end: %w", err)
	}
	return n, nil
}

// soakCheck reads the peer's stream to its end frame, comparing every
// byte with the stream the seed gives, then the count and the CRC. base
// is the connection offset at which the stream starts (the dialer's id
// comes first on its side), for damage reports.
func soakCheck(c net.Conn, seed [32]byte, base int64) (int64, error) {
	g := newSoakGen(seed)
	crc := uint64(0)
	var n int64     // stream bytes checked
	raw := base     // connection offset
	var hist []byte // the last soakHistory to 2*soakHistory bytes of the connection
	got := make([]byte, 4+maxFrame)
	want := make([]byte, 4+maxFrame)
	for {
		if _, err := io.ReadFull(c, got[:4]); err != nil {
			return n, fmt.Errorf("read a frame header at offset %d: %w", raw, err)
		}
		if binary.LittleEndian.Uint32(got) == 0 {
			break
		}
		ahead := g.clone()
		w := g.next(want)
		if !bytes.Equal(got[:4], w[:4]) {
			return n, damage(got[:4], w[:4], raw, hist, ahead)
		}
		if _, err := io.ReadFull(c, got[4:len(w)]); err != nil {
			return n, fmt.Errorf("read a %d-byte frame at offset %d: %w", len(w)-4, raw, err)
		}
		if !bytes.Equal(got[:len(w)], w) {
			return n, damage(got[:len(w)], w, raw, hist, ahead)
		}
		hist = append(hist, w...)
		if len(hist) > 2*soakHistory {
			hist = append(hist[:0], hist[len(hist)-soakHistory:]...)
		}
		crc = crc64.Update(crc, crcTable, w[4:])
		n += int64(len(w) - 4)
		raw += int64(len(w))
	}
	var end [16]byte
	if _, err := io.ReadFull(c, end[:]); err != nil {
		return n, fmt.Errorf("read the end at offset %d: %w", raw, err)
	}
	if sent, sum := int64(binary.LittleEndian.Uint64(end[:])), binary.LittleEndian.Uint64(end[8:]); sent != n || sum != crc {
		return n, fmt.Errorf("the peer sent %d bytes with CRC %#x; %d arrived with CRC %#x", sent, sum, n, crc)
	}
	return n, nil
}

// soakHistory is how much of the connection before a damaged frame damage
// searches at least, and how much after it: more than a ring (stale data
// from the ring's last lap), and little enough that keeping it for each
// of a few hundred streams fits the test VM's memory.
const soakHistory = 320 << 10

// damage describes a frame (header and bytes, or its header alone) that
// differs from the stream: the connection offset of the first bad byte,
// how many differ from there, and whether what arrived is the
// connection's bytes from another offset (stale data read too early, or
// data from later), which says more about the cause than the bytes
// themselves. raw is the frame's connection offset, hist the connection's
// bytes before it, ahead the generator at the frame.
func damage(got, want []byte, raw int64, hist []byte, ahead *soakGen) error {
	i := 0
	for got[i] == want[i] {
		i++
	}
	j := i
	for j < len(got) && got[j] != want[j] {
		j++
	}
	at := raw + int64(i)
	msg := fmt.Sprintf("connection byte %d differs (offset %d of a %d-byte frame at %d; %d bytes differ from there): got %#x, want %#x",
		at, i, len(want), raw, j-i, got[i], want[i])
	probe := got[i:min(i+32, len(got))]
	if len(probe) < 8 {
		return errors.New(msg)
	}
	switch {
	case allBytes(probe, 0):
		msg += "; zeros arrived"
	case bytes.LastIndex(hist, probe) >= 0:
		from := raw - int64(len(hist)) + int64(bytes.LastIndex(hist, probe))
		msg += fmt.Sprintf("; what arrived is the connection's bytes from offset %d, %d earlier", from, at-from)
	default:
		var later []byte
		buf := make([]byte, 4+maxFrame)
		for len(later) < soakHistory {
			later = append(later, ahead.next(buf)...)
		}
		if k := bytes.Index(later, probe); k >= 0 {
			msg += fmt.Sprintf("; what arrived is the connection's bytes from offset %d, %d later", raw+int64(k), raw+int64(k)-at)
			break
		}
		msg += "; what arrived is nowhere near in the stream"
	}
	return errors.New(msg)
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// The soak's damage report finds where bytes that arrived come from.
func TestSoakDamageReport(t *testing.T) {
	var seed [32]byte
	g := newSoakGen(seed)
	var stream []byte
	var frames []int // offsets of the frames
	buf := make([]byte, 4+maxFrame)
	for len(stream) < 8<<20 {
		frames = append(frames, len(stream))
		stream = append(stream, g.next(buf)...)
	}
	// A frame well inside, with the generator just before it.
	g = newSoakGen(seed)
	f := 0
	for ; frames[f] < 1<<20; f++ {
		g.next(buf)
	}
	raw := frames[f]
	want := stream[raw:frames[f+1]]
	if len(want) < 150 {
		f++
		raw = frames[f]
		want = stream[raw:frames[f+1]]
		g.next(buf)
	}
	for _, c := range []struct {
		from int
		says string
	}{
		{raw + 100 - 4096, "4096 earlier"},
		{raw + 100 + 8192, "8192 later"},
		{-1, "zeros arrived"},
	} {
		got := append([]byte(nil), want...)
		if c.from >= 0 {
			copy(got[100:], stream[c.from:])
		} else {
			clear(got[100:])
		}
		err := damage(got, want, int64(raw), stream[:raw], g.clone())
		if !strings.Contains(err.Error(), fmt.Sprintf("connection byte %d ", raw+100)) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: want %q", err, c.says)
		}
	}
}
