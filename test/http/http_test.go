// Package http_test runs net/http over rdmanet: a Server on an rdmanet
// Listener, a Client whose Transport dials through rdmanet. The provider
// is the pure-Go iWARP one on loopback; RDMANET_TEST_IA selects another IA
// and RDMANET_TEST_ADDR its address (the VM suite runs it on verbs IAs over
// rxe0 and siw0).
package http_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func iaName() string {
	if ia := os.Getenv("RDMANET_TEST_IA"); ia != "" {
		return ia
	}
	return "iwarp"
}

// listenAddr is where the server listens: loopback, or RDMANET_TEST_ADDR
// with a verbs IA (rdma_cm cannot use rxe or siw on lo).
func listenAddr() string {
	ip := "127.0.0.1"
	if a := os.Getenv("RDMANET_TEST_ADDR"); a != "" && iaName() != "iwarp" {
		ip = a
	}
	return net.JoinHostPort(ip, "0")
}

// serve starts srv on an rdmanet listener and returns its base URL.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	lc := rdmanet.ListenConfig{IA: iaName()}
	l, err := lc.Listen(context.Background(), "rdma", listenAddr())
	if err != nil {
		t.Fatal(err)
	}
	// Count the server's connections until closed: srv.Close returns
	// before their goroutines finish closing them (a verbs Close can take
	// a while), and goleak must not see those goroutines.
	var conns sync.WaitGroup
	hook := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.Done()
		}
		if hook != nil {
			hook(c, s)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		conns.Wait()
	})
	return "http://" + l.Addr().String()
}

