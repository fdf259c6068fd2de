package main

import (
	"bytes"
	"context"
	"github.com/rdmanet/rdmanet/rdmanet"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The demo must leave nothing running: its shutdown is part of what it
// shows.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the demo as main does and checks its report: the server
// line, one line per request with its answer over rdma, rdma connections
// on both sides, and the final ok.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, "", "127.0.0.1:0", &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	report := out.String()
	t.Logf("output:\n%s", report)
	for _, pat := range []string{
		`(?m)^server: http\.Server on an rdmanet listener at 127\.0\.0\.1:\d+ \(network "rdma", IA "iwarp"\)$`,
		`(?m)^client: connection 1: rdma, 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+$`,
		`(?m)^GET /hello -> HTTP/1\.1 200 OK: "hello over rdma" \(connection 1, rdma, new\)$`,
		`(?m)^POST /echo -> HTTP/1\.1 200 OK: "ping through rdmanet" \(connection \d+, rdma, (new|kept alive)\)$`,
		`(?m)^GET /big -> HTTP/1\.1 200 OK: 1048576 bytes, as sent \(connection \d+, rdma, (new|kept alive)\)$`,
		`(?m)^server: accepted [1-9]\d* connection\(s\): [1-9]\d* rdma$`,
		`(?m)^ok: 3 requests over [1-9]\d* rdma connection\(s\)$`,
	} {
		if !regexp.MustCompile(pat).MatchString(report) {
			t.Errorf("output has no line matching %s", pat)
		}
	}
	if strings.Contains(report, "tcp fallback") || strings.Contains(report, "unexpected") {
		t.Errorf("a connection was not rdma")
	}
}

// TestTransport checks the label for a plain TCP connection, which the
// demo would print were a Dialer's FallbackTCP used (TestRun covers the
// rdma label).
func TestTransport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := transport(c); got != "tcp fallback" {
		t.Errorf("transport(*net.TCPConn) = %q, want %q", got, "tcp fallback")
	}
	fc := &rdmanet.FallbackConn{Conn: c, Reason: rdmanet.ReasonNotRDMAPeer}
	if got, want := transport(fc), "tcp fallback ("+rdmanet.ReasonNotRDMAPeer.String()+")"; got != want {
		t.Errorf("transport(*rdmanet.FallbackConn) = %q, want %q", got, want)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := transport(p1); !strings.HasPrefix(got, "unexpected") {
		t.Errorf("transport(net.Pipe) = %q, want it called unexpected", got)
	}
}

// TestWrongAnswer checks that the demo notices a wrong response body: a
// plain TCP server that answers every request with the same text.
func TestWrongAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "hello over rdma") // right for /hello only
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	n, err := requests(context.Background(), &http.Client{Transport: tr}, srv.URL, io.Discard, func(net.Conn) int { return 1 })
	if err == nil || !strings.Contains(err.Error(), "POST /echo") || n != 1 {
		t.Errorf("requests = %d, %v; want 1 and an error about POST /echo", n, err)
	}
}

// TestListenError checks that a bad address is reported, not ignored.
func TestListenError(t *testing.T) {
	if err := run(context.Background(), "", "no-port-here", io.Discard); err == nil {
		t.Error("run with a bad address succeeded")
	}
}
