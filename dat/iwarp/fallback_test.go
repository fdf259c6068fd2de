package iwarp_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// fallbackSink is a ListenConfig.Fallback that reads each connection to
// EOF in a goroutine of its own and reports the bytes.
type fallbackSink struct {
	fn  func(net.Conn)
	got chan []byte
	wg  sync.WaitGroup
}

func newFallbackSink(t *testing.T) *fallbackSink {
	s := &fallbackSink{got: make(chan []byte, 64)}
	s.fn = func(c net.Conn) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(testTimeout))
			b, err := io.ReadAll(c)
			if err != nil {
				b = append(b, "<read error: "+err.Error()+">"...)
			}
			s.got <- b
		}()
	}
	t.Cleanup(s.wg.Wait)
	return s
}

func (s *fallbackSink) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-s.got:
		return b
	case <-time.After(testTimeout):
		t.Fatal("nothing reached Fallback")
		return nil
	}
}

// TestFallbackBytesExact: whatever a client that is not an MPA initiator
// sends reaches Fallback byte for byte, the bytes admission read to decide
// included, however the client's writes were cut.
func TestFallbackBytesExact(t *testing.T) {
	leakCheck(t)
	fb := newFallbackSink(t)
	l := listen(t, openIA(t), driver.ListenConfig{Fallback: fb.fn})
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 256<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	cases := []struct {
		name   string
		writes []string // written with a pause between them
	}{
		{"HTTP request", []string{"GET /index.html HTTP/1.1\r\nHost: example\r\n\r\n"}},
		{"random bytes", []string{string(random)}},
		{"MPA Reply key", []string{string(mpaFrame(keyRep, flagE, 2, v2Block(1, 1))) + "trailing"}},
		{"key prefix, then different", []string{"MPA ID", " Req", "uest for something else"}},
		{"key prefix, then EOF", []string{keyReq[:15]}},
		{"one byte", []string{"M"}},
		{"one other byte", []string{"\x00"}},
		{"nothing", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, l.Addr())
			for i, w := range tc.writes {
				if i > 0 {
					time.Sleep(20 * time.Millisecond)
				}
				if _, err := c.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			c.CloseWrite()
			want := strings.Join(tc.writes, "")
			if got := fb.next(t); !bytes.Equal(got, []byte(want)) {
				t.Fatalf("Fallback read %d bytes %.40q, want %d bytes %.40q", len(got), got, len(want), want)
			}
		})
	}

	// A connection that sent the whole Request key is MPA's: the rest
	// must be a valid Request, or it is dropped, not handed on.
	c := dialRaw(t, l.Addr())
	c.Write(append([]byte(keyReq), "\xff\xff\xff\xff garbage"...))
	expectDropped(t, c, testTimeout)
	if got := iwarp.ListenerCounts(l); got.Fallback != len(cases) || got.Dropped != 1 {
		t.Fatalf("counts %+v, want %d fallbacks and 1 drop", got, len(cases))
	}
}

// TestFallbackServerSpeaksFirst: a client that sends nothing is handed to
// Fallback after fallback_wait, so a protocol whose server speaks first
// works on the port.
func TestFallbackServerSpeaksFirst(t *testing.T) {
	leakCheck(t)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	greeter := func(c net.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(testTimeout))
			io.WriteString(c, "220 hello\r\n")
			io.Copy(c, c) // echo
		}()
	}
	l := listen(t, openIA(t), driver.ListenConfig{Fallback: greeter})
	c := dialRaw(t, l.Addr())
	c.SetDeadline(time.Now().Add(testTimeout))
	start := time.Now()
	line := make([]byte, len("220 hello\r\n"))
	if _, err := io.ReadFull(c, line); err != nil || string(line) != "220 hello\r\n" {
		t.Fatalf("greeting %q, %v", line, err)
	}
	t.Logf("greeting after %v (fallback_wait %v)", time.Since(start), iwarp.DefaultFallbackWait)
	io.WriteString(c, "echo")
	c.CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "echo" {
		t.Fatalf("echo %q, %v", b, err)
	}
}

// chanListener is a net.Listener fed by a Fallback func.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// fallback hands c to Accept.
func (cl *chanListener) fallback(c net.Conn) {
	select {
	case cl.conns <- c:
	case <-cl.done:
		c.Close()
	}
}

func (cl *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-cl.conns:
		return c, nil
	case <-cl.done:
		return nil, net.ErrClosed
	}
}

func (cl *chanListener) Close() error {
	cl.once.Do(func() { close(cl.done) })
	return nil
}

func (cl *chanListener) Addr() net.Addr { return cl.addr }