// newClient returns a Client whose connections are rdmanet connections.
func newClient(t *testing.T) *http.Client {
	d := &rdmanet.Dialer{IA: iaName(), Timeout: 10 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		},
		// A pool much smaller than the workers, so requests queue for
		// and reuse connections. (It also keeps both sides within what
		// kernel siw gives one process: its 15th rdmanet connection
		// fails in rdma_create_qp, libsiw "prepare QP mapping failed";
		// see the project notes.)
		MaxConnsPerHost:     8,
		MaxIdleConnsPerHost: 8,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// payload writes n deterministic pseudo-random bytes for seed to w and
// returns their SHA-256.
func payload(w io.Writer, seed uint64, n int) (string, error) {
	r := rand.New(rand.NewPCG(seed, 99))
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for n > 0 {
		k := min(n, len(buf))
		for i := 0; i < k; i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < k; j++ {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		h.Write(buf[:k])
		if _, err := w.Write(buf[:k]); err != nil {
			return "", err
		}
		n -= k
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// echoHandler hashes the request body into X-Body-Sum and answers with
// ?size bytes of ?seed's payload.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	if _, err := io.Copy(h, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	size, _ := strconv.Atoi(r.URL.Query().Get("size"))
	seed, _ := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
	w.Header().Set("X-Body-Sum", hex.EncodeToString(h.Sum(nil)))
	w.Header().Set("Content-Length", strconv.Itoa(size))
	payload(w, seed, size)
}

// TestConcurrentRequests: 50 goroutines × 20 requests on one client over
// at most 8 connections; one request in ten moves 3 MiB each way, the
// rest a few KiB. Every body is
// checked by hash in both directions.
func TestConcurrentRequests(t *testing.T) {
	base := serve(t, &http.Server{Handler: http.HandlerFunc(echoHandler)})
	client := newClient(t)
	const workers, perWorker = 50, 20
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				seed := uint64(w*1000 + i)
				up, down := 1000+int(seed%7000), 2000+int(seed%5000)
				if (w+i)%10 == 0 {
					up, down = 3<<20, 3<<20+int(seed%1000)
				}
				if err := roundTrip(client, base, seed, up, down); err != nil {
					errc <- fmt.Errorf("worker %d request %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func roundTrip(client *http.Client, base string, seed uint64, up, down int) error {
	pr, pw := io.Pipe()
	sumc := make(chan string, 1)
	go func() {
		s, err := payload(pw, seed+1<<40, up)
		pw.CloseWithError(err)
		sumc <- s
	}()
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/echo?size=%d&seed=%d", base, down, seed), pr)
	req.ContentLength = int64(up)
	resp, err := client.Do(req)
	if err != nil {
		pr.Close()
		<-sumc
		return err
	}
	defer resp.Body.Close()
	upSum := <-sumc
	if got := resp.Header.Get("X-Body-Sum"); got != upSum {
		return fmt.Errorf("request body hash %s, server saw %s", upSum, got)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		return err
	}
	want, _ := payload(io.Discard, seed, down)
	if got := hex.EncodeToString(h.Sum(nil)); got != want || n != int64(down) {
		return fmt.Errorf("response body: %d bytes, hash %s, want %d bytes %s", n, got, down, want)
	}
	return nil
}

// TestReadTimeout: a client that stalls in the middle of its request
// headers is cut off by the server's ReadTimeout.
func TestReadTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	handled := make(chan struct{}, 1)
	base := serve(t, &http.Server{ReadTimeout: timeout, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		handled <- struct{}{}
	})})
	// The server's ReadTimeout runs from its Accept, which may come
	// before the dial returns here: start the clock before dialing, so
	// that the server cannot seem to close early.
	start := time.Now()
	c := dialRaw(t, base)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Partial: ") // and nothing more
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(c) // until the server closes
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("reading until the server closes: %v", err)
	}
	if elapsed < timeout || elapsed > 5*time.Second {
		t.Errorf("server closed after %v; ReadTimeout is %v", elapsed, timeout)
	}
	select {
	case <-handled:
		t.Error("the handler ran for an incomplete request")
	default:
	}
	t.Logf("server closed the stalled connection after %v", elapsed)
}

// TestWriteTimeout: a handler whose response stalls because the client
// does not read fails its Write once the server's WriteTimeout passes.
func TestWriteTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	type result struct {
		n   int64
		err error
		at  time.Duration
	}
	res := make(chan result, 1)
	base := serve(t, &http.Server{WriteTimeout: timeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// WriteTimeout runs from the end of the request headers, which
		// is about when the handler starts.
		start := time.Now()
		buf := make([]byte, 64<<10)
		var n int64
		for {
			k, err := w.Write(buf)
			n += int64(k)
			if err != nil {
				res <- result{n, err, time.Since(start)}
				return
			}
			if n > 1<<30 {
				res <- result{n, nil, time.Since(start)}
				return
			}
		}
	})})
	c := dialRaw(t, base)
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	// Read the status line and stop reading.
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line[:12] != "HTTP/1.1 200" {
		t.Fatalf("status line %q, %v", line, err)
	}
	select {
	case r := <-res:
		if r.err == nil {
			t.Fatalf("the handler wrote %d bytes to a client that does not read", r.n)
		}
		if r.at < timeout-20*time.Millisecond || r.at > 5*time.Second {
			t.Errorf("the handler's Write failed after %v; WriteTimeout is %v", r.at, timeout)
		}
		var ne net.Error
		if !errors.As(r.err, &ne) || !ne.Timeout() {
			t.Logf("write error (not a net.Error timeout, as net/http may wrap it): %v", r.err)
		}
		t.Logf("handler's Write failed after %v and %d bytes: %v", r.at, r.n, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's Write never failed")
	}
}

// TestIdleTimeout: an idle keep-alive connection is closed by the server
// after IdleTimeout; the client sees EOF and the server's ConnState
// hook sees Idle then Closed.
func TestIdleTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var mu sync.Mutex
	var states []http.ConnState
	closed := make(chan time.Time, 1)
	base := serve(t, &http.Server{IdleTimeout: timeout,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
			if s == http.StateClosed {
				closed <- time.Now()
			}
		}})
	c := dialRaw(t, base)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	idleSince := time.Now()
	if string(body) != "ok" || resp.Close {
		t.Fatalf("response %q close=%v", body, resp.Close)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d, %v; want io.EOF from the server's close", n, err)
	}
	elapsed := time.Since(idleSince)
	if elapsed < timeout-50*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("server closed the idle connection after %v; IdleTimeout is %v", elapsed, timeout)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("ConnState never reported StateClosed")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []http.ConnState{http.StateNew, http.StateActive, http.StateIdle, http.StateClosed}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("ConnState sequence %v, want %v", states, want)
	}
	t.Logf("server closed the idle connection after %v", elapsed)
}

// dialRaw dials the server of base with rdmanet, for hand-made requests.
func dialRaw(t *testing.T, base string) net.Conn {
	t.Helper()
	d := rdmanet.Dialer{IA: iaName(), Timeout: 10 * time.Second}
	c, err := d.Dial("rdma", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
