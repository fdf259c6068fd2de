// Command rdmaconns opens many rdmanet connections at once between two
// processes, does one echo on each, and prints what they cost: how long
// the dials and the echoes took, and the memory, mappings and goroutines
// of the process while every connection is open.
//
//	rdmaconns -s -n 10000 [-addr 127.0.0.1:18700]     # the server: echoes, exits after n
//	rdmaconns -c 127.0.0.1:18700 -n 10000 [-parallel 256]
//
// Both print one line of key=value pairs, e.g.
//
//	rdmaconns role=client conns=10000 dial_secs=2.1 dial_p50_us=180 dial_p99_us=900 echo_secs=0.4
//	    rss_mib=900 heap_mib=210 maps=10400 goroutines=10012 failed=0
//
// The process raises its open-file limit to the hard limit (each
// connection is a socket on the iwarp provider); with fewer descriptors
// than connections the run fails with the dial's error.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	server   bool
	addr     string
	n        int
	parallel int
	ia       string
	timeout  time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := flag.NewFlagSet("rdmaconns", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&cfg.server, "s", false, "run the server: accept n connections, echo on each, exit once all closed")
	client := fs.String("c", "", "run the client against this server `address`")
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:18700", "server: the `address` to listen on")
	fs.IntVar(&cfg.n, "n", 1000, "connections")
	fs.IntVar(&cfg.parallel, "parallel", 256, "client: dials in flight at once")
	fs.StringVar(&cfg.ia, "ia", "", "DAT IA name (default: rdmanet's, the iwarp provider)")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.server == (*client != "") || cfg.n <= 0 || cfg.parallel <= 0 {
		fmt.Fprintln(stderr, "rdmaconns: give -s or -c address, and positive -n and -parallel")
		return 2
	}
	raiseFileLimit()
	var line string
	var err error
	if cfg.server {
		line, err = serve(cfg, stderr)
	} else {
		cfg.addr = *client
		line, err = dialAll(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rdmaconns: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, line)
	return 0
}

const msgLen = 64

// serve accepts cfg.n connections and echoes on each until it closes.
func serve(cfg config, stderr io.Writer) (string, error) {
	lc := rdmanet.ListenConfig{IA: cfg.ia}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	l, err := lc.Listen(ctx, "rdma", cfg.addr)
	if err != nil {
		return "", err
	}
	defer l.Close()
	defer context.AfterFunc(ctx, func() { l.Close() })()
	fmt.Fprintf(stderr, "rdmaconns: listening addr=%s\n", l.Addr())
	var wg sync.WaitGroup
	var failed atomic.Int64
	open := make(chan struct{}, cfg.n)
	var peak usage
	for i := 0; i < cfg.n; i++ {
		c, err := l.Accept()
		if err != nil {
			return "", fmt.Errorf("accept %d of %d: %w", i+1, cfg.n, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			b := make([]byte, msgLen)
			if _, err := io.ReadFull(c, b); err != nil {
				failed.Add(1)
				return
			}
			if _, err := c.Write(b); err != nil {
				failed.Add(1)
				return
			}
			open <- struct{}{}
			io.Copy(io.Discard, c) // until the client closes
		}()
	}
	// Measure while every connection is open and has echoed.
	for i := 0; i < cfg.n-int(failed.Load()); i++ {
		select {
		case <-open:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	peak = measure()
	wg.Wait()
	return fmt.Sprintf("rdmaconns role=server conns=%d %s failed=%d", cfg.n, peak, failed.Load()), nil
}

// dialAll opens cfg.n connections, cfg.parallel at a time, then echoes
// on all of them at once, measures, and closes them.
func dialAll(cfg config) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	d := rdmanet.Dialer{IA: cfg.ia, NoDup: true}
	conns := make([]net.Conn, cfg.n)
	took := make([]time.Duration, cfg.n)
	var firstErr error
	var mu sync.Mutex
	sem := make(chan struct{}, cfg.parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t := time.Now()
			c, err := d.DialContext(ctx, "rdma", cfg.addr)
			took[i] = time.Since(t)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("dial %d: %w", i, err)
				}
				mu.Unlock()
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	dialSecs := time.Since(start).Seconds()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if firstErr != nil {
		return "", firstErr
	}
	var failed atomic.Int64
	start = time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(cfg.timeout))
			b := make([]byte, msgLen)
			for i := range b {
				b[i] = byte(i)
			}
			r := make([]byte, msgLen)
			if _, err := c.Write(b); err != nil {
				failed.Add(1)
				return
			}
			if _, err := io.ReadFull(c, r); err != nil || string(r) != string(b) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	echoSecs := time.Since(start).Seconds()
	u := measure()
	slices.Sort(took)
	pct := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) }
	return fmt.Sprintf("rdmaconns role=client conns=%d dial_secs=%.3f dial_p50_us=%.0f dial_p99_us=%.0f echo_secs=%.3f %s failed=%d",
		cfg.n, dialSecs, pct(0.5), pct(0.99), echoSecs, u, failed.Load()), nil
}

// usage is what the process holds at one moment.
type usage struct {
	rssMiB, heapMiB float64
	maps, gs        int
}

func (u usage) String() string {
	return fmt.Sprintf("rss_mib=%.1f heap_mib=%.1f maps=%d goroutines=%d", u.rssMiB, u.heapMiB, u.maps, u.gs)
}

func measure() usage {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{heapMiB: float64(ms.HeapAlloc) / (1 << 20), gs: runtime.NumGoroutine()}
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		u.maps = strings.Count(string(b), "\n")
	}
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				u.rssMiB = float64(kb) / 1024
			}
		}
	}
	return u
}
