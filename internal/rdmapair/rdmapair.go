// Package rdmapair builds, for a test in the RDMA test VM (test/vm), two
// soft RDMA devices (rxe or siw) whose traffic really crosses a link, so
// that the test can cut the link and make one end vanish.
//
// The VM's own rxe0 and siw0 reach their own addresses only: rxe
// short-circuits that traffic inside the device, and siw's TCP goes
// through lo. The guest kernel's rxe and siw serve only its initial
// network namespace, so a peer in a namespace of its own is out of reach.
// Two devices on the two ends of a veth pair, each with an address of its
// own, talk over the veth once policy routing keeps the kernel from
// delivering traffic between two local addresses through lo. Rules per
// direction send what one end sends to the other's address out of its own
// end: one matches the output device that rdma_cm and rxe look routes up
// with, the other (iif lo) any locally made packet, such as those of
// siw's kernel TCP socket, which is bound to no device. The local table
// moves behind those rules. Each end accepts packets
// from the other's (local) address (accept_local, no reverse-path
// filter). Cut then drops, with blackhole rules on both ends' input,
// everything that crosses: the devices, their ports and their routes stay
// up, and a sender gets no error, only silence, as from a peer whose host
// died.
//
// What can be is undone when the test ends: rules, routes, the local
// table's place, sysctls, addresses. The veth pair and the rxe devices
// stay, down, since they cannot be removed while the test process lives
// (see New).
package rdmapair

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// Kind is the soft device type ("rxe" or "siw"), as rdma(8)'s link add
// names it.
type Kind string

// The kinds of pairs.
const (
	RXE Kind = "rxe"
	SIW Kind = "siw"
)

// made counts the pairs this process built: devices outlive their test
// (see New), so each pair needs names and addresses of its own.
var made atomic.Int32

// Pair is the two devices. ClientIP is the address of the one on the A
// end, ServerIP of the one on the B end; either can be an IA's address.
type Pair struct {
	ClientIP, ServerIP string
	devA, devB         string
	pref               int
}

