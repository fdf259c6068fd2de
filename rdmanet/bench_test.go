package rdmanet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The benchmarks compare an rdmanet Conn with a TCP net.Conn on loopback in
// the same run:
//
//	go test -run '^$' -bench . -benchmem ./rdmanet/
//
// tcp is the kernel's loopback TCP, iwarp rdmanet over the pure-Go iWARP
// provider (which itself runs over loopback TCP), mem rdmanet over the
// in-process provider (rdmanet's own cost without a wire).
// RDMANET_BENCH_BUF sets the ring size for the iwarp/mem runs.

func benchBuf() int {
	n, _ := strconv.Atoi(os.Getenv("RDMANET_BENCH_BUF"))
	return n
}

// benchPipe returns a connected pair of the given kind.
func benchPipe(b *testing.B, kind string) (c1, c2 net.Conn, stop func()) {
	if kind != "tcp" {
		x, y, stop := pipe(b, kind, benchBuf())
		return x, y, stop
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := l.Accept(); ch <- c }()
	c1, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 = <-ch
	return c1, c2, func() { c1.Close(); c2.Close() }
}

var benchKinds = []string{"tcp", "iwarp"}

func kindName(k string) string { return k }

// BenchmarkThroughput streams b.N writes of each size one way; the reader
// uses plain Read with a 256 KiB buffer on both transports.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, kind := range benchKinds {
			b.Run(fmt.Sprintf("%s/%dK", kindName(kind), size>>10), func(b *testing.B) {
				c1, c2, stop := benchPipe(b, kind)
				defer stop()
				benchStream(b, c1, c2, size)
			})
		}
	}
}

// benchStream writes b.N buffers of size bytes on c1 while c2 reads them
// with a 256 KiB buffer.
func benchStream(b *testing.B, c1, c2 net.Conn, size int) {
	buf := make([]byte, size)
	done := make(chan error, 1)
	total := int64(size) * int64(b.N)
	go func() {
		rb := make([]byte, 256<<10)
		var n int64
		for n < total {
			k, err := c2.Read(rb)
			n += int64(k)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c1.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriteDirect compares large Writes through the staging buffer
// with zero-copy Writes registered for the call (conn_direct.go), on the
// test IA: whether registering per Write pays on a provider decides
// directMin. In the VM suite's IA (RDMANET_TEST_IA=verbs:...) it measures
// rxe or siw.
func BenchmarkWriteDirect(b *testing.B) {
	ia := providers(b)[0]
	defer testDirectMin.Store(0)
	for _, size := range []int{1 << 20, 4 << 20} {
		for _, mode := range []string{"staged", "direct"} {
			b.Run(fmt.Sprintf("%s/%dK", mode, size>>10), func(b *testing.B) {
				testDirectMin.Store(-1)
				if mode == "direct" {
					testDirectMin.Store(256 << 10)
				}
				c1, c2, stop := pipe(b, ia, 0)
				defer stop()
				benchStream(b, c1, c2, size)
			})
		}
	}
}

// BenchmarkPingPong measures one round trip of a 64-byte message.
func BenchmarkPingPong(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kindName(kind), func(b *testing.B) {
			c1, c2, stop := benchPipe(b, kind)
			defer stop()
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(c2, buf); err != nil {
						return
					}
					if _, err := c2.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c1.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c1, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDial and BenchmarkDialDup measure connection set-up (dial and
// accept, both sides ready) without and with dup_connect reuse. One extra
// connection stays open in both, so the IA is opened once either way and
// only dup_connect differs.
// BenchmarkDial measures a dial plus a first byte each way (the server
// echoes it), against TCP doing the same; BenchmarkDialDup the same
// through dup-connect (a live connection to the address exists), with a
// fresh dial (iwarp-fresh) as its baseline in the same run.
func BenchmarkDial(b *testing.B)    { benchDial(b, false) }
func BenchmarkDialDup(b *testing.B) { benchDial(b, true) }

func benchDial(b *testing.B, dup bool) {
	kinds := []string{"iwarp", "iwarp-fresh"}
	if !dup {
		kinds = []string{"tcp", "iwarp"}
	}
	for _, name := range kinds {
		kind, fresh := strings.CutSuffix(name, "-fresh")
		b.Run(kindName(name), func(b *testing.B) {
			var l net.Listener
			var err error
			if kind == "tcp" {
				l, err = net.Listen("tcp", "127.0.0.1:0")
			} else {
				l, err = (&ListenConfig{IA: kind}).Listen(context.Background(), "rdma", "127.0.0.1:0")
			}
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(c, c); c.Close() }()
				}
			}()
			dial := func() (net.Conn, error) {
				if kind == "tcp" {
					return net.Dial("tcp", l.Addr().String())
				}
				d := &Dialer{IA: kind, NoDup: !dup || fresh, Timeout: 10 * time.Second}
				return d.Dial("rdma", l.Addr().String())
			}
			keep, err := dial()
			if err != nil {
				b.Fatal(err)
			}
			defer keep.Close()
			one := make([]byte, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := dial()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				c.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkConnMemory reports what one idle connection end holds: the
// mapped, registered memory (ring, staging buffer, control slots), the Go
// heap of the Conn and its DAT objects, and its goroutines (the iwarp
// provider's receiver; rdmanet has none of its own).
func BenchmarkConnMemory(b *testing.B) {
	const pairs = 50
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	var stops []func()
	var mapped int
	for i := 0; i < pairs; i++ {
		c1, _, stop := pipe(b, "iwarp", benchBuf())
		stops = append(stops, stop)
		mapped = c1.mappedBytes()
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()
	for _, s := range stops {
		s()
	}
	for i := 0; i < b.N; i++ {
	}
	b.ReportMetric(float64(mapped), "mapped-B/conn")
	b.ReportMetric(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/(2*pairs), "heap-B/conn")
	b.ReportMetric(float64(g1-g0)/(2*pairs), "goroutines/conn")
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC), "gcs")
}
