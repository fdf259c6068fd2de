//go:build verbs && linux && cgo

package rdmanet

import (
	"context"
	"io"
	"net"
	"os"
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

	expectDeadPeer(t, reader, writer, func() { pair.Cut(t) }, bound)
}
