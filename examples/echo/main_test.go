package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEcho runs the server and both client modes against each other.
func TestEcho(t *testing.T) {
	l, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(l, log.New(io.Discard, "", 0)) }()
	defer func() {
		l.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var out bytes.Buffer
	in := "hello\nrdma world\n"
	if err := runClient(context.Background(), "", l.Addr().String(), 0, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Errorf("echo %q, want %q", out.String(), in)
	}
	out.Reset()
	if err := runClient(context.Background(), "", l.Addr().String(), 5<<20, nil, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "5242880 bytes sent and echoed") {
		t.Errorf("timed run: %q", out.String())
	}
}
