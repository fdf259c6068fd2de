package rdmanet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		if c1.LocalAddr().Network() != "rdma" || c1.RemoteAddr().String() != c2.LocalAddr().String() {
			t.Errorf("addresses: %v -> %v, peer %v -> %v", c1.LocalAddr(), c1.RemoteAddr(), c2.LocalAddr(), c2.RemoteAddr())
		}
		go io.Copy(c2, c2)
		for i := 0; i < 100; i++ {
			msg := []byte(strings.Repeat("x", i+1))
			if _, err := c1.Write(msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c1, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("round %d: %q, %v", i, got, err)
			}
		}
	})
}

// TestStream sends a large random stream with odd write and read sizes
// over a small ring, both directions at once, and compares hashes: it
// exercises wrap-around, blocking on a full ring, credit return and
// control-credit flow.
func TestStream(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 8192)
		defer stop()
		const total = 8 << 20
		send := func(c *Conn, seed uint64) ([32]byte, error) {
			r := rand.New(rand.NewPCG(seed, 1))
			h := sha256.New()
			buf := make([]byte, 20000)
			for n := 0; n < total; {
				k := min(1+r.IntN(len(buf)), total-n)
				for i := range buf[:k] {
					buf[i] = byte(r.Uint32())
				}
				h.Write(buf[:k])
				if _, err := c.Write(buf[:k]); err != nil {
					return [32]byte{}, err
				}
				n += k
			}
			return [32]byte(h.Sum(nil)), c.CloseWrite()
		}
		recv := func(c *Conn, seed uint64) ([32]byte, int64, error) {
			r := rand.New(rand.NewPCG(seed, 2))
			h := sha256.New()
			buf := make([]byte, 30000)
			var n int64
			for {
				k, err := c.Read(buf[:1+r.IntN(len(buf))])
				h.Write(buf[:k])
				n += int64(k)
				if err == io.EOF {
					return [32]byte(h.Sum(nil)), n, nil
				}
				if err != nil {
					return [32]byte{}, n, err
				}
			}
		}
		type out struct {
			sum [32]byte
			n   int64
			err error
		}
		sent := make(chan out, 2)
		got := make(chan out, 2)
		for i, p := range [][2]*Conn{{c1, c2}, {c2, c1}} {
			go func() { s, err := send(p[0], uint64(i)); sent <- out{s, total, err} }()
			go func() { s, n, err := recv(p[1], uint64(i)); got <- out{s, n, err} }()
		}
		var sums, gots [][32]byte
		for range 2 {
			s, g := <-sent, <-got
			if s.err != nil || g.err != nil || g.n != total {
				t.Fatalf("send %v, recv %v (%d bytes)", s.err, g.err, g.n)
			}
			sums, gots = append(sums, s.sum), append(gots, g.sum)
		}
		if !(sums[0] == gots[0] && sums[1] == gots[1] || sums[0] == gots[1] && sums[1] == gots[0]) {
			t.Fatal("hash mismatch")
		}
	})
}

func TestCopyPaths(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 16384)
		defer stop()
		data := make([]byte, 3<<20+17)
		for i := range data {
			data[i] = byte(i * 7)
		}
		done := make(chan error, 1)
		go func() {
			// io.Copy uses c1.ReadFrom.
			_, err := io.Copy(c1, bytes.NewReader(data))
			if err == nil {
				err = c1.CloseWrite()
			}
			done <- err
		}()
		var buf bytes.Buffer
		n, err := c2.WriteTo(&buf) // io.WriterTo
		if err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("WriteTo: %d, %v", n, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestHalfClose(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		c1.Write([]byte("request"))
		if err := c1.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.Write([]byte("x")); err == nil {
			t.Error("Write after CloseWrite succeeded")
		}
		req, err := io.ReadAll(c2)
		if err != nil || string(req) != "request" {
			t.Fatalf("server read %q, %v", req, err)
		}
		// The other direction still works.
		if _, err := c2.Write([]byte("response")); err != nil {
			t.Fatal(err)
		}
		c2.Close()
		resp, err := io.ReadAll(c1)
		if err != nil || string(resp) != "response" {
			t.Fatalf("client read %q, %v", resp, err)
		}
	})
}

