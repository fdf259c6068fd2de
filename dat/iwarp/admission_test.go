package iwarp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// ensureNOFILE raises the soft RLIMIT_NOFILE to at least n (within the hard
// limit) for the test, and restores it afterwards.
func ensureNOFILE(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d this test needs", lim.Max, n)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// TestAdmissionEvictsOldest: with the admission table full, a new
// connection pushes out the oldest one still in its handshake, not
// itself; with Fallback too (the evicted connection is reset, not handed
// on). The connections send the first byte of an MPA Request and stop:
// without Fallback, the kernel does not even hand wholly silent
// connections to the listener (TCP_DEFER_ACCEPT; see
// TestSilentConnectionsStayInKernel).
func TestAdmissionEvictsOldest(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			leakCheck(t)
			ctx := testCtx(t)
			fb := newFallbackSink(t)
			ia := openIA(t, "max_handshakes=2", "req_timeout=10s", "fallback_wait=10s")
			cfg := driver.ListenConfig{}
			if withFallback {
				cfg.Fallback = fb.fn
			}
			l := listen(t, ia, cfg)
			partial := func() net.Conn {
				c := dialRaw(t, l.Addr())
				if _, err := c.Write([]byte("M")); err != nil {
					t.Fatal(err)
				}
				return c
			}
			a := partial()
			waitHandshakes(t, l, 1)
			b := partial()
			waitHandshakes(t, l, 2)
			partial() // c: a goes
			expectDropped(t, a, testTimeout)
			waitHandshakes(t, l, 2) // b and c
			partial()               // d: b goes
			expectDropped(t, b, testTimeout)
			waitHandshakes(t, l, 2) // c and d

			// A real initiator gets in (taking c's place if its Request
			// was not there yet when the listener took it).
			connectThrough(t, ctx, ia, l)
			if got := iwarp.ListenerCounts(l); got.Evicted < 2 || got.Refused != 0 || got.Fallback != 0 {
				t.Fatalf("counts %+v, want 2 or 3 evicted, 0 refused, 0 fallbacks", got)
			}
		})
	}
}

// TestAdmissionTimeoutDefault: on defaults a silent connection is dropped
// after about two seconds (the kernel holds it for DefaultRequestTimeout,
// TCP_DEFER_ACCEPT, then the listener for as long again), not siw's five.
func TestAdmissionTimeoutDefault(t *testing.T) {
	leakCheck(t)
	l := listen(t, openIA(t), driver.ListenConfig{})
	c := dialRaw(t, l.Addr())
	start := time.Now()
	expectDropped(t, c, iwarp.DefaultRequestTimeout+3*time.Second)
	t.Logf("silent connection dropped after %v", time.Since(start))
	if got := iwarp.ListenerCounts(l); got.Dropped != 1 {
		t.Fatalf("counts %+v, want 1 dropped", got)
	}
}

// TestFullListenerRefuses: while the backlog is full, a dial fails with an
// error wrapping ECONNREFUSED (the listener resets before the MPA
// exchange), a non-peer failure; with Fallback set as well, where the
// Request is refused once read and plain TCP clients still get through.
func TestFullListenerRefuses(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			leakCheck(t)
			ctx := testCtx(t)
			ia := openIA(t)
			fb := newFallbackSink(t)
			cfg := driver.ListenConfig{Backlog: 1}
			if withFallback {
				cfg.Fallback = fb.fn
			}
			l := listen(t, ia, cfg)
			first := newQP(t, ia, defaultQPConfig, nil)
			ch := connectAsync(ctx, first, l.Addr(), nil)
			r := accept(t, ctx, l) // returned, not settled: the backlog is full

			_, err := newQP(t, ia, defaultQPConfig, nil).Connect(ctx, l.Addr(), nil)
			assertNonPeer(t, err)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("connect to a full listener: %v, want ECONNREFUSED", err)
			}
			if errors.Is(err, driver.ErrNotRDMAPeer) {
				t.Fatalf("connect to a full listener: %v: not a non-RDMA peer", err)
			}
			// At the TCP level: a reset, no byte (so quick that the
			// dial itself may see it).
			if raw, err := net.DialTimeout("tcp", l.Addr().String(), testTimeout); err == nil {
				raw.Write(mpaFrame(keyReq, flagE, 2, v2Block(1, 1)))
				expectDropped(t, raw, testTimeout)
				raw.Close()
			} else if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("dial: %v", err)
			}
			if got := iwarp.ListenerCounts(l); got.Refused != 2 {
				t.Fatalf("counts %+v, want 2 refused", got)
			}
			if withFallback {
				c := dialRaw(t, l.Addr())
				c.Write([]byte("hello"))
				c.CloseWrite()
				if got := fb.next(t); string(got) != "hello" {
					t.Fatalf("fallback got %q", got)
				}
			}
			resp := newQP(t, ia, defaultQPConfig, nil)
			if _, err := r.Accept(ctx, resp, nil); err != nil {
				t.Fatal(err)
			}
			if res := waitConnect(t, ch); res.err != nil {
				t.Fatal(res.err)
			}
		})
	}
}

