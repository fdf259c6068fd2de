//go:build verbs && linux && cgo

package rdmanet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// verbsDevice names the kernel device under a verbs test IA in the test
// VM ("rxe" or "siw", from the addresses the VM gives them), or "" when
// the tests do not run on the verbs provider there.
func verbsDevice(ia string) string {
	if !strings.HasPrefix(ia, "verbs") || !inTestVM(ia) {
		return ""
	}
	switch addr := os.Getenv("RDMANET_TEST_ADDR"); addr {
	case "":
		return ""
	case os.Getenv("RDMA_SIW_ADDR"):
		return "siw"
	case os.Getenv("RDMA_RXE_ADDR"):
		return "rxe"
	}
	return ""
}

// Connections TestManyConns holds open at once, per device: the guest's
// targets. Each is a dialed and an accepted Conn, both in this process.
// RDMANET_SCALE_CONNS overrides them.
var scaleConns = map[string]int{"siw": 256, "rxe": 1000}

// TestManyConns holds many connections open at once in one process on a
// kernel device of the test VM, each doing an echo while all are open,
// then closes them. On siw this is what libsiw's invalid mmap key at
// page 144 of a context used to stop after a handful of connections (see
// package dat/verbs); on rxe it checks that nothing per connection runs
// out at a thousand.
func TestManyConns(t *testing.T) {
	for _, ia := range providers(t) {
		dev := verbsDevice(ia)
		if dev == "" {
			t.Skip("needs the verbs provider on rxe0 or siw0 in the test VM (RDMANET_TEST_IA, IN_RDMA_VM)")
		}
		n := scaleConns[dev]
		if s := os.Getenv("RDMANET_SCALE_CONNS"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v <= 0 {
				t.Fatalf("RDMANET_SCALE_CONNS=%q", s)
			}
			n = v
		}
		t.Run(ia, func(t *testing.T) { manyConns(t, ia, n) })
	}
}

func manyConns(t *testing.T, ia string, n int) {
	// The smallest buffers: this counts connections, not bandwidth, and
	// 2n rings of the default size would pin more than the guest has.
	const buf = minBufferSize
	lc := ListenConfig{IA: ia, BufferSize: buf}
	l, err := lc.Listen(context.Background(), "rdma", listenAddr(ia))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	d := Dialer{IA: ia, BufferSize: buf, Timeout: 30 * time.Second, NoDup: true}
	conns := make([]net.Conn, n)
	defer closeAll(conns, func(int) bool { return true })

	// Dial a few at a time: establishment is mostly waiting for the
	// kernel's CM, and the listener answers several requests at once.
	start := time.Now()
	if err := dialAll(t, d, l.Addr().String(), conns, func(i int) bool { return true }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections established in %v", n, time.Since(start).Round(time.Millisecond))
	echoAll(t, conns)

	// Churn: every other connection closes and is dialed again, so new
	// queues take the places the closed ones leave in the device's
	// mmap key space (siw reuses the lowest free keys first).
	odd := func(i int) bool { return i%2 == 1 }
	closeAll(conns, odd)
	start = time.Now()
	if err := dialAll(t, d, l.Addr().String(), conns, odd); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections closed and dialed again in %v", n/2, time.Since(start).Round(time.Millisecond))
	echoAll(t, conns)
}

// parallel is how many dials or echoes TestManyConns runs at once.
const parallel = 8

// dialAll dials conns[i] for each i that pick selects, a few at a time,
// and reports how many failed.
func dialAll(t *testing.T, d Dialer, addr string, conns []net.Conn, pick func(int) bool) error {
	sem := make(chan struct{}, parallel)
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	want := 0
	for i := range conns {
		if !pick(i) {
			continue
		}
		want++
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conns[i], errs[i] = d.Dial("rdma", addr)
		}()
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			if failed < 5 {
				t.Errorf("dial %d: %v", i, err)
			}
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d dials failed (%d connections open)", failed, want, len(conns)-failed)
	}
	return nil
}

// echoAll has every connection echo once, a few at a time, while all of
// them are open.
func echoAll(t *testing.T, conns []net.Conn) {
	t.Helper()
	start := time.Now()
	sem := make(chan struct{}, parallel)
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = echoOnce(c, i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("connection %d: %v", i, err)
		}
	}
	t.Logf("%d echoes in %v", len(conns), time.Since(start).Round(time.Millisecond))
}

// closeAll closes conns[i] for each i that pick selects, all at once.
func closeAll(conns []net.Conn, pick func(int) bool) {
	var wg sync.WaitGroup
	for i, c := range conns {
		if c == nil || !pick(i) {
			continue
		}
		conns[i] = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
}

// echoOnce sends a message naming i over c and expects it back.
func echoOnce(c net.Conn, i int) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	msg := []byte(fmt.Sprintf("connection %d says hello", i))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}
