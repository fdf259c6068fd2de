package main

import (
	"context"
	"encoding/json"
	"expvar"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair makes a connected rdmanet pair on loopback and returns the dialed
// end; the test's cleanup closes everything.
func pair(t *testing.T) *rdmanet.Conn {
	t.Helper()
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d := rdmanet.Dialer{Timeout: 10 * time.Second, NoDup: true}
	c, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		c.Close()
		ln.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close(); ln.Close() })
	if _, err := c.Write([]byte("rdmastat")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	return c.(*rdmanet.Conn)
}

// server serves the listing both ways a process may: StatsHandler and
// expvar.
func server(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/debug/rdmanet", rdmanet.StatsHandler())
	mux.Handle("/debug/vars", expvar.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections() // run's keep-alive connections
	})
	return srv
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs strings.Builder
	if code := run(args, &out, &errs); code != 0 {
		t.Fatalf("rdmastat %v: exit %d: %s", args, code, errs.String())
	}
	return out.String()
}

// idOf finds the listed ID of c: the connection whose local address is c's.
func idOf(t *testing.T, l rdmanet.Listing, c *rdmanet.Conn) rdmanet.ConnInfo {
	t.Helper()
	for _, ci := range l.Conns {
		if ci.Local == c.LocalAddr().String() {
			return ci
		}
	}
	t.Fatalf("%v not listed in %+v", c.LocalAddr(), l)
	return rdmanet.ConnInfo{}
}

func TestTable(t *testing.T) {
	c := pair(t)
	srv := server(t)
	for _, path := range []string{"/debug/rdmanet", "/debug/vars"} {
		out := runOK(t, "-url", srv.URL+path)
		ci := idOf(t, rdmanet.Snapshot(), c)
		var row []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.FormatUint(ci.ID, 10) {
				row = f
			}
		}
		if row == nil {
			t.Fatalf("%s: no row for connection %d in\n%s", path, ci.ID, out)
		}
		want := []string{"dial", "open", c.LocalAddr().String(), c.RemoteAddr().String()}
		if strings.Join(row[1:5], " ") != strings.Join(want, " ") {
			t.Errorf("%s: row %q, want it to start %q", path, row, want)
		}
		if !strings.Contains(out, "LISTEN") || !strings.Contains(out, "TX_BYTES") {
			t.Errorf("%s: no listener or connection table in\n%s", path, out)
		}
	}
}

func TestJSON(t *testing.T) {
	c := pair(t)
	srv := server(t)
	for _, path := range []string{"/debug/rdmanet", "/debug/vars"} {
		out := runOK(t, "-json", "-url", srv.URL+path)
		var l rdmanet.Listing
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("%s: %v in\n%s", path, err, out)
		}
		if ci := idOf(t, l, c); ci.Stats.BytesWritten != 8 || ci.Role != "dial" {
			t.Errorf("%s: %+v", path, ci)
		}
	}
}

func TestErrors(t *testing.T) {
	srv := server(t)
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	noVar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"cmdline": ["x"]}`)
	}))
	defer noVar.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-url", notFound.URL}, 1, "404"},
		{[]string{"-url", noVar.URL + "/debug/vars"}, 1, `no "rdmanet" variable`},
		{[]string{"-url", srv.URL + "/debug/rdmanet", "extra"}, 2, "usage"},
		{[]string{"-nope"}, 2, "usage"},
	} {
		var out, errs strings.Builder
		if code := run(tc.args, &out, &errs); code != tc.code || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("rdmastat %v: exit %d, stderr %q; want %d and %q", tc.args, code, errs.String(), tc.code, tc.want)
		}
	}
	// A process that does not answer: the timeout ends the wait.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			<-ctx.Done()
			c.Close()
		}
	}()
	var out, errs strings.Builder
	if code := run([]string{"-timeout", "50ms", "-url", "http://" + ln.Addr().String() + "/debug/rdmanet"}, &out, &errs); code != 1 {
		t.Errorf("silent process: exit %d, %s", code, errs.String())
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestFallbacks: the process's TCP fallbacks, by reason, head the table.
func TestFallbacks(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := tl.Accept()
		accepted <- c
	}()
	// No such IA: the dial falls back for want of a device.
	d := rdmanet.Dialer{IA: "no-such-provider", FallbackTCP: true, Timeout: 5 * time.Second}
	c, err := d.Dial("rdma", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if s := <-accepted; s != nil {
		s.Close()
	}
	srv := server(t)
	want := "no-device " + strconv.FormatUint(rdmanet.Snapshot().Fallbacks["no-device"], 10)
	for _, path := range []string{"/debug/rdmanet", "/debug/vars"} {
		out := runOK(t, "-url", srv.URL+path)
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "fallbacks to TCP: ") {
				line = l
			}
		}
		if !strings.Contains(line, want) || strings.Contains(line, " 0") {
			t.Errorf("%s: fallbacks line %q, want it to list %q and no zero counts, in\n%s", path, line, want, out)
		}
	}
}