// startAcceptor accepts every request on l with a QP from qps until ctx
// ends or qps runs out (then it aborts).
func startAcceptor(ctx context.Context, l *iwarp.Listener, qps <-chan *iwarp.QP) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			select {
			case q := <-qps:
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = r.Accept(ctx, q, nil)
				}()
			default:
				_ = r.Abort()
			}
		}
	}()
	return func() { <-done }
}

// dialMany runs the Connects of qps to addr, conc at a time, and returns each
// one's error and duration.
func dialMany(ctx context.Context, qps []*iwarp.QP, addr net.Addr, conc int) ([]error, []time.Duration) {
	errs := make([]error, len(qps))
	durs := make([]time.Duration, len(qps))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i, q := range qps {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			_, errs[i] = q.Connect(ctx, addr, nil)
			durs[i] = time.Since(start)
		}()
	}
	wg.Wait()
	return errs, durs
}

func percentile(durs []time.Duration, p float64) time.Duration {
	if len(durs) == 0 {
		return 0
	}
	s := slices.Clone(durs)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// newQPs creates n QPs on ia (closed by the test's cleanup).
func newQPs(t *testing.T, ia *iwarp.IA, n int) []*iwarp.QP {
	t.Helper()
	qps := make([]*iwarp.QP, n)
	for i := range qps {
		qps[i] = newQP(t, ia, defaultQPConfig, nil)
	}
	return qps
}

func qpChan(qps []*iwarp.QP) <-chan *iwarp.QP {
	ch := make(chan *iwarp.QP, len(qps))
	for _, q := range qps {
		ch <- q
	}
	return ch
}

// TestBurstDefaultListener: 1000 concurrent dials at a listener on
// defaults all connect.
func TestBurstDefaultListener(t *testing.T) {
	const n = 1000
	ensureNOFILE(t, 4*n+256)
	leakCheck(t)
	ctx := testCtx(t)
	ini, resp := openIA(t), openIA(t)
	l := listen(t, resp, driver.ListenConfig{})
	actx, cancel := context.WithCancel(ctx)
	waitAcceptor := startAcceptor(actx, l, qpChan(newQPs(t, resp, n)))
	defer waitAcceptor()
	defer cancel()

	start := time.Now()
	errs, durs := dialMany(ctx, newQPs(t, ini, n), l.Addr(), n)
	elapsed := time.Since(start)
	var failed []error
	refused := 0
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
			if errors.Is(err, syscall.ECONNREFUSED) {
				refused++
			}
		}
	}
	t.Logf("%d concurrent dials in %v: %d failed (%d refused), p50 %v p99 %v max %v; admission %+v",
		n, elapsed, len(failed), refused, percentile(durs, .5), percentile(durs, .99), slices.Max(durs), iwarp.ListenerCounts(l))
	if len(failed) > 0 {
		t.Fatalf("%d of %d dials failed, first: %v", len(failed), n, failed[0])
	}
}

// flood keeps silent TCP connections and garbage senders on an address
// until stop.
type flood struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// silentOpened and garbageSent count connections opened.
	silentOpened, garbageSent atomic.Int64
}

