//go:build linux

package rdmanet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// peerNetns is a network namespace the test made, joined to the test's
// namespace by a veth pair: hostIP on the host end, peerIP on the end
// inside. Taking the inside end down makes everything there vanish from
// the host's point of view: its packets are dropped, nothing answers,
// nothing resets (unlike a stopped process, whose kernel still answers
// for it).
type peerNetns struct {
	name, hostDev, peerDev string
	hostIP, peerIP         string
}

// peerMAC is the namespace end's link-layer address.
const peerMAC = "02:72:64:6d:61:02"

// newPeerNetns creates the namespace and the veth pair, or skips the test
// where it cannot (not root, no ip(8), no namespaces); the test's cleanup
// deletes both.
func newPeerNetns(t *testing.T) *peerNetns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace and a veth pair (run the tests as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2 to create a network namespace")
	}
	id := os.Getpid() % 10000
	n := &peerNetns{
		name:    fmt.Sprintf("rdmanet-ka-%d", id),
		hostDev: fmt.Sprintf("rka%dh", id),
		peerDev: fmt.Sprintf("rka%dp", id),
		// 100.64.0.0/10 (shared address space) is routed nowhere a test
		// machine talks to; a /30 of it per process.
		hostIP: fmt.Sprintf("100.%d.%d.1", 64+id/250%64, id%250),
		peerIP: fmt.Sprintf("100.%d.%d.2", 64+id/250%64, id%250),
	}
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		n.ip(t, "link", "del", n.hostDev) // takes the peer end with it
		n.ip(t, "netns", "del", n.name)
	})
	for _, args := range [][]string{
		{"link", "add", n.hostDev, "type", "veth", "peer", "name", n.peerDev, "address", peerMAC},
		{"link", "set", n.peerDev, "netns", n.name},
		{"addr", "add", n.hostIP + "/30", "dev", n.hostDev},
		{"link", "set", n.hostDev, "up"},
		// A permanent neighbour entry: the peer is as if behind a router,
		// so that the host's TCP, once the peer is gone, keeps sending
		// and reports the silence (ETIMEDOUT) rather than a failed
		// neighbour resolution (EHOSTUNREACH, what TCP reports for a
		// dead peer on the same link).
		{"neigh", "replace", n.peerIP, "lladdr", peerMAC, "dev", n.hostDev, "nud", "permanent"},
		{"-n", n.name, "addr", "add", n.peerIP + "/30", "dev", n.peerDev},
		{"-n", n.name, "link", "set", n.peerDev, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	} {
		if err := n.ip(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// ip runs ip(8) with args.
func (n *peerNetns) ip(t *testing.T, args ...string) error {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// vanish takes the namespace's end of the link down: from now on the host
// end drops every packet sent to the namespace.
func (n *peerNetns) vanish(t *testing.T) {
	t.Helper()
	if err := n.ip(t, "-n", n.name, "link", "set", n.peerDev, "down"); err != nil {
		t.Fatal(err)
	}
}

// in runs f on an OS thread inside the namespace. Sockets f creates stay
// in the namespace for their whole life, whichever thread uses them later.
func (n *peerNetns) in(t *testing.T, f func()) {
	t.Helper()
	target, err := os.Open("/run/netns/" + n.name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with the goroutine, so
			// no other goroutine runs in the namespace by accident.
			done <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestKeepAliveDeadPeer: a server that vanishes (its network namespace's
// link goes down, so nothing it would send arrives and nothing answers)
// fails a Read blocked on an idle connection, and a Write whose data is
// never acknowledged, with ETIMEDOUT in a *net.OpError, within a few
// times Idle + Interval × Count of the keepalive configured; the keepalive
// is TCP's on the iwarp provider's socket (the VM suite covers verbs).
func TestKeepAliveDeadPeer(t *testing.T) {
	if ia := os.Getenv("RDMANET_TEST_IA"); ia != "" && ia != "iwarp" {
		t.Skip("the iwarp provider's keepalive: covered by the host run (TestKeepAliveDeadPeerVerbs is the verbs one)")
	}
	n := newPeerNetns(t)
	ka := net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 2}
	const configured = 3 * time.Second // Idle + Interval × Count
	const bound = 3 * configured

	var l net.Listener
	var lerr error
	n.in(t, func() {
		lc := ListenConfig{IA: "iwarp", KeepAliveConfig: ka}
		l, lerr = lc.Listen(context.Background(), "rdma", n.peerIP+":0")
	})
	if lerr != nil {
		t.Fatal(lerr)
	}
	accepted := make(chan net.Conn, 2)
	serve(t, l, func(c net.Conn) {
		accepted <- c
		io.Copy(io.Discard, c) // until the test closes it: reads nothing once the link is down
		c.Close()
	})

	d := Dialer{IA: "iwarp", Timeout: 10 * time.Second, NoDup: true, KeepAliveConfig: ka}
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
	if _, err := writer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}

	// More than the server's ring: the first part of the Write goes out
	// as RDMA Writes that are never acknowledged (TCP sends no keepalive
	// while data is in flight), the rest waits for credit.
	expectDeadPeer(t, reader, writer, func() { n.vanish(t) }, bound)
}

// expectDeadPeer cuts the peer off (vanish), then wants a blocked Read on
// reader and a blocked 4 MiB Write on writer each to fail within bound
// with ETIMEDOUT: a *net.OpError of its operation that is a timeout.
func expectDeadPeer(t *testing.T, reader, writer net.Conn, vanish func(), bound time.Duration) {
	t.Helper()
	type result struct {
		err     error
		elapsed time.Duration
	}
	readDone := make(chan result, 1)
	writeDone := make(chan result, 1)
	vanish()
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
			t.Fatalf("%s still blocked %v after the peer vanished", w.op, bound)
		}
	}
}
