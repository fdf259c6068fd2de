//go:build verbs && linux && cgo

package rdmanet

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/internal/rxepair"
)

// TestKeepAliveDeadPeerVerbs is TestKeepAliveDeadPeer on the verbs
// provider: two rxe devices whose traffic crosses a veth (rxepair), the
// link cut under an idle Read and a Write with data in flight. Both fail
// with ETIMEDOUT once the provider's keepalive probe goes unacknowledged.
func TestKeepAliveDeadPeerVerbs(t *testing.T) {
	if addr := os.Getenv("RDMANET_TEST_ADDR"); addr != "" && addr != os.Getenv("RDMA_RXE_ADDR") {
		t.Skip("runs in the rxe0 run of the suite only: it builds rxe devices of its own")
	}
	pair := rxepair.New(t)
	ka := net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 2}
	const bound = 3 * 3 * time.Second // 3 × (Idle + Interval × Count)

	lc := ListenConfig{IA: "verbs:" + pair.ServerIP, KeepAliveConfig: ka}
	l, err := lc.Listen(context.Background(), "rdma", pair.ServerIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 2)
	serve(t, l, func(c net.Conn) {
		accepted <- c
		io.Copy(io.Discard, c)
		c.Close()
	})
	d := Dialer{IA: "verbs:" + pair.ClientIP, Timeout: 20 * time.Second, NoDup: true, KeepAliveConfig: ka}
	reader, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	writer, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	for range 2 {
		s := <-accepted
		defer s.Close()
	}
	// Probed while idle, the connections stay up.
	time.Sleep(3 * ka.Idle)
	if _, err := writer.Write([]byte("still here")); err != nil {
		t.Fatalf("write after idling with keepalive: %v", err)
	}

	type result struct {
		err     error
		elapsed time.Duration
	}
	readDone := make(chan result, 1)
	writeDone := make(chan result, 1)
	pair.Cut(t)
	start := time.Now()
	go func() {
		_, err := reader.Read(make([]byte, 1))
		readDone <- result{err, time.Since(start)}
	}()
	go func() {
		_, err := writer.Write(make([]byte, 4<<20))
		writeDone <- result{err, time.Since(start)}
	}()
	for _, w := range []struct {
		op   string
		done chan result
	}{{"read", readDone}, {"write", writeDone}} {
		select {
		case r := <-w.done:
			var oe *net.OpError
			if !errors.As(r.err, &oe) || oe.Op != w.op {
				t.Errorf("%s: %v, want a *net.OpError %q", w.op, r.err, w.op)
			}
			if !errors.Is(r.err, syscall.ETIMEDOUT) || !oe.Timeout() {
				t.Errorf("%s: %v, want ETIMEDOUT, a timeout", w.op, r.err)
			}
			t.Logf("%s failed after %v: %v", w.op, r.elapsed.Round(time.Millisecond), r.err)
		case <-time.After(bound - time.Since(start)):
			t.Fatalf("%s still blocked %v after the link was cut", w.op, bound)
		}
	}
}