// startFlood keeps silent connections open to addr (a connection the
// listener drops is reopened at once: the harshest such peer) and runs
// garbage senders that write random bytes and reconnect as soon as they
// are dropped.
func startFlood(addr string, silent, garbage int) *flood {
	f := &flood{}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	var d net.Dialer
	run := func(send bool, seed uint64) {
		defer f.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 7))
		buf := make([]byte, 256)
		for f.ctx.Err() == nil {
			c, err := d.DialContext(f.ctx, "tcp", addr)
			if err != nil {
				select {
				case <-f.ctx.Done():
				case <-time.After(time.Millisecond):
				}
				continue
			}
			stop := context.AfterFunc(f.ctx, func() { c.Close() })
			if send {
				f.garbageSent.Add(1)
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				_, _ = c.Write(buf[:1+rng.IntN(len(buf))])
			} else {
				f.silentOpened.Add(1)
			}
			_, _ = io.Copy(io.Discard, c) // until the listener drops it
			stop()
			c.Close()
		}
	}
	for i := range silent {
		f.wg.Add(1)
		go run(false, uint64(i))
	}
	for i := range garbage {
		f.wg.Add(1)
		go run(true, uint64(silent+i))
	}
	return f
}

func (f *flood) stop() {
	f.cancel()
	f.wg.Wait()
}

// TestLegitDialsUnderFlood: with silent connections and garbage senders on
// the port, every legitimate dial connects. The latencies are printed
// (BenchmarkAdmissionFlood runs the full-size flood).
func TestLegitDialsUnderFlood(t *testing.T) {
	const silent, garbage, legit = 500, 8, 100
	ensureNOFILE(t, 2*(silent+garbage+legit)+256)
	for _, tc := range []struct {
		name     string
		opts     []string
		fallback bool
	}{
		{"defaults", nil, false},
		{"fallback", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			ctx := testCtx(t)
			ini, resp := openIA(t), openIA(t, tc.opts...)
			cfg := driver.ListenConfig{}
			if tc.fallback {
				// A fallback server that drops what it gets at once.
				cfg.Fallback = func(c net.Conn) { c.Close() }
			}
			l := listen(t, resp, cfg)
			actx, cancel := context.WithCancel(ctx)
			waitAcceptor := startAcceptor(actx, l, qpChan(newQPs(t, resp, legit)))
			defer waitAcceptor()
			defer cancel()

			f := startFlood(l.Addr().String(), silent, garbage)
			defer f.stop()
			waitFor(t, "the flood to start", func() bool { return f.silentOpened.Load() >= silent })

			errs, durs := dialMany(ctx, newQPs(t, ini, legit), l.Addr(), 4)
			counts := iwarp.ListenerCounts(l)
			f.stop()
			t.Logf("%d legit dials under a flood (%d silent and %d garbage connections opened): p50 %v p99 %v max %v; admission %+v",
				legit, f.silentOpened.Load(), f.garbageSent.Load(), percentile(durs, .5), percentile(durs, .99), slices.Max(durs), counts)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("legit dial %d failed: %v", i, err)
				}
			}
			if tc.fallback && counts.Fallback == 0 {
				t.Fatal("no garbage sender reached Fallback")
			}
			if !tc.fallback && counts.Dropped == 0 {
				t.Fatal("no garbage sender was dropped")
			}
		})
	}
}

// TestSilentConnectionsStayInKernel: without Fallback, connections that
// send nothing never reach the listener (TCP_DEFER_ACCEPT): 200 of them
// take no handshake slot and no goroutine, and a real initiator that
// comes after them is served at once.
func TestSilentConnectionsStayInKernel(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	for range 200 {
		dialRaw(t, l.Addr())
	}
	connectThrough(t, ctx, ia, l)
	if n := iwarp.ListenerHandshakes(l); n != 0 {
		t.Fatalf("%d silent connections in the listener's handshake table", n)
	}
	if got := iwarp.ListenerCounts(l); got.Evicted != 0 || got.Dropped != 0 {
		t.Fatalf("counts %+v: silent connections reached the listener", got)
	}
}

// connectThrough connects a QP of ia to l and accepts it: a real initiator
// getting through.
func connectThrough(t *testing.T, ctx context.Context, ia *iwarp.IA, l *iwarp.Listener) {
	t.Helper()
	q := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l.Addr(), nil)
	if _, err := accept(t, ctx, l).Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
}
