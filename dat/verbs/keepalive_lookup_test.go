//go:build verbs && linux && cgo

package verbs

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/internal/tcpdiag"
)

// TestKeepAliveLookupAtFirstTick: connection setup asks the kernel
// nothing about the connection's TCP socket; the keepers do, from their
// first tick on, an Idle later.
func TestKeepAliveLookupAtFirstTick(t *testing.T) {
	forEachIWARP(t, func(t *testing.T, d testDev) {
		ka := net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: time.Second, Count: 2}
		c, s := newEnd(t, d), newEnd(t, d)
		asked := recordLookups(c, s)
		noReads(t, c, s)
		connectKeptAlive(t, c, s, driver.ConnectOptions{KeepAliveConfig: ka}, ka)
		tuple := connTuple(t, c)
		if n := asked.of(tuple); n != 0 {
			t.Errorf("%d sock_diag lookups of %v by the time the connection was established, want none", n, tuple)
		}
		for _, e := range []*end{c, s} {
			waitFor(t, "the keeper's first tick to find the TCP socket", func() bool { return tcpSeen(e) })
		}
		if asked.of(tuple) == 0 || asked.of(tcpConn{tuple.remote, tuple.local}) == 0 {
			t.Errorf("lookups of the client end %d, of the server end %d: want some of each", asked.of(tuple), asked.of(tcpConn{tuple.remote, tuple.local}))
		}
	})
}

// TestKeepAliveSocketNotShown: where the kernel answers sock_diag but does
// not show the connection's TCP socket (a port mapper rewrote the port),
// the keeper finds out at its first tick, after the ORD was negotiated. A
// connection with an ORD falls back to Read probes; one with ORD 0, as
// rdmanet's, loses its keeper. Either way the connection goes on.
func TestKeepAliveSocketNotShown(t *testing.T) {
	forEachIWARP(t, func(t *testing.T, d testDev) {
		if !tcpdiagUsable() {
			t.Fatal("the test VM's kernel does not answer sock_diag")
		}
		notShown := tcpWatch{lookup: func(*tcpdiag.Socket, netip.AddrPort, netip.AddrPort) (tcpdiag.Info, error) {
			return tcpdiag.Info{}, tcpdiag.ErrNotFound
		}}
		ka := net.KeepAliveConfig{Enable: true, Idle: 100 * time.Millisecond, Interval: time.Second, Count: 2}
		t.Run("ORD 0", func(t *testing.T) {
			c, s := keepAliveServerOnly(t, d, ka, notShown)
			if !watchesTCP(s) {
				t.Fatal("the server end's keeper does not watch TCP before its first tick")
			}
			waitFor(t, "the keeper to end", func() bool { return s.qp.keep.Load() == nil })
			time.Sleep(3 * ka.Idle)
			exchange(t, s, c)
		})
		t.Run("ORD 2", func(t *testing.T) {
			c, s := newEnd(t, d), newEnd(t, d) // IRD 4, ORD 2
			watchTCP(notShown, c, s)
			connectKeptAlive(t, c, s, driver.ConnectOptions{KeepAlive: -1}, ka)
			if s.qp.conn.ord < 1 {
				t.Fatalf("server ORD %d, want at least 1", s.qp.conn.ord)
			}
			k := s.qp.keep.Load()
			waitFor(t, "Read probes to complete", func() bool {
				k.collect()
				s.qp.mu.Lock()
				defer s.qp.mu.Unlock()
				return k.read && k.tcp == nil && k.posted > 0 && k.done.Load() > 0
			})
			exchange(t, s, c)
		})
	})
}

// TestKeepAliveSocketPerIA: the keepers of an IA's connections ask the
// kernel, many times, through one sock_diag socket, which the IA closes
// when it closes.
func TestKeepAliveSocketPerIA(t *testing.T) {
	forEachIWARP(t, func(t *testing.T, d testDev) {
		before := sockDiagSockets(t)
		t.Run("connected", func(t *testing.T) {
			ka := net.KeepAliveConfig{Enable: true, Idle: 50 * time.Millisecond, Interval: 50 * time.Millisecond, Count: 2}
			c, s := newEnd(t, d), newEnd(t, d)
			asked := recordLookups(c, s)
			noReads(t, c, s)
			connectKeptAlive(t, c, s, driver.ConnectOptions{KeepAliveConfig: ka}, ka)
			tuple := connTuple(t, c)
			waitFor(t, "10 lookups by each keeper", func() bool {
				return asked.of(tuple) >= 10 && asked.of(tcpConn{tuple.remote, tuple.local}) >= 10
			})
			if got := sockDiagSockets(t); got != before+2 {
				t.Errorf("%d sock_diag sockets open, %d before the two IAs: want one each", got, before)
			}
			exchange(t, c, s)
		})
		if got := sockDiagSockets(t); got != before {
			t.Errorf("%d sock_diag sockets open once the IAs closed, %d before", got, before)
		}
	})
}

// forEachIWARP runs fn as a subtest per iWARP device: only there does a
// keeper ask the kernel about TCP.
func forEachIWARP(t *testing.T, fn func(t *testing.T, d testDev)) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		if d.transport != driver.TransportIWARP {
			t.Skip("only an iWARP keeper watches TCP")
		}
		fn(t, d)
	})
}

// lookupLog counts the keepers' sock_diag lookups by four-tuple.
type lookupLog struct {
	mu    sync.Mutex
	asked map[tcpConn]int
}

// recordLookups makes the lookups of the keepers of the ends' IAs count
// in the log it returns. Called before the ends connect (see watchTCP).
func recordLookups(ends ...*end) *lookupLog {
	l := &lookupLog{asked: make(map[tcpConn]int)}
	watchTCP(tcpWatch{lookup: func(s *tcpdiag.Socket, local, remote netip.AddrPort) (tcpdiag.Info, error) {
		l.mu.Lock()
		l.asked[tcpConn{local, remote}]++
		l.mu.Unlock()
		return s.Lookup(local, remote)
	}}, ends...)
	return l
}

// of is how many lookups asked about c.
func (l *lookupLog) of(c tcpConn) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked[c]
}

// tcpSeen reports whether e's keeper found its TCP socket established.
func tcpSeen(e *end) bool {
	k := e.qp.keep.Load()
	if k == nil {
		return false
	}
	e.qp.mu.Lock()
	defer e.qp.mu.Unlock()
	return k.tcpSeen
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitTimeout, what)
		}
	}
}

// sockDiagSockets counts the process's open NETLINK_SOCK_DIAG sockets:
// the descriptors that name a socket /proc/net/netlink lists with that
// protocol.
func sockDiagSockets(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/net/netlink")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const sockDiag = "4" // NETLINK_SOCK_DIAG, the Eth column
	diag := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && fields[1] == sockDiag {
			diag["socket:["+fields[len(fields)-1]+"]"] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && diag[target] {
			n++
		}
	}
	return n
}

// connTuple is the four-tuple of e's connection, seen from e.
func connTuple(t *testing.T, e *end) tcpConn {
	t.Helper()
	tc, err := tcpOf(e.qp.conn)
	if err != nil {
		t.Fatal(err)
	}
	return *tc
}
