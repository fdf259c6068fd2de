// Command rping is rdma-core's rping (librdmacm/examples/rping.c) over
// rdmanet's DAT layer: the same options, output, exit status and wire
// protocol, so that it can replace the C tool and talk to it. A client
// sends the server a buffer advertisement, the server RDMA Reads the ping
// data, the client advertises a second buffer, the server RDMA Writes the
// data back, and -V checks it. See usage.go for the command line and
// docs/rping-protocol.md in the repository for the protocol.
//
// Each message is a 16-byte big-endian buffer descriptor: the buffer's
// address (8 bytes), its remote key or STag (4) and the sender's -S size
// (4). The client sends two per iteration (its start buffer, to be Read;
// its rdma buffer, to be Written); the server answers each step with a
// 16-byte all-zero "go ahead". A message of any other length is an
// error. One Receive is always posted per side, re-posted before the
// message is acted on, and neither side sends again before the peer
// answered.
//
// By default it runs over the pure-Go iWARP provider, on plain TCP, and
// interoperates with the Linux kernel's siw; --provider picks another DAT
// IA (for example "verbs" in a binary built with -tags verbs).
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	a := newApp(os.Stdout, os.Stderr, true)
	code := a.run(os.Args[1:], os.Getenv, systemResolver)
	a.out.Flush()
	os.Exit(code & 0xff)
}

// app is one run of rping.
type app struct {
	cfg  config
	out  *stdio        // C's stdout
	errw *lockedWriter // C's unbuffered stderr
	// hard: exit ends the process (the binary). Otherwise (tests) exit
	// records the code and closes dead, and every wait gives up.
	hard     bool
	exitOnce sync.Once
	exitCode int
	dead     chan struct{}
	st       *stats
	// shortOnce makes the --latency/--bandwidth "incomplete run" line
	// appear at most once, whichever goroutine notices the end first.
	shortOnce sync.Once
}

func newApp(stdout, stderr io.Writer, hard bool) *app {
	return &app{
		out:  newStdio(stdout),
		errw: &lockedWriter{w: stderr},
		hard: hard,
		dead: make(chan struct{}),
		st:   &stats{},
	}
}

// printf writes to stdout, as rping's printf does.
func (a *app) printf(format string, args ...any) { fmt.Fprintf(a.out, format, args...) }

// eprintf writes to stderr.
func (a *app) eprintf(format string, args ...any) { fmt.Fprintf(a.errw, format, args...) }

// debugf is rping's DEBUG_LOG: stdout, only with -d.
func (a *app) debugf(format string, args ...any) {
	if a.cfg.debug > 0 {
		a.printf(format, args...)
	}
}

// exit is C's exit() called from another thread than main (rping's CM
// thread does exit(-1) on a connection error): stdout is flushed and the
// process ends at once.
func (a *app) exit(code int) {
	if a.hard {
		a.out.Flush()
		os.Exit(code & 0xff)
	}
	a.exitOnce.Do(func() {
		a.exitCode = code
		close(a.dead)
	})
}

// exited reports whether exit was called (in-process runs only).
func (a *app) exited() (int, bool) {
	select {
	case <-a.dead:
		return a.exitCode, true
	default:
		return 0, false
	}
}

// run is rping's main: it returns what main would return.
func (a *app) run(args []string, getenv func(string) string, lookup resolver) int {
	cfg, ret, done := parseArgs(args, getenv, lookup, a.out, a.errw)
	a.cfg = cfg
	if done {
		return ret
	}
	if a.hard && !cfg.persistent && a.extras() && cfg.server == 0 {
		// Only with the extensions: print the summary when interrupted,
		// like ping(8). Without them a signal kills rping as it kills the
		// C tool.
		a.summaryOnSignal()
	}
	if cfg.server == 1 {
		ret = a.runServer()
	} else {
		ret = a.runClient()
	}
	if code, ok := a.exited(); ok {
		return code
	}
	return ret
}

// summaryOnSignal prints the --latency/--bandwidth summary on SIGINT or
// SIGTERM and exits with 128+signal.
func (a *app) summaryOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		a.st.freeze()
		a.printSummary()
		if a.cfg.count > 0 && a.st.count() < a.cfg.count {
			a.reportShort(fmt.Sprintf("stopped by signal %d (%v)", int(sig.(syscall.Signal)), sig))
		}
		a.exit(128 + int(sig.(syscall.Signal)))
	}()
}

// printSummary prints the opt-in statistics.
func (a *app) printSummary() {
	if a.cfg.latency {
		a.st.writeLatency(a.out)
	}
	if a.cfg.bandwidth {
		a.st.writeBandwidth(a.out)
	}
}

// extras reports whether the client runs with --latency or --bandwidth.
// Only then does a run that ends before its -C iterations fail: rdma-core's
// rping exits 0 when the server goes away mid-run, and so does this one
// without the extras.
func (a *app) extras() bool { return a.cfg.latency || a.cfg.bandwidth }

// reportShort prints, once, the stderr line of an incomplete --latency or
// --bandwidth run: how many of the -C iterations completed, and why the
// run stopped.
func (a *app) reportShort(why string) {
	a.shortOnce.Do(func() {
		n := a.st.count()
		if a.cfg.count > 0 {
			a.eprintf("rping: incomplete run: %d of %d iterations completed: %s\n", n, a.cfg.count, why)
		} else {
			a.eprintf("rping: incomplete run: %d of unlimited (-C 0) iterations completed: %s\n", n, why)
		}
	})
}

// checkRun turns the end of a --latency/--bandwidth client run into its
// return value: success only if every -C iteration completed. Otherwise
// it prints the reportShort line and returns ret, or -1 (exit status 255,
// the connection broke) where plain rping would return 0.
func (a *app) checkRun(ret int, why string) int {
	if a.cfg.count > 0 && a.st.count() >= a.cfg.count {
		return ret
	}
	if why == "" {
		why = "the run ended early"
	}
	a.reportShort(why)
	if ret == 0 {
		ret = -1
	}
	return ret
}
