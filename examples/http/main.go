// Command http runs net/http over rdmanet in one process: an http.Server
// on an rdmanet listener on 127.0.0.1 (a free port), and an http.Client
// whose Transport dials through rdmanet. It makes a few requests and
// prints each request and response, which connection carried it and that
// connection's transport, then shuts everything down.
//
//	go run ./examples/http
//
// The default IA is the pure-Go iWARP provider, which needs nothing but
// TCP; -ia names another (e.g. a verbs IA, with -addr the device's
// address). It exits 1, with the reason on stderr, if a request fails, an
// answer is wrong or a connection is not an rdmanet one.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func main() {
	ia := flag.String("ia", "", `DAT IA name (default "iwarp", the pure-Go iWARP provider)`)
	addr := flag.String("addr", "127.0.0.1:0", "address the server listens on (port 0: a free one)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *ia, *addr, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "http demo failed:", err)
		os.Exit(1)
	}
}

// bigBody is what GET /big answers: 1 MiB, several times the default
// receive ring, so the transfer wraps the rings on both sides.
var bigBody = bytes.Repeat([]byte("rdmanet!"), 1<<17)

// handler is an ordinary net/http handler; nothing in it knows about RDMA.
func handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello over rdma")
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bigBody)
	})
	return mux
}

// transport names the transport under a connection: "rdma" for an
// rdmanet connection (its address's network), "tcp fallback" for the
// plain TCP connection a Dialer with FallbackTCP returns when RDMA fails.
func transport(c net.Conn) string {
	switch c := c.(type) {
	case *rdmanet.Conn:
		return c.LocalAddr().Network()
	case *rdmanet.FallbackConn:
		return "tcp fallback (" + c.Reason.String() + ")"
	case *net.TCPConn:
		return "tcp fallback"
	default:
		return fmt.Sprintf("unexpected %T", c)
	}
}

// lockedWriter serialises writes: the Transport dials in goroutines of
// its own, which print too.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// run is the whole demo, writing its report to out.
func run(ctx context.Context, ia, addr string, out io.Writer) error {
	out = &lockedWriter{w: out}
	// The server: an http.Server on an rdmanet listener. ConnState sees
	// every connection the server accepts; count them by transport.
	lc := rdmanet.ListenConfig{IA: ia}
	ln, err := lc.Listen(ctx, "rdma", addr)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	accepted := map[string]int{}
	srv := &http.Server{
		Handler:           handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				accepted[transport(c)]++
				mu.Unlock()
			}
		},
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// A Conn does not say which IA it runs on; this is the one configured
	// (the empty name is the default, "iwarp").
	iaName := ia
	if iaName == "" {
		iaName = "iwarp"
	}
	fmt.Fprintf(out, "server: http.Server on an rdmanet listener at %v (network %q, IA %q)\n",
		ln.Addr(), ln.Addr().Network(), iaName)

	// The client: an http.Client whose Transport dials through an
	// rdmanet.Dialer. Number the connections it makes and remember each
	// one's transport.
	d := &rdmanet.Dialer{IA: ia, Timeout: 10 * time.Second}
	var dialed []net.Conn
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "rdma", addr)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			dialed = append(dialed, c)
			n := len(dialed)
			mu.Unlock()
			fmt.Fprintf(out, "client: connection %d: %s, %v -> %v\n", n, transport(c), c.LocalAddr(), c.RemoteAddr())
			return c, nil
		},
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	n, reqErr := requests(ctx, client, "http://"+ln.Addr().String(), out, func(c net.Conn) int {
		mu.Lock()
		defer mu.Unlock()
		for i, d := range dialed {
			if d == c {
				return i + 1
			}
		}
		return 0
	})

	// Shut down: the client's idle connections, then the server, which
	// closes its listener and waits for its connections to go idle.
	tr.CloseIdleConnections()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	shutErr := srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		shutErr = errors.Join(shutErr, err)
	}
	if reqErr != nil || shutErr != nil {
		return errors.Join(reqErr, shutErr)
	}

	// Every connection, on both sides, must have been an rdmanet one.
	mu.Lock()
	defer mu.Unlock()
	var summary []string
	total := 0
	for t, n := range accepted {
		summary = append(summary, fmt.Sprintf("%d %s", n, t))
		total += n
	}
	slices.Sort(summary)
	fmt.Fprintf(out, "server: accepted %d connection(s): %s\n", total, strings.Join(summary, ", "))
	for i, c := range dialed {
		if t := transport(c); t != "rdma" {
			return fmt.Errorf("client connection %d is %s, not rdma", i+1, t)
		}
	}
	if len(dialed) == 0 || len(accepted) != 1 || accepted["rdma"] == 0 {
		return fmt.Errorf("expected rdma connections on both sides: client dialed %d, server accepted %v", len(dialed), accepted)
	}
	fmt.Fprintf(out, "ok: %d requests over %d rdma connection(s)\n", n, len(dialed))
	return nil
}

// requests makes the demo's requests, checks each answer and prints a
// line per request; connNumber maps the connection that carried a request
// to its number. It returns how many requests succeeded.
func requests(ctx context.Context, client *http.Client, base string, out io.Writer, connNumber func(net.Conn) int) (n int, err error) {
	for _, rq := range []struct {
		method, path string
		body         string
		want         []byte
	}{
		{"GET", "/hello", "", []byte("hello over rdma")},
		{"POST", "/echo", "ping through rdmanet", []byte("ping through rdmanet")},
		{"GET", "/big", "", bigBody},
	} {
		// httptrace tells which connection the Transport picked, and
		// whether it was kept alive from an earlier request.
		var conn net.Conn
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			conn, reused = info.Conn, info.Reused
		}}
		var body io.Reader
		if rq.body != "" {
			body = strings.NewReader(rq.body)
		}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), rq.method, base+rq.path, body)
		if err != nil {
			return n, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return n, err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return n, fmt.Errorf("%s %s: reading the body: %w", rq.method, rq.path, err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, rq.want) {
			return n, fmt.Errorf("%s %s: %s with %d bytes, want 200 OK with %d bytes", rq.method, rq.path, resp.Status, len(got), len(rq.want))
		}
		shown := fmt.Sprintf("%q", got)
		if len(got) > 64 {
			shown = fmt.Sprintf("%d bytes, as sent", len(got))
		}
		how := "new"
		if reused {
			how = "kept alive"
		}
		fmt.Fprintf(out, "%s %s -> %s %s: %s (connection %d, %s, %s)\n",
			rq.method, rq.path, resp.Proto, resp.Status, shown, connNumber(conn), transport(conn), how)
		n++
	}
	return n, nil
}
