package iwarp_test

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// TestNoCompletionAfterTeardown: while a goroutine keeps posting Writes
// and Reads (as package dat may, concurrently with Disconnect), the QP is
// disconnected or closed. Once that call returned, every completion the
// QP will ever produce is in its CQ: nothing is added later, by the
// receiver, a sender goroutine or a racing post. Every completion there
// is for a distinct posted request.
func TestNoCompletionAfterTeardown(t *testing.T) {
	for _, how := range []string{"abrupt", "graceful", "close"} {
		t.Run(how, func(t *testing.T) {
			leakCheck(t)
			a, b := newSide(t), newSide(t)
			const n = 32 << 10
			local := newRegion(t, a.pd, 2*n, driver.AccessLocalWrite)
			remote := newRegion(t, b.pd, 2*n, rwAccess)
			p := connectData(t, a, b, a.cfg(), b.cfg(), nil, nil)

			stop := make(chan struct{})
			posted := make(chan uint64, 1)
			var returned atomic.Uint64 // posts that returned
			go func() {
				// Each request gets memory of its own direction: Writes
				// read local[0:n], Reads fill local[n:2n] (the race
				// detector sees no conflict between the two).
				id := uint64(0)
				defer func() { posted <- id }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					wr := driver.SendWR{ID: id, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled,
						Local: []driver.SGE{local.sge(0, n)}, Remote: remote.remote(0, n)}
					if id%4 == 3 {
						wr = driver.SendWR{ID: id, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
							Local: []driver.SGE{local.sge(n, n)}, Remote: remote.remote(n, n)}
					}
					err := p.ini.PostSend(wr)
					switch {
					case errors.Is(err, driver.ErrQueueFull):
						runtime.Gosched()
						continue
					case err != nil:
						return // closed
					}
					id++
					returned.Store(id)
				}
			}()
			time.Sleep(30 * time.Millisecond)
			before := returned.Load()
			var err error
			switch how {
			case "abrupt":
				err = p.ini.Disconnect(false)
			case "graceful":
				err = p.ini.Disconnect(true)
			default:
				err = p.ini.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			had := p.iniSink.cq.Len()
			time.Sleep(30 * time.Millisecond) // posts keep racing in
			close(stop)
			max := <-posted
			time.Sleep(30 * time.Millisecond)
			if got := p.iniSink.cq.Len(); got != had {
				t.Fatalf("%d completions when the teardown returned, %d later", had, got)
			}
			seen := map[uint64]bool{}
			for range had {
				c := p.iniSink.next(t)
				if c.WRID >= max || seen[c.WRID] || c.Status != driver.StatusSuccess {
					t.Fatalf("completion %+v (of %d posted; seen before: %v)", c, max, seen[c.WRID])
				}
				seen[c.WRID] = true
			}
			t.Logf("%d requests posted, %d completed", max, had)
			if had == 0 {
				t.Fatal("nothing completed while the QP was connected")
			}
			// A graceful Disconnect finishes what was posted before it.
			for id := range before {
				if how == "graceful" && !seen[id] {
					t.Fatalf("graceful: request %d, posted before the Disconnect, did not complete", id)
				}
			}
			select {
			case err := <-p.iniSink.disc:
				t.Fatalf("OnDisconnect(%v) after a local teardown", err)
			default:
			}
		})
	}
}

// connGoroutines counts the goroutines running a connection's receiver
// and sender loops (by their stacks, so that goroutines of the runtime or
// the test harness do not disturb the count).
func connGoroutines() (receivers, senders int, dump string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "iwarp.(*connection).readLoop"):
			receivers++
		case strings.Contains(g, "iwarp.(*connection).sendLoop"):
			senders++
		}
	}
	return receivers, senders, string(buf)
}

// TestIdleConnectionGoroutines: an established connection that has
// carried traffic (Sends, Writes, Reads both ways, which start transient
// sender goroutines) and is now idle costs exactly one goroutine, its
// receiver; the process's goroutine count grows by one per connection.
func TestIdleConnectionGoroutines(t *testing.T) {
	leakCheck(t)
	a, b := newSide(t), newSide(t)
	ctx := testCtx(t)
	l := listen(t, b.ia, driver.ListenConfig{})
	bufA := newRegion(t, a.pd, 4096, rwAccess)
	bufB := newRegion(t, b.pd, 4096, rwAccess)
	const pairs = 16
	settle := func(conns int) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for {
			r, s, dump := connGoroutines()
			if r == conns && s == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections: %d receiver and %d sender goroutines, want %d and 0\n%s", conns, r, s, conns, dump)
			}
			time.Sleep(time.Millisecond)
		}
	}
	settle(0)
	base := runtime.NumGoroutine()
	for i := range pairs {
		ini := newQP(t, a.ia, a.cfg(), nil)
		is := newSink()
		resp := newQP(t, b.ia, b.cfg(), is)
		mustPost(t, resp.PostRecv(driver.RecvWR{ID: 1}))
		ch := connectAsync(ctx, ini, l.Addr(), nil)
		r, err := l.Accept(ctx)
		if err != nil {
			select {
			case res := <-ch:
				t.Fatalf("pair %d: accept: %v; connect: %v", i, err, res.err)
			default:
				t.Fatalf("pair %d: accept: %v; connect still running", i, err)
			}
		}
		if _, err := r.Accept(ctx, resp, nil); err != nil {
			t.Fatal(err)
		}
		if res := waitConnect(t, ch); res.err != nil {
			t.Fatal(res.err)
		}
		mustPost(t, ini.PostSend(driver.SendWR{ID: 1, Op: driver.OpSend}))
		is.expectSuccess(t, 1, driver.OpRecv, 0)
		mustPost(t, resp.PostSend(driver.SendWR{ID: 2, Op: driver.OpRDMAWrite, Flags: driver.SendSignaled,
			Local: []driver.SGE{bufB.sge(0, 4096)}, Remote: bufA.remote(0, 4096)}))
		is.expectSuccess(t, 2, driver.OpRDMAWrite, 4096)
		// The Read Response goes out through a sender goroutine of the
		// initiator's connection.
		mustPost(t, resp.PostSend(driver.SendWR{ID: 3, Op: driver.OpRDMARead, Flags: driver.SendSignaled,
			Local: []driver.SGE{bufB.sge(0, 100)}, Remote: bufA.remote(0, 100)}))
		is.expectSuccess(t, 3, driver.OpRDMARead, 100)
		settle(2 * (i + 1))
	}
	// Still so a while later, and the process has exactly one goroutine
	// more per connection (the runtime may start or end goroutines of
	// its own meanwhile: allow for a couple either way).
	time.Sleep(50 * time.Millisecond)
	settle(2 * pairs)
	if n := runtime.NumGoroutine(); n < base+2*pairs-2 || n > base+2*pairs+2 {
		t.Fatalf("%d goroutines with %d idle connections, %d without", n, 2*pairs, base)
	}
}
