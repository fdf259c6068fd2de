package rdmanet

import (
	"net"
	"sync/atomic"

	"github.com/rdmanet/rdmanet/dat"
)

// Zero-copy Writes. A large Write is RDMA-written straight from the
// caller's buffer, registered for the duration of the call, instead of
// being copied into the staging buffer first: on iWARP the provider
// frames the caller's bytes into the socket itself, so each byte is
// copied once (by the kernel) on its way out, as with TCP. Write still
// returns only once b may be reused: its last RDMA Write asks for a
// completion, and Write waits for it.
//
// Registration is what makes this pay or not: the pure-Go iWARP provider
// registers by recording the slice (free), while a verbs NIC pins and
// maps the pages (tens of microseconds per MiB), so by default only the
// iwarp provider takes this path (directMin), for Writes of at least
// directMinIWARP bytes. Smaller Writes keep staging: there the copy is
// cheap and the staging buffer lets Write return before the provider has
// sent the bytes, which keeps several Writes in flight. (Measured between
// two processes on loopback: zero-copy 1 MiB Writes cut the writer's user
// CPU from 0.15-0.19 s to 0.03-0.08 s per 2 GiB; at 64 KiB, waiting for
// each Write's completion cost more than the copy saved.)
//
// On verbs, registering for the call does not pay either: in the test VM
// (BenchmarkWriteDirect, medians of 5, 1 and 4 MiB Writes) zero-copy
// moved 3-7% less than staging on rxe and 4-34% less on siw, differences
// benchstat does not call significant (p 0.22-0.84). What would pay is a registration cache, registering
// a buffer once for many Writes, as UCX's rcache does. A cache is not
// safe over Go memory: the runtime hands freed heap pages back to the
// kernel (madvise) while they are still registered, and the next use of
// that address gets fresh pages the registration does not map, so a
// cached region would send stale bytes. UCX keeps its cache right by
// intercepting munmap and madvise; Go offers no such hook. Only on-demand
// paging (IBV_ACCESS_ON_DEMAND, which keeps a region in step with the page
// tables) would make it safe, and rxe on the kernels we test has none. So
// verbs keeps staging (directMin 0).
const directMinIWARP = 256 << 10

// directMin is the smallest Write c sends zero-copy; 0 for never.
func (c *Conn) directMin() int {
	switch m := testDirectMin.Load(); {
	case m < 0:
		return 0
	case m > 0:
		return int(m)
	}
	if c.ia.provider == "iwarp" {
		return directMinIWARP
	}
	return 0
}

// testDirectMin, when not 0, replaces directMin's answer for every Conn
// (-1: never), so a benchmark can compare staging with zero-copy on any
// provider (BenchmarkWriteDirect).
var testDirectMin atomic.Int64

// directSource walks a registered caller buffer for postWrites.
type directSource struct {
	addr uint64 // registered address of the next byte
	lkey uint32
}

// take returns the triplet of the next n bytes and moves past them.
func (d *directSource) take(n uint64) dat.LMRTriplet {
	t := dat.LMRTriplet{Addr: d.addr, Length: uint32(n), Context: d.lkey}
	d.addr += n
	return t
}

// writeDirect sends b zero-copy. ok is false when b could not be
// registered; the caller then stages it as usual.
func (c *Conn) writeDirect(b []byte) (n int, err error, ok bool) {
	lmr, err := c.ia.ia.CreateLMR(c.ia.pz, b, dat.MemPrivLocalRead)
	if err != nil {
		return 0, nil, false
	}
	defer lmr.Free()
	p, err := lmr.Query()
	if err != nil {
		return 0, nil, false
	}
	src := directSource{addr: p.Addr, lkey: p.Context}
	var last uint64
	posted := false
	for n < len(b) {
		k, rerr := c.reserve(uint64(len(b)-n), false)
		if rerr != nil {
			err = rerr
			break
		}
		// Each piece asks for a completion of its last RDMA Write (one
		// per half ring at most), so that whichever piece turns out to
		// be the last, Write can wait for it.
		seq, ok := c.postWrites(k, &src, true)
		if !ok {
			err = net.ErrClosed
			break
		}
		last, posted = seq, true
		n += int(k)
	}
	if posted {
		c.awaitCompleted(last)
	}
	return n, err, true
}

// awaitCompleted waits until the send-side request seq has completed, or
// the connection is gone (then the provider holds the buffer no longer:
// the EP is torn down, or being torn down, without sending more of it).
// It ignores the write deadline: the bytes are posted, and b may not be
// handed back while the adapter may still read it.
func (c *Conn) awaitCompleted(seq uint64) {
	c.quiet.Add(1) // a stream's wait (progress.go)
	defer c.quiet.Add(-1)
	for {
		k := c.pr.kicks.Load()
		c.mu.Lock()
		done := c.completed > seq || c.err != nil || c.closedLocked()
		c.mu.Unlock()
		if done {
			return
		}
		if c.poll(k) {
			continue
		}
		select {
		case <-c.wwake:
		case <-c.done:
		}
	}
}
