package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// report is one side's result, printed as one line of key=value pairs:
//
//	rdmaperf role=client api=rdmanet ia=verbs:192.0.2.1 test=bw echo=0 size=65536 iters=1000 warmup=100 bytes=65536000 secs=1.434567 MiBps=43.568 Gbps=0.365
//	rdmaperf role=client api=dat ia=iwarp:127.0.0.1 test=lat echo=0 size=64 iters=5000 warmup=500 bytes=640000 secs=0.112000 lat_avg_us=11.200 lat_p50_us=10.900 lat_min_us=9.800 lat_p99_us=20.100 lat_max_us=80.000
//
// bytes counts payload moved in the timed part (both directions for an
// echo test); MiBps is in 2^20 bytes per second (perftest's MB/sec) and
// Gbps in 10^9 bits per second (rstream's Gb/sec). The lat_* keys are half
// round trips in microseconds (ib_send_lat's t_* and rstream's usec/xfer).
// The key set is fixed per test; values never contain spaces.
type report struct {
	cfg     *config
	p       params
	bytes   int64
	elapsed time.Duration
	lat     *latencies // lat tests only
	// conn is the rdmanet connection's Stats at the end (--stats).
	conn *rdmanet.Stats
}

func (r *report) String() string {
	var b strings.Builder
	echo := 0
	if r.p.echo {
		echo = 1
	}
	ia := strings.ReplaceAll(r.cfg.ia, " ", ",")
	if ia == "" {
		ia = "-"
	}
	fmt.Fprintf(&b, "rdmaperf role=%s api=%s ia=%s test=%s echo=%d size=%d iters=%d warmup=%d bytes=%d secs=%.6f",
		r.cfg.role(), r.cfg.api, ia, r.p.test, echo, r.p.size, r.p.iters, r.p.warmup,
		r.bytes, r.elapsed.Seconds())
	if r.p.test == testBW {
		sec := r.elapsed.Seconds()
		var mib, gb float64
		if sec > 0 {
			mib = float64(r.bytes) / sec / (1 << 20)
			gb = float64(r.bytes) * 8 / sec / 1e9
		}
		fmt.Fprintf(&b, " MiBps=%.3f Gbps=%.4f", mib, gb)
	}
	if r.lat != nil {
		s := r.lat.summary()
		fmt.Fprintf(&b, " lat_avg_us=%.3f lat_p50_us=%.3f lat_min_us=%.3f lat_p99_us=%.3f lat_max_us=%.3f",
			s.avg, s.p50, s.min, s.p99, s.max)
	}
	return b.String()
}
