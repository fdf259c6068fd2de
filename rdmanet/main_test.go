package rdmanet

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Providers the connection tests run on: the real pure-Go iWARP provider
// over loopback TCP. (RDMANET_TEST_IA adds another IA name, e.g. a verbs
// IA inside the test VM.)
func providers(t testing.TB) []string {
	ps := []string{"iwarp"}
	if ia := os.Getenv("RDMANET_TEST_IA"); ia != "" && ia != "iwarp" {
		ps = append(ps, ia)
	}
	return ps
}

// pipe returns a connected pair on provider ia: c1 dialed, c2 accepted.
func pipe(t testing.TB, ia string, bufSize int) (c1, c2 *Conn, stop func()) {
	t.Helper()
	lc := ListenConfig{IA: ia, BufferSize: bufSize}
	l, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	d := &Dialer{IA: ia, BufferSize: bufSize, Timeout: 10 * time.Second}
	nc, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	r := <-ch
	l.Close()
	if r.err != nil {
		nc.Close()
		t.Fatal(r.err)
	}
	c1, c2 = nc.(*Conn), r.c.(*Conn)
	return c1, c2, func() { c1.Close(); c2.Close() }
}

// forEach runs f as a subtest per provider.
func forEach(t *testing.T, f func(t *testing.T, ia string)) {
	for _, ia := range providers(t) {
		t.Run(ia, func(t *testing.T) { f(t, ia) })
	}
}
