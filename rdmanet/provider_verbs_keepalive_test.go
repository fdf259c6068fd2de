//go:build verbs && linux && cgo

package rdmanet

import (
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/internal/rdmapair"
)

// TestKeepAliveDeadPeerVerbs is TestKeepAliveDeadPeer on the verbs
// provider: two devices whose traffic crosses a veth (rdmapair), the link
// cut under an idle Read and a Write with data in flight. Both fail with
// ETIMEDOUT once the provider's keepalive probe goes unanswered. The
// suite's rxe0 run builds an rxe pair (the probe is an RDMA Write), its
// siw0 run a siw pair (an RDMA Read); outside the suite, both.
func TestKeepAliveDeadPeerVerbs(t *testing.T) {
	kinds := []rdmapair.Kind{rdmapair.RXE, rdmapair.SIW}
	switch os.Getenv("RDMANET_TEST_ADDR") {
	case "":
	case os.Getenv("RDMA_RXE_ADDR"):
		kinds = kinds[:1]
	case os.Getenv("RDMA_SIW_ADDR"):
		kinds = kinds[1:]
	default:
		t.Skip("runs in the suite's rxe0 and siw0 runs: it builds devices of its own")
	}
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) { keepAliveDeadPeerVerbs(t, kind) })
	}
}

func keepAliveDeadPeerVerbs(t *testing.T, kind rdmapair.Kind) {
	pair := rdmapair.New(t, kind)
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
