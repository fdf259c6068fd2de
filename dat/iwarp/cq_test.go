package iwarp

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestCQPollOrderAndGrowth(t *testing.T) {
	cq := newCQ(4)
	defer cq.Close()
	// Far more than the size given, with nobody polling: nothing is lost.
	const n = 100000
	for i := range n {
		cq.push(driver.Completion{WRID: uint64(i)})
	}
	if cq.Len() != n {
		t.Fatalf("CQ holds %d, want %d", cq.Len(), n)
	}
	var dst [7]driver.Completion
	next := uint64(0)
	for {
		k := cq.Poll(dst[:])
		if k == 0 {
			break
		}
		for _, c := range dst[:k] {
			if c.WRID != next {
				t.Fatalf("polled WRID %d, want %d", c.WRID, next)
			}
			next++
		}
	}
	if next != n {
		t.Fatalf("polled %d completions, want %d", next, n)
	}
	if cq.Poll(nil) != 0 || cq.Poll(dst[:]) != 0 {
		t.Fatal("Poll of an empty CQ returned completions")
	}
}

// waitReturns runs cq.Wait(deadline) and reports how long it took.
func waitReturns(t *testing.T, cq *CQ, deadline time.Time) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	err := cq.Wait(deadline)
	return time.Since(start), err
}

func TestCQWait(t *testing.T) {
	cq := newCQ(0)
	defer cq.Close()
	// Non-empty: at once, however often.
	cq.push(driver.Completion{WRID: 1})
	for range 3 {
		if d, err := waitReturns(t, cq, time.Time{}); err != nil || d > time.Second {
			t.Fatalf("Wait on a non-empty CQ: %v after %v", err, d)
		}
	}
	var dst [1]driver.Completion
	cq.Poll(dst[:])

	// Empty, deadline already passed: at once, no error.
	if d, err := waitReturns(t, cq, time.Now().Add(-time.Second)); err != nil || d > time.Second {
		t.Fatalf("Wait past its deadline: %v after %v", err, d)
	}
	// Empty, deadline ahead: not before it.
	if d, err := waitReturns(t, cq, time.Now().Add(50*time.Millisecond)); err != nil || d < 40*time.Millisecond {
		t.Fatalf("Wait with a 50ms deadline: %v after %v", err, d)
	}
	// A completion pushed while Wait blocks (no deadline) ends it.
	go func() {
		time.Sleep(20 * time.Millisecond)
		cq.push(driver.Completion{WRID: 2})
	}()
	if _, err := waitReturns(t, cq, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := cq.Poll(dst[:]); n != 1 || dst[0].WRID != 2 {
		t.Fatalf("polled %d: %+v", n, dst[0])
	}
}

func TestCQInterrupt(t *testing.T) {
	cq := newCQ(0)
	defer cq.Close()
	// Interrupt never blocks, even with nobody waiting, many times over.
	for range 1000 {
		cq.Interrupt()
	}
	// An Interrupt since the last Wait makes the next one return at once
	// ...
	if d, err := waitReturns(t, cq, time.Now().Add(10*time.Second)); err != nil || d > time.Second {
		t.Fatalf("Wait after Interrupt: %v after %v", err, d)
	}
	// ... and only that one: it was consumed.
	if d, err := waitReturns(t, cq, time.Now().Add(50*time.Millisecond)); err != nil || d < 40*time.Millisecond {
		t.Fatalf("second Wait after one Interrupt: %v after %v", err, d)
	}
	// An Interrupt during a blocked Wait ends it.
	go func() {
		time.Sleep(20 * time.Millisecond)
		cq.Interrupt()
	}()
	if d, err := waitReturns(t, cq, time.Time{}); err != nil || d < 10*time.Millisecond {
		t.Fatalf("Wait interrupted: %v after %v", err, d)
	}
	if cq.Len() != 0 {
		t.Fatal("Interrupt queued a completion")
	}
}

func TestCQClose(t *testing.T) {
	cq := newCQ(0)
	done := make(chan error, 1)
	go func() { done <- cq.Wait(time.Time{}) }()
	time.Sleep(20 * time.Millisecond)
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Wait ended by Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a blocked Wait")
	}
	if err := cq.Wait(time.Time{}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait on a closed CQ: %v", err)
	}
	if err := cq.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	cq.push(driver.Completion{WRID: 1}) // dropped, not a panic
	var dst [1]driver.Completion
	if cq.Poll(dst[:]) != 0 {
		t.Fatal("a closed CQ returned a completion")
	}
	cq.Interrupt()
}

// TestCQAllocs: once the ring and the deadline timer exist, pushing,
// waiting (with and without a deadline) and polling allocate nothing.
func TestCQAllocs(t *testing.T) {
	cq := newCQ(16)
	defer cq.Close()
	var dst [4]driver.Completion
	allocs := testing.AllocsPerRun(1000, func() {
		cq.push(driver.Completion{WRID: 1})
		cq.push(driver.Completion{WRID: 2})
		_ = cq.Wait(time.Now().Add(time.Hour))
		cq.Poll(dst[:])
		cq.Interrupt()
		_ = cq.Wait(time.Time{})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per push/Wait/Poll round", allocs)
	}
	// A Wait that sleeps on its deadline reuses the CQ's timer.
	_ = cq.Wait(time.Now().Add(time.Microsecond))
	allocs = testing.AllocsPerRun(20, func() {
		_ = cq.Wait(time.Now().Add(time.Microsecond))
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Wait that sleeps until its deadline", allocs)
	}
}
