package iwarp

import (
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// TestEvictOldestSparesArrivedRequest: with the table full, the oldest
// connection whose whole MPA Request has arrived (its goroutine has not
// read it yet) is not evicted but leaves the table; the next oldest,
// silent, is evicted; an empty table gives no victim.
func TestEvictOldestSparesArrivedRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn := func(send []byte) *admission {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if len(send) > 0 {
			if _, err := c.Write(send); err != nil {
				t.Fatal(err)
			}
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &admission{tc: s.(*net.TCPConn)}
	}
	req := wire.MPAFrame{Header: wire.MPAHeader{Kind: wire.MPARequest, Revision: wire.MPARevision2, Flags: wire.MPAFlagEnhanced},
		V2: wire.MPAv2{IRD: 1, ORD: 1}}
	reqBytes, err := req.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	arrived := conn(reqBytes)
	silent := conn(nil)
	newer := conn(nil)
	var buf [wire.MPAHeaderLen + maxWirePrivateData]byte
	// The Request must be in arrived's socket before evictOldest looks.
	for deadline := time.Now().Add(10 * time.Second); peekNow(arrived.tc, buf[:]) < len(reqBytes); {
		if time.Now().After(deadline) {
			t.Fatal("the Request did not arrive")
		}
		time.Sleep(time.Millisecond)
	}

	l := &Listener{}
	for _, a := range []*admission{arrived, silent, newer} {
		a.queued = true
		l.admitting.push(a)
	}
	if v := l.evictOldest(buf[:]); v != silent {
		t.Fatalf("evicted %p, want the silent connection %p (arrived %p)", v, silent, arrived)
	}
	if arrived.evicted || arrived.queued || !silent.evicted || silent.queued {
		t.Fatalf("arrived evicted=%v queued=%v, silent evicted=%v queued=%v; want false false true false",
			arrived.evicted, arrived.queued, silent.evicted, silent.queued)
	}
	if l.admitting.n != 1 || l.admitting.head != newer || l.counts.evicted != 1 {
		t.Fatalf("table holds %d (head %p, want %p), %d evicted; want 1 and 1", l.admitting.n, l.admitting.head, newer, l.counts.evicted)
	}
	if v := l.evictOldest(buf[:]); v != newer {
		t.Fatalf("evicted %p, want %p", v, newer)
	}
	if v := l.evictOldest(buf[:]); v != nil || l.admitting.n != 0 {
		t.Fatalf("empty table: evicted %p, %d left", v, l.admitting.n)
	}
}
