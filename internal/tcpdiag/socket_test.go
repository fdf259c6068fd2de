package tcpdiag

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
)

// TestSocketReused: one Socket answers many lookups, from several
// goroutines at once, about loopback connections the test makes, on one
// netlink socket that it keeps open, and closes it on Close: the process
// then has as many descriptors as before the first lookup.
func TestSocketReused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sock_diag is Linux's")
	}
	conns := loopbackConns(t, 16)
	before := countFDs(t)
	var s Socket
	const workers, rounds = 4, 4
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- lookupAll(&s, conns, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := countFDs(t); got != before+1 {
		t.Errorf("%d descriptors after %d lookups, %d before the first: want one netlink socket, reused",
			got, workers*rounds*2*len(conns), before)
	}
	// An answer that the connection does not exist leaves the socket
	// in step: the next answer is the next question's.
	gone := netip.MustParseAddrPort("127.0.0.1:1")
	if _, err := s.Lookup(conns[0].local, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup of a connection that does not exist: %v, want ErrNotFound", err)
	}
	if err := lookupAll(&s, conns[:1], 1); err != nil {
		t.Errorf("after a connection not found: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := countFDs(t); got != before {
		t.Errorf("%d descriptors after Close, %d before the first lookup", got, before)
	}
	if _, err := s.Lookup(conns[0].local, conns[0].remote); !errors.Is(err, net.ErrClosed) {
		t.Errorf("lookup after Close: %v, want net.ErrClosed", err)
	}
	if got := countFDs(t); got != before {
		t.Errorf("a lookup after Close opened a socket: %d descriptors, %d before", got, before)
	}
}

// TestSocketUnused: a Socket that never looked anything up opens nothing
// and closes without error.
func TestSocketUnused(t *testing.T) {
	var s Socket
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// tcpPair is the client end's four-tuple of a loopback TCP connection.
type tcpPair struct{ local, remote netip.AddrPort }

// loopbackConns makes n TCP connections on loopback, closed at cleanup.
func loopbackConns(t *testing.T, n int) []tcpPair {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pairs := make([]tcpPair, n)
	for i := range pairs {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		pairs[i] = tcpPair{c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()}
	}
	return pairs
}

// lookupAll looks up both ends of every connection, rounds times, and
// reports the first that is not found established.
func lookupAll(s *Socket, conns []tcpPair, rounds int) error {
	for range rounds {
		for _, c := range conns {
			for _, q := range [][2]netip.AddrPort{{c.local, c.remote}, {c.remote, c.local}} {
				info, err := s.Lookup(q[0], q[1])
				if err != nil {
					return err
				}
				if !info.Established() {
					return errors.New(q[0].String() + " -> " + q[1].String() + ": not established")
				}
			}
		}
	}
	return nil
}

// countFDs counts the process's open descriptors.
func countFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}
