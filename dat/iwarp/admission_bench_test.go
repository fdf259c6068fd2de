package iwarp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// floodEnv makes the test binary a flood process (see floodChild).
const floodEnv = "IWARP_FLOOD_CHILD"

func init() {
	if v := os.Getenv(floodEnv); v != "" {
		os.Exit(floodChild(v))
	}
}

// floodChild runs a flood, given as "addr silent garbage", in a process of
// its own: it prints "ready" once every silent connection was opened,
// and stops when its standard input closes.
func floodChild(spec string) int {
	var addr string
	var silent, garbage int
	if _, err := fmt.Sscan(spec, &addr, &silent, &garbage); err != nil {
		fmt.Fprintln(os.Stderr, "bad flood spec:", err)
		return 2
	}
	f := startFlood(addr, silent, garbage)
	for f.silentOpened.Load() < int64(silent) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Println(f.silentOpened.Load(), f.garbageSent.Load())
	f.stop()
	return 0
}

// BenchmarkAdmissionFlood measures legitimate dials (TCP connect and MPA
// exchange, accepted by a consumer) at a listener on 127.0.0.1 on
// defaults while silent connections, reopened as soon as the listener
// drops them, and garbage senders, reconnecting as soon as they are
// dropped, hit its port from another process (this test binary run as a
// flood process). It reports the p50 and p99 dial latency, failed dials
// (which fail the benchmark) and the listener's eviction and drop rates.
// Run it with -benchtime=Nx (N legit dials):
//
//	go test -run - -bench AdmissionFlood -benchtime 500x ./dat/iwarp
func BenchmarkAdmissionFlood(b *testing.B) {
	for _, bc := range []struct {
		silent, garbage int
		opts            []string
	}{
		{silent: 0, garbage: 0},
		{silent: 1000, garbage: 32},
		{silent: 10000, garbage: 64},
		{silent: 10000, garbage: 64, opts: []string{"max_handshakes=1024"}},
	} {
		name := fmt.Sprintf("silent=%d/garbage=%d", bc.silent, bc.garbage)
		for _, o := range bc.opts {
			name += "/" + o
		}
		b.Run(name, func(b *testing.B) {
			ensureNOFILE(b, uint64(bc.silent+bc.garbage+2048))
			benchFlood(b, bc.silent, bc.garbage, bc.opts)
		})
	}
}

func benchFlood(b *testing.B, silent, garbage int, opts []string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ini := openIA(b, "rep_timeout=5s")
	resp := openIA(b, opts...)
	l := listen(b, resp, driver.ListenConfig{})
	qps := make(chan *iwarp.QP, 16)
	waitAcceptor := startAcceptor(ctx, l, qps)
	defer waitAcceptor()
	defer cancel()

	var child *exec.Cmd
	if silent+garbage > 0 {
		child = exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", floodEnv, l.Addr(), silent, garbage))
		child.Stderr = os.Stderr
		stdin, err := child.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := child.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		out := bufio.NewScanner(stdout)
		defer func() {
			stdin.Close()
			if out.Scan() {
				b.Logf("flood process opened %s (silent, garbage) connections", out.Text())
			}
			_ = child.Wait()
		}()
		if !out.Scan() || out.Text() != "ready" {
			b.Fatalf("flood process: %q", out.Text())
		}
		time.Sleep(time.Second) // let the flood settle into its churn
	}
	before := iwarp.ListenerCounts(l)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	start := time.Now()

	durs := make([]time.Duration, 0, b.N)
	failed := 0
	var firstErr error
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		q := newQP(b, ini, defaultQPConfig, nil)
		qps <- newQP(b, resp, defaultQPConfig, nil)
		b.StartTimer()
		t0 := time.Now()
		_, err := q.Connect(ctx, l.Addr(), nil)
		durs = append(durs, time.Since(t0))
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
		b.StopTimer()
		q.Close()
		b.StartTimer()
	}
	b.StopTimer()
	elapsed := time.Since(start)
	after := iwarp.ListenerCounts(l)
	slices.Sort(durs)
	b.ReportMetric(float64(percentile(durs, .5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(durs, .99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(after.Evicted-before.Evicted)/elapsed.Seconds(), "evicted/s")
	b.ReportMetric(float64(after.Dropped-before.Dropped)/elapsed.Seconds(), "dropped/s")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "sys-MiB")
	b.Logf("%d legit dials: p50 %v p99 %v max %v, %d failed; in admission %d, goroutines %d; admission %+v",
		len(durs), percentile(durs, .5), percentile(durs, .99), durs[len(durs)-1], failed,
		iwarp.ListenerHandshakes(l), runtime.NumGoroutine(), after)
	if failed > 0 {
		b.Errorf("%d legit dials failed, first: %v", failed, firstErr)
	}
}
