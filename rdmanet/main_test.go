package rdmanet

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// providers lists the IAs the connection tests run on: the real pure-Go
// iWARP provider over loopback TCP, or instead the IA named by
// RDMANET_TEST_IA (the VM suite names a verbs IA on rxe0 or siw0 there,
// with RDMANET_TEST_ADDR the device's address).
func providers(t testing.TB) []string {
	if ia := os.Getenv("RDMANET_TEST_IA"); ia != "" {
		return []string{ia}
	}
	return []string{"iwarp"}
}

// testIP is the address tests listen on and dial from with IA ia: loopback
// for the pure-Go provider, RDMANET_TEST_ADDR for any other (an RDMA
// device's address: rdma_cm cannot use rxe or siw on lo).
func testIP(ia string) netip.Addr {
	if s := os.Getenv("RDMANET_TEST_ADDR"); s != "" && ia != "iwarp" {
		return netip.MustParseAddr(s)
	}
	return netip.MustParseAddr("127.0.0.1")
}

// listenAddr is the address to listen on with IA ia, on a free port.
func listenAddr(ia string) string {
	return netip.AddrPortFrom(testIP(ia), 0).String()
}

// pipe returns a connected pair on provider ia: c1 dialed, c2 accepted.
func pipe(t testing.TB, ia string, bufSize int) (c1, c2 *Conn, stop func()) {
	t.Helper()
	c1, c2, err := connect(ListenConfig{IA: ia, BufferSize: bufSize}, Dialer{IA: ia, BufferSize: bufSize, Timeout: 10 * time.Second}, ia)
	if err != nil {
		t.Fatal(err)
	}
	return c1, c2, func() { c1.Close(); c2.Close() }
}

// connect listens with lc on provider ia's test address, dials it with d
// and returns the dialed and the accepted Conn; the listener is closed.
func connect(lc ListenConfig, d Dialer, ia string) (c1, c2 *Conn, err error) {
	l, err := lc.Listen(context.Background(), "rdma", listenAddr(ia))
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	nc, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		l.Close()
		<-ch
		return nil, nil, err
	}
	r := <-ch
	if r.err != nil {
		nc.Close()
		return nil, nil, r.err
	}
	return nc.(*Conn), r.c.(*Conn), nil
}

// forEach runs f as a subtest per provider.
func forEach(t *testing.T, f func(t *testing.T, ia string)) {
	for _, ia := range providers(t) {
		t.Run(ia, func(t *testing.T) { f(t, ia) })
	}
}

// serve accepts on l until it closes, running handle on each connection
// in its own goroutine. When the test ends, l is closed and serve waits
// for every handler and for Accept to return, so goleak sees none of them
// (a verbs Close can take a while under the VM's emulation).
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
}

// setHook installs f as the test hook h (testHelloHook, testLegacy,
// testControl); h.Store(nil) removes it.
func setHook[F any](h *atomic.Pointer[F], f F) { h.Store(&f) }