// New builds a pair of kind devices, or skips the test outside the RDMA
// test VM, where it needs root, the kind's kernel module, ip(8) and
// rdma(8): it changes the routing of the whole (disposable) guest for the
// test's duration.
func New(t testing.TB, kind Kind) *Pair {
	t.Helper()
	if os.Getenv("IN_RDMA_VM") != "1" {
		t.Skip("builds rxe devices and changes the guest's routing: runs only in the RDMA test VM (test/vm, IN_RDMA_VM=1)")
	}
	for _, tool := range []string{"ip", "rdma", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	// An id whose veth is not there yet: earlier pairs' stay.
	id := (os.Getpid() + 7*int(made.Add(1))) % 50
	for tries := 0; run("ip", "link", "show", fmt.Sprintf("rdpa%d", id)) == nil; tries++ {
		if tries == 50 {
			t.Fatal("rdmapair: no free pair id")
		}
		id = (id + 1) % 50
	}
	p := &Pair{
		ClientIP: fmt.Sprintf("203.0.113.%d", 100+2*id),
		ServerIP: fmt.Sprintf("203.0.113.%d", 101+2*id),
		devA:     fmt.Sprintf("rdpa%d", id),
		devB:     fmt.Sprintf("rdpb%d", id),
		pref:     100 + 4*id,
	}
	tableA, tableB := fmt.Sprint(1000+2*id), fmt.Sprint(1001+2*id)
	var undo [][]string
	t.Cleanup(func() {
		for i := len(undo) - 1; i >= 0; i-- {
			if err := run(undo[i]...); err != nil {
				t.Logf("rdmapair cleanup: %v", err)
			}
		}
	})
	step := func(do []string, un ...string) {
		t.Helper()
		if err := run(do...); err != nil {
			t.Fatal(err)
		}
		if len(un) > 0 {
			undo = append(undo, un)
		}
	}
	sysctl := func(key, value string) {
		t.Helper()
		out, err := exec.Command("sysctl", "-n", key).Output()
		if err != nil {
			t.Fatalf("sysctl %s: %v", key, err)
		}
		step([]string{"sysctl", "-qw", key + "=" + value}, "sysctl", "-qw", key+"="+strings.TrimSpace(string(out)))
	}
	step([]string{"ip", "link", "add", p.devA, "type", "veth", "peer", "name", p.devB})
	step([]string{"ip", "addr", "add", p.ClientIP + "/32", "dev", p.devA}, "ip", "addr", "del", p.ClientIP+"/32", "dev", p.devA)
	step([]string{"ip", "addr", "add", p.ServerIP + "/32", "dev", p.devB}, "ip", "addr", "del", p.ServerIP+"/32", "dev", p.devB)
	for _, dev := range []string{p.devA, p.devB} {
		step([]string{"ip", "link", "set", dev, "up"}, "ip", "link", "set", dev, "down")
	}
	for _, dev := range []string{"all", p.devA, p.devB} {
		sysctl("net.ipv4.conf."+dev+".accept_local", "1")
		sysctl("net.ipv4.conf."+dev+".rp_filter", "0")
	}
	step([]string{"ip", "route", "add", p.ServerIP, "dev", p.devA, "table", tableA}, "ip", "route", "flush", "table", tableA)
	step([]string{"ip", "route", "add", p.ClientIP, "dev", p.devB, "table", tableB}, "ip", "route", "flush", "table", tableB)
	step([]string{"ip", "rule", "add", "pref", fmt.Sprint(p.pref), "from", p.ClientIP, "to", p.ServerIP, "oif", p.devA, "lookup", tableA},
		"ip", "rule", "del", "pref", fmt.Sprint(p.pref))
	step([]string{"ip", "rule", "add", "pref", fmt.Sprint(p.pref + 1), "from", p.ServerIP, "to", p.ClientIP, "oif", p.devB, "lookup", tableB},
		"ip", "rule", "del", "pref", fmt.Sprint(p.pref+1))
	step([]string{"ip", "rule", "add", "pref", fmt.Sprint(p.pref + 2), "from", p.ClientIP, "to", p.ServerIP, "iif", "lo", "lookup", tableA},
		"ip", "rule", "del", "pref", fmt.Sprint(p.pref+2))
	step([]string{"ip", "rule", "add", "pref", fmt.Sprint(p.pref + 3), "from", p.ServerIP, "to", p.ClientIP, "iif", "lo", "lookup", tableB},
		"ip", "rule", "del", "pref", fmt.Sprint(p.pref+3))
	// The local table behind the rules above (and back in front at the end).
	step([]string{"ip", "rule", "add", "pref", "32765", "lookup", "local"}, "ip", "rule", "del", "pref", "32765", "lookup", "local")
	step([]string{"ip", "rule", "del", "pref", "0", "lookup", "local"}, "ip", "rule", "add", "pref", "0", "lookup", "local")
	// The devices and the veth pair stay (down, without addresses) when
	// the test ends: removing either waits until every process that
	// opened the device has closed it, librdmacm keeps the devices it has
	// seen open until the process exits, and neither rxe nor siw can take
	// their users' contexts away, so "rdma link delete" and "ip link del"
	// would hang the test. The guest is thrown away after the suite.
	for _, dev := range []string{p.devA, p.devB} {
		step([]string{"rdma", "link", "add", string(kind) + "_" + dev, "type", string(kind), "netdev", dev})
	}
	t.Cleanup(func() { p.restore() })
	return p
}

// Cut drops every packet between the two devices from now on, both ways.
// The test's cleanup lets them through again before it removes the
// devices.
func (p *Pair) Cut(t testing.TB) {
	t.Helper()
	for i, dev := range []string{p.devA, p.devB} {
		if err := run("ip", "rule", "add", "pref", fmt.Sprint(5+i), "iif", dev, "blackhole"); err != nil {
			t.Fatal(err)
		}
	}
}

// restore removes Cut's rules, if any.
func (p *Pair) restore() {
	for i, dev := range []string{p.devA, p.devB} {
		_ = run("ip", "rule", "del", "pref", fmt.Sprint(5+i), "iif", dev, "blackhole")
	}
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