func TestCloseRead(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 8192)
		defer stop()
		if err := c2.CloseRead(); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("Read after CloseRead: %v", err)
		}
		// The peer can still write more than the ring holds: the data is
		// discarded and its space returned.
		c1.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c1.Write(make([]byte, 100000)); err != nil {
			t.Fatal(err)
		}
		c2.Write([]byte("still writing"))
		b := make([]byte, 13)
		if _, err := io.ReadFull(c1, b); err != nil || string(b) != "still writing" {
			t.Fatalf("%q %v", b, err)
		}
	})
}

func TestCloseUnblocks(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, _, stop := pipe(t, ia, 8192)
		defer stop()
		errc := make(chan error, 2)
		go func() { _, err := c1.Read(make([]byte, 10)); errc <- err }()
		go func() { _, err := c1.Write(make([]byte, 1<<20)); errc <- err }()
		time.Sleep(50 * time.Millisecond)
		c1.Close()
		for range 2 {
			select {
			case err := <-errc:
				var oe *net.OpError
				if !errors.As(err, &oe) || !errors.Is(err, net.ErrClosed) || oe.Net != "rdma" {
					t.Errorf("got %v, want a *net.OpError with net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not unblock")
			}
		}
		if err := c1.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestGracefulCloseDelivers(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 256<<10)
		defer stop()
		data := bytes.Repeat([]byte("0123456789"), 20000) // fits the 256 KiB ring
		if _, err := c1.Write(data); err != nil {
			t.Fatal(err)
		}
		c1.Close() // before the peer read anything
		got, err := io.ReadAll(c2)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		// The peer may not have seen the disconnect yet: then a write
		// succeeds; one fails with EPIPE once it has.
		limit := time.Now().Add(5 * time.Second)
		for {
			_, err := c2.Write([]byte("x"))
			if errors.Is(err, syscall.EPIPE) {
				break
			}
			if err != nil || time.Now().After(limit) {
				t.Fatalf("Write to a closed peer: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestDeadPeer: an abrupt end (the peer's connection torn down without a
// FIN) gives Read the remaining data and then a reset error, never a hang
// or io.EOF; Write fails.
func TestDeadPeer(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		defer stop()
		c1.Write([]byte("last words"))
		// Wait until the bytes are in c2's ring, unread, then cut c1 off.
		for limit := time.Now().Add(5 * time.Second); ; {
			c2.applyQueued() // nobody reads c2: apply its events here
			c2.mu.Lock()
			arrived := c2.rProd-c2.rCons == 10
			c2.mu.Unlock()
			if arrived {
				break
			}
			if time.Now().After(limit) {
				t.Fatal("data never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		c1.ep.Disconnect(0) // abrupt, no FIN
		c2.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 10)
		if _, err := io.ReadFull(c2, b); err != nil || string(b) != "last words" {
			t.Fatalf("%q %v", b, err)
		}
		_, err := c2.Read(b)
		if err == io.EOF || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("Read after a dead peer: %v", err)
		}
		if _, err := c2.Write(b); err == nil {
			t.Fatal("Write to a dead peer succeeded")
		}
	})
}

func TestDeadlines(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, _, stop := pipe(t, ia, 8192)
		defer stop()
		c1.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		start := time.Now()
		_, err := c1.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v", err)
		}
		if d := time.Since(start); d < 25*time.Millisecond || d > 2*time.Second {
			t.Errorf("Read timed out after %v", d)
		}
		c1.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))
		n, err := c1.Write(make([]byte, 1<<20)) // more than the peer's ring
		if !errors.As(err, &ne) || !ne.Timeout() || n == 0 || n >= 1<<20 {
			t.Fatalf("Write: %d, %v", n, err)
		}
	})
}