// TestFallbackHTTP: one port serves an http.Server through Fallback and
// MPA initiators through Accept, interleaved.
func TestFallbackHTTP(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	cl := newChanListener(nil)
	l := listen(t, ia, driver.ListenConfig{Fallback: cl.fallback})
	cl.addr = l.Addr()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		w.Write(body)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(cl) }()
	defer func() {
		srv.Close()
		<-served
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: testTimeout}

	for i := range 3 {
		body := strings.Repeat("x", 1+i*100000)
		res, err := client.Post("http://"+l.Addr().String()+"/echo", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || res.Header.Get("X-Path") != "/echo" || string(got) != body {
			t.Fatalf("response %d %q, %d bytes (%v), want 200 and %d bytes", res.StatusCode, res.Header.Get("X-Path"), len(got), err, len(body))
		}
		tr.CloseIdleConnections() // the next request comes on a new connection

		q := newQP(t, ia, defaultQPConfig, nil)
		resp := newQP(t, ia, defaultQPConfig, nil)
		ch := connectAsync(ctx, q, l.Addr(), []byte("rdma"))
		r := accept(t, ctx, l)
		if string(r.Info().PrivateData) != "rdma" {
			t.Fatalf("private data %q", r.Info().PrivateData)
		}
		if _, err := r.Accept(ctx, resp, nil); err != nil {
			t.Fatal(err)
		}
		if res := waitConnect(t, ch); res.err != nil {
			t.Fatal(res.err)
		}
	}
}

// closeWatcher is a raw TCP server for initiator tests: it runs greet on
// each connection, then reads until the connection ends and reports that.
func closeWatcher(t *testing.T, greet func(c net.Conn)) (*rawListener, <-chan error) {
	t.Helper()
	ended := make(chan error, 4)
	rl := newRawListener(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(testTimeout))
		greet(c)
		_, err := io.Copy(io.Discard, c)
		ended <- err
	})
	return rl, ended
}

// expectEnded checks that the server side saw the initiator close.
func expectEnded(t *testing.T, ended <-chan error) {
	t.Helper()
	select {
	case err := <-ended:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the initiator left its TCP connection open")
		}
	case <-time.After(testTimeout):
		t.Fatal("server goroutine still running")
	}
}

// TestConnectNotRDMAPeer: a server that answers with something other than
// an MPA Reply fails Connect with ErrNotRDMAPeer as soon as the first
// wrong byte arrives (fewer bytes than an MPA header are enough), and the
// initiator closes its TCP connection at once.
func TestConnectNotRDMAPeer(t *testing.T) {
	cases := []struct {
		name  string
		greet func(c net.Conn)
	}{
		{"banner before the Request", func(c net.Conn) { io.WriteString(c, "SSH-2.0-x\r\n") }},
		{"one byte after the Request", func(c net.Conn) {
			readFrame(c)
			io.WriteString(c, "H")
		}},
		{"MPA key prefix, then other bytes", func(c net.Conn) {
			readFrame(c)
			io.WriteString(c, "MPA ID Rex")
		}},
		{"a Request for a Reply", func(c net.Conn) {
			readFrame(c)
			c.Write(mpaFrame(keyReq, flagE, 2, v2Block(1, 1)))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			ctx := testCtx(t)
			rl, ended := closeWatcher(t, tc.greet)
			_, err := newQP(t, openIA(t), defaultQPConfig, nil).Connect(ctx, rl.Addr(), nil)
			assertNonPeer(t, err)
			if !errors.Is(err, driver.ErrNotRDMAPeer) {
				t.Fatalf("connect: %v, want ErrNotRDMAPeer", err)
			}
			expectEnded(t, ended)
		})
	}
}

// TestConnectSilentServer: a TCP server that never answers is reported by
// the reply timeout (unreachable), not as a non-RDMA peer, and the
// initiator closes its connection when it gives up.
func TestConnectSilentServer(t *testing.T) {
	leakCheck(t)
	rl, ended := closeWatcher(t, func(net.Conn) {})
	_, err := newQP(t, openIA(t, "rep_timeout=200ms"), defaultQPConfig, nil).Connect(testCtx(t), rl.Addr(), nil)
	t.Logf("connect: %v", err)
	if !errors.Is(err, driver.ErrUnreachable) || errors.Is(err, driver.ErrNotRDMAPeer) {
		t.Fatalf("connect: %v, want ErrUnreachable only", err)
	}
	expectEnded(t, ended)
}

// TestConnectHTTPServer: against net/http. An MPA Request has no line end,
// so an HTTP/1 server waits for more and the reply timeout applies; a
// Request whose private data holds a line end gets the server's 400 page
// at once, which fails the Connect with ErrNotRDMAPeer.
func TestConnectHTTPServer(t *testing.T) {
	leakCheck(t)
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr()
	ia := openIA(t, "rep_timeout=300ms")

	_, err := newQP(t, ia, defaultQPConfig, nil).Connect(testCtx(t), addr, []byte("\r\n"))
	t.Logf("connect with a line end: %v", err)
	if !errors.Is(err, driver.ErrNotRDMAPeer) {
		t.Fatalf("connect: %v, want ErrNotRDMAPeer", err)
	}
	if !strings.Contains(err.Error(), "HTTP/1.1 400") {
		t.Fatalf("connect: %v: the error should show what the server sent", err)
	}

	_, err = newQP(t, ia, defaultQPConfig, nil).Connect(testCtx(t), addr, nil)
	t.Logf("connect: %v", err)
	if !errors.Is(err, driver.ErrUnreachable) {
		t.Fatalf("connect: %v, want ErrUnreachable (reply timeout)", err)
	}
	// Both connections are gone from the server: the initiator closed the
	// second when it gave up.
	for range 2 {
		select {
		case <-closed:
		case <-time.After(testTimeout):
			t.Fatal("the HTTP server still holds a connection of the initiator")
		}
	}
}
