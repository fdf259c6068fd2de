package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// maxSamples bounds the exact samples kept for the percentiles; beyond it
// (a long -C 0 run) they come from a log-scale histogram with 1% buckets.
const maxSamples = 1 << 16

// stats collects the client's per-iteration round trips for --latency and
// --bandwidth. It is safe for concurrent use (a signal may print it).
type stats struct {
	mu       sync.Mutex
	n        int
	sum      time.Duration
	min, max time.Duration
	samples  []time.Duration
	hist     map[int]int // bucket -> count, used once samples overflow
	bytes    int64       // bytes moved by RDMA Read + Write
	elapsed  time.Duration
	// frozen stops add: a signal's summary and incomplete-run line
	// count the same iterations while the ping loop goes on.
	frozen bool
}

const histBase = 1.01

func bucketOf(d time.Duration) int {
	if d < 1 {
		d = 1
	}
	return int(math.Floor(math.Log(float64(d)) / math.Log(histBase)))
}

// add records one iteration that moved bytes bytes and took d.
func (s *stats) add(d time.Duration, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return
	}
	if s.n == 0 || d < s.min {
		s.min = d
	}
	if d > s.max {
		s.max = d
	}
	s.n++
	s.sum += d
	s.elapsed += d
	s.bytes += int64(bytes)
	if s.hist == nil && len(s.samples) < maxSamples {
		s.samples = append(s.samples, d)
		return
	}
	if s.hist == nil {
		s.hist = make(map[int]int)
		for _, x := range s.samples {
			s.hist[bucketOf(x)]++
		}
		s.samples = nil
	}
	s.hist[bucketOf(d)]++
}

// freeze makes the statistics final: add records nothing after it.
func (s *stats) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
}

// count returns the number of iterations recorded.
func (s *stats) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100).
// Callers hold s.mu and know s.n > 0.
func (s *stats) percentile(p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(s.n)))
	rank = max(1, min(rank, s.n))
	if s.hist == nil {
		sorted := slices.Clone(s.samples)
		slices.Sort(sorted)
		return sorted[rank-1]
	}
	keys := make([]int, 0, len(s.hist))
	for k := range s.hist {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := 0
	for _, k := range keys {
		seen += s.hist[k]
		if seen >= rank {
			d := time.Duration(math.Pow(histBase, float64(k+1)))
			return min(max(d, s.min), s.max)
		}
	}
	return s.max
}

// writeLatency prints the --latency summary line.
func (s *stats) writeLatency(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		fmt.Fprintf(w, "rping latency: 0 iterations\n")
		return
	}
	fmt.Fprintf(w, "rping latency: %d iterations: min %s mean %s p50 %s p99 %s max %s\n",
		s.n, us(s.min), us(s.sum/time.Duration(s.n)), us(s.percentile(50)), us(s.percentile(99)), us(s.max))
}

// writeBandwidth prints the --bandwidth summary line: the bytes the
// server moved with RDMA Read and Write over the time the iterations took.
func (s *stats) writeBandwidth(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mbps := 0.0
	if s.elapsed > 0 {
		mbps = float64(s.bytes) / s.elapsed.Seconds() / 1e6
	}
	fmt.Fprintf(w, "rping bandwidth: %d iterations, %d bytes in %s: %.3f MB/s\n",
		s.n, s.bytes, us(s.elapsed), mbps)
}

// us formats d in microseconds with one decimal.
func us(d time.Duration) string {
	return fmt.Sprintf("%.1fus", float64(d)/float64(time.Microsecond))
}
