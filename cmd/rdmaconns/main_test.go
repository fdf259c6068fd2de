package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// announcer is a server's stderr: it closes listening once the server
// says it listens.
type announcer struct {
	mu        sync.Mutex
	b         bytes.Buffer
	listening chan struct{}
}

func (a *announcer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	had := strings.Contains(a.b.String(), "listening")
	a.b.Write(p)
	if !had && strings.Contains(a.b.String(), "listening") {
		close(a.listening)
	}
	return len(p), nil
}

func (a *announcer) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.String()
}

// TestEcho runs a server and a client of 50 connections in this process
// and checks both report every connection echoed.
func TestEcho(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a free port for the server
	const n = 50
	var sout bytes.Buffer
	serr := &announcer{listening: make(chan struct{})}
	done := make(chan int)
	go func() { done <- run([]string{"-s", "-n", fmt.Sprint(n), "-addr", addr}, &sout, serr) }()
	var cout, cerr bytes.Buffer
	// The client retries nothing: wait for the server's listening line.
	select {
	case <-serr.listening:
	case code := <-done:
		t.Fatalf("server exited %d: %s", code, serr.String())
	}
	if code := run([]string{"-c", addr, "-n", fmt.Sprint(n), "-parallel", "8"}, &cout, &cerr); code != 0 {
		t.Fatalf("client exited %d: %s", code, cerr.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("server exited %d: %s", code, serr.String())
	}
	for _, out := range []string{cout.String(), sout.String()} {
		if !strings.Contains(out, fmt.Sprintf("conns=%d ", n)) || !strings.Contains(out, "failed=0") {
			t.Errorf("report %q", out)
		}
	}
	t.Logf("%s%s", cout.String(), sout.String())
}
