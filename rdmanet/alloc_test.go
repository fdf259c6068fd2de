package rdmanet

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

// TestSteadyStateAllocs proves that rdmanet's own steady-state Read and
// Write path allocates nothing: with every allocation sampled, it runs
// small (inline) and large (RDMA Write) round trips over the iwarp
// provider and fails if any allocation made during the measured phase was
// made by a function of this package. (dat's EVD.Wait allocates a channel
// per blocking wait, and providers allocate for their event delivery;
// those are reported in the log, not failed: see TestDATEVDWaitAllocates.)
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()

	c1, c2, stop := pipe(t, "iwarp", 64<<10)
	defer stop()
	// huge is more than the peer's ring: such a Write must wait for room
	// (nothing else polls c1 while it writes, so nothing reports the
	// peer's consumption before it finds the ring full), which takes the
	// waiting path and its Stats accounting.
	small, big, huge := make([]byte, 64), make([]byte, 48<<10), make([]byte, 96<<10)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c2.Read(buf)
			if err != nil {
				return
			}
			if _, err := c2.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	round := func(b []byte) {
		if _, err := c1.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c1, b); err != nil {
			t.Fatal(err)
		}
	}
	run := func(n int) {
		for i := 0; i < n; i++ {
			round(small)
			if i%4 == 0 {
				round(big)
			}
			if i%16 == 0 {
				round(huge)
			}
		}
	}
	run(500) // warm up: grow every queue to its steady size
	// The profile is published at garbage collections, up to two behind.
	runtime.GC()
	runtime.GC()
	before, waitsBefore := allocsByStack(), writeWaits(c1)
	run(2000)
	runtime.GC()
	runtime.GC()
	after, waitsAfter := allocsByStack(), writeWaits(c1)
	if waitsAfter == waitsBefore {
		t.Errorf("no Write waited for room: the waiting path went unmeasured")
	}
	var ours, others []string
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			line := fmt.Sprintf("%6d  %s", d, k)
			// Frames of this test itself are not the data path, and the
			// runtime's sudog cache (refilled now and then when
			// goroutines block in select) is the runtime's, not ours.
			helper := strings.Contains(k, ".Test") || strings.Contains(k, ".pipe") || strings.Contains(k, ".allocsByStack")
			if strings.HasPrefix(k, "github.com/rdmanet/rdmanet/rdmanet.") && !helper && !strings.Contains(k, "acquireSudog") {
				ours = append(ours, line)
			} else {
				others = append(others, line)
			}
		}
	}
	t.Logf("allocations outside rdmanet during 2000+500 round trips (by innermost non-runtime frame):\n%s", strings.Join(others, "\n"))
	if len(ours) > 0 {
		t.Errorf("rdmanet allocated in steady state:\n%s", strings.Join(ours, "\n"))
	}
}

// writeWaits counts the times c's Writes waited for room, of any cause.
func writeWaits(c *Conn) uint64 {
	s := c.Stats()
	return s.CreditStalls + s.RingFullWaits + s.SendQueueWaits
}

// allocsByStack sums allocated objects by the innermost frame outside the
// runtime.
func allocsByStack() map[string]int64 {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := map[string]int64{}
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		name := "?"
		var rt []string
		for {
			f, more := frames.Next()
			if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "internal/") {
				name = f.Function
				break
			}
			rt = append(rt, f.Function)
			if !more {
				break
			}
		}
		if len(rt) > 0 {
			name += " via " + strings.Join(rt, "<")
		}
		out[name] += r.AllocObjects
	}
	return out
}