// TestHandshakeReject dials with a Hello of version 9: the server rejects
// it, and the dial error says why.
func TestHandshakeReject(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		lc := ListenConfig{IA: ia}
		l, err := lc.Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for _, tc := range []struct {
			hook func([]byte) []byte
			want string
		}{
			{func(b []byte) []byte { b[4] = 9; return b }, "peer rejected the handshake: unsupported version 9 (server speaks 1)"},
			{func(b []byte) []byte { return []byte("GET / HTTP/1.1") }, "peer rejected the handshake: bad magic"},
			{func(b []byte) []byte { return b[:10] }, "peer rejected the handshake: malformed hello"},
		} {
			setHook(&testHelloHook, tc.hook)
			d := Dialer{IA: ia, Timeout: 5 * time.Second}
			_, err := d.Dial("rdma", l.Addr().String())
			testHelloHook.Store(nil)
			var oe *net.OpError
			var he *HandshakeError
			if !errors.As(err, &oe) || oe.Op != "dial" || !errors.As(err, &he) || !he.PeerRejected {
				t.Fatalf("err = %v", err)
			}
			want := "dial rdma " + l.Addr().String() + ": " + tc.want
			if err.Error() != want {
				t.Errorf("error text\n got %q\nwant %q", err.Error(), want)
			}
		}
	})
}

func TestDialErrors(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		d := Dialer{IA: ia, Timeout: 5 * time.Second}
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = d.Dial("rdma", addr)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" || oe.Net != "rdma" || oe.Addr == nil {
			t.Errorf("dial to nobody: %v", err)
		}
		if _, err := d.Dial("tcp", addr); err == nil {
			t.Error("network tcp accepted")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := d.DialContext(ctx, "rdma", addr); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled dial: %v", err)
		}
		if _, err := (&ListenConfig{IA: ia}).Listen(ctx, "rdma", listenAddr(ia)); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled listen: %v", err)
		}
	})
}

func TestListenerClose(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		if l.Addr().Network() != "rdma" {
			t.Errorf("network %q", l.Addr().Network())
		}
		errc := make(chan error, 1)
		go func() { _, err := l.Accept(); errc <- err }()
		time.Sleep(20 * time.Millisecond)
		l.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Accept")
		}
	})
}

func TestDup(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		serve(t, l, func(c net.Conn) { io.Copy(c, c); c.Close() })
		d := &Dialer{IA: ia, Timeout: 5 * time.Second}
		nc, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c := nc.(*Conn)
		defer c.Close()
		dup, err := c.Dup(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer dup.Close()
		// The Dialer dups its live connection for the same address.
		nc2, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc2.Close()
		for _, x := range []net.Conn{c, dup, nc2} {
			x.Write([]byte("ping"))
			b := make([]byte, 4)
			if _, err := io.ReadFull(x, b); err != nil || string(b) != "ping" {
				t.Fatalf("%q %v", b, err)
			}
		}
		if x, ok := nc2.(*Conn); !ok || x.RemoteAddr().String() != c.RemoteAddr().String() {
			t.Errorf("dup went elsewhere")
		}
	})
}

// TestBacklog: connections that came up but were not taken by Accept
// count against Backlog; one more dial is refused with a reason, and
// taking one with Accept makes room again.
func TestBacklog(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia, Backlog: 1}).Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		d := Dialer{IA: ia, Timeout: 5 * time.Second, NoDup: true}
		c1, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		_, err = d.Dial("rdma", l.Addr().String())
		var he *HandshakeError
		if !errors.As(err, &he) || !he.PeerRejected || !strings.Contains(err.Error(), "server out of resources") {
			t.Fatalf("dial beyond the backlog: %v", err)
		}
		s1, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s1.Close()
		c3, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatalf("dial after Accept made room: %v", err)
		}
		c3.Close()
	})
}
