package drivertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// testDisconnectWhilePosting: the active side streams Sends from one
// goroutine while the test goroutine disconnects it abruptly, at a
// different moment each round; the passive side reposts its receives as
// they complete. Posts racing with Disconnect return nil or
// ErrQueueFull, posts after it nil; every completion is a success and
// unique; both sides end quiescent with one OnDisconnect, the passive
// side's.
func testDisconnectWhilePosting(e *env) {
	for round := range 3 {
		c := e.pair()
		const sz = 1024
		nr := c.p.cfg.MaxRecvWR
		rbuf := e.register(c.p.pd, nr*sz, driver.AccessLocalWrite)
		src := e.register(c.a.pd, sz, driver.AccessLocalWrite)
		src.fill(0, sz, 5)
		slot := map[uint64]int{}
		for i := range nr {
			slot[c.p.postRecv(rbuf.sge(i*sz, sz))] = i
		}

		var (
			stop     = make(chan struct{})
			ended    atomic.Bool  // the active side's Disconnect returned
			received atomic.Int64 // receives completed and reposted
			errs     = make(chan error, 2)
			wg       sync.WaitGroup
		)
		wg.Add(2)
		go func() { // the active side's poster
			defer wg.Done()
			var sent int64
			after := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Never more Sends in flight than receives posted: iWARP
				// has no receiver-not-ready retry.
				if sent-received.Load() >= int64(nr-1) && !ended.Load() {
					time.Sleep(50 * time.Microsecond)
					continue
				}
				isEnded := ended.Load()
				_, err := c.a.postSendErr(driver.OpSend, driver.SendSignaled, driver.RemoteSegment{}, src.sge(0, sz))
				switch {
				case isEnded && err != nil:
					errs <- fmt.Errorf("PostSend after Disconnect returned: %w", err)
					return
				case errors.Is(err, driver.ErrQueueFull):
				case err != nil:
					errs <- fmt.Errorf("PostSend racing with Disconnect: %w", err)
					return
				default:
					sent++
				}
				if err := c.a.scq.pollErr(); err != nil {
					errs <- err
					return
				}
				for _, comp := range c.a.scq.held {
					if comp.Status != driver.StatusSuccess {
						errs <- fmt.Errorf("send completed by the provider with status %d: %+v", comp.Status, comp)
						return
					}
				}
				c.a.scq.held = nil
				if isEnded {
					if after++; after == 5 {
						return
					}
				}
			}
		}()
		go func() { // the passive side's reposter
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.p.rcq.pollErr(); err != nil {
					errs <- err
					return
				}
				for _, comp := range c.p.rcq.held {
					if comp.Status != driver.StatusSuccess {
						errs <- fmt.Errorf("receive completed by the provider with status %d: %+v", comp.Status, comp)
						return
					}
					i := slot[comp.WRID]
					id, err := c.p.postRecvErr(rbuf.sge(i*sz, sz))
					if err != nil {
						errs <- fmt.Errorf("PostRecv: %w", err)
						return
					}
					slot[id] = i
					received.Add(1)
				}
				c.p.rcq.held = nil
				if err := c.p.rcq.cq.Wait(time.Now().Add(e.quiet / 4)); err != nil {
					errs <- err
					return
				}
			}
		}()
		time.Sleep(time.Duration(round+1) * e.quiet / 4)
		c.a.disconnect(false)
		ended.Store(true)
		c.p.awaitDisconnect()
		e.sleepQuiet() // the poster makes its posts after the end
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatalf("round %d: %v", round, err)
		}
		e.t.Logf("round %d: %d messages received", round, received.Load())
		c.a.checkQuiescent(src)
		c.p.checkQuiescent(rbuf)
		e.checkCounts(c, 0, 1)
	}
}

// testBothDisconnect: both sides disconnect at the same time, in every
// combination of modes; both calls return nil, both sides end quiescent,
// and neither gets more than one OnDisconnect.
func testBothDisconnect(e *env) {
	for _, modes := range [][2]bool{{true, true}, {true, false}, {false, false}} {
		c := e.pair()
		start := make(chan struct{})
		errs := make(chan error, 2)
		for i, ep := range []*endpoint{c.a, c.p} {
			go func() {
				<-start
				if err := ep.qp.Disconnect(modes[i]); err != nil {
					errs <- fmt.Errorf("%s: Disconnect(%v): %w", ep.name, modes[i], err)
					return
				}
				errs <- nil
			}()
		}
		close(start)
		for range 2 {
			select {
			case err := <-errs:
				require.NoError(e.t, err)
			case <-time.After(e.timeout):
				e.t.Fatalf("simultaneous Disconnect(%v, %v) did not return", modes[0], modes[1])
			}
		}
		c.a.checkQuiescent()
		c.p.checkQuiescent()
		require.LessOrEqual(e.t, c.a.disc.n.Load(), int32(1), "OnDisconnect calls on the active side")
		require.LessOrEqual(e.t, c.p.disc.n.Load(), int32(1), "OnDisconnect calls on the passive side")
	}
}

// testEndDuringConnect: Close or Disconnect of a QP whose Connect waits
// for a listener that never accepts returns, and the Connect fails.
func testEndDuringConnect(e *env, close bool) {
	l := e.listen(driver.ListenConfig{})
	a := e.newEndpoint(false, epOpts{})
	ch := make(chan error, 1)
	ctx := e.ctx()
	go func() {
		_, err := a.qp.Connect(ctx, e.connectAddr(l), nil)
		ch <- err
	}()
	e.sleepQuiet() // the request waits in the listener
	if close {
		a.close()
	} else {
		a.disconnect(false)
	}
	select {
	case err := <-ch:
		require.Error(e.t, err, "Connect succeeded although the QP was ended meanwhile")
		require.NotErrorIs(e.t, err, context.DeadlineExceeded, "Connect ran into its deadline instead of being aborted")
	case <-time.After(e.timeout):
		e.t.Fatal("Connect still pending after its QP was ended")
	}
	e.sleepQuiet()
	require.Zero(e.t, a.disc.n.Load(), "OnDisconnect called for an attempt that never connected")
}

// testCycles: connecting, exchanging data and disconnecting many times on
// the same IAs, each way of ending in turn, with every object closed
// after each cycle, leaves no goroutine and no file descriptor behind.
func testCycles(e *env) {
	cycle := func(i int) {
		e.t.Helper()
		m := e.mark()
		a, p := e.newEndpoint(false, epOpts{}), e.newEndpoint(true, epOpts{})
		c := e.connect(a, p)
		e.sendOne(p, a, 100, byte(i))
		switch i % 4 {
		case 0:
			c.a.disconnect(true)
			c.p.awaitDisconnect()
		case 1:
			c.a.disconnect(false)
			c.p.awaitDisconnect()
		case 2:
			c.p.disconnect(true)
			c.a.awaitDisconnect()
		case 3:
			c.p.close()
			c.a.awaitDisconnect()
		}
		e.closeScope(m)
	}
	// Warm up: first use may start what a provider keeps for the life
	// of an IA.
	cycle(0)
	cycle(1)
	ignore := goleak.IgnoreCurrent()
	fds := openFDs()
	for i := range e.cfg.Cycles {
		cycle(i)
	}
	deadline := time.Now().Add(e.timeout)
	for {
		err := goleak.Find(ignore)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("goroutines left after %d cycles: %v", e.cfg.Cycles, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fds < 0 {
		return // no /proc: file descriptors not counted
	}
	for n := openFDs(); n > fds; n = openFDs() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d file descriptors open after %d cycles, %d before", n, e.cfg.Cycles, fds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openFDs counts the process's open file descriptors, or returns -1.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
