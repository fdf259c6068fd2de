// Command rdmaperf measures bandwidth and latency over rdmanet and over
// package dat, the way perftest's ib_write_bw/ib_send_lat and rdma-core's
// rstream do, so that the three can be compared on the same device.
//
// Like perftest it runs as two processes: a server that serves one test
// and exits, and a client that connects, runs the test and prints the
// result. The client tells the server what to run, so the server needs only
// its address, IA and API:
//
//	rdmaperf -s --ia verbs:192.0.2.1 --api rdmanet --port 18600 &
//	rdmaperf -c 192.0.2.1 --ia verbs:192.0.2.1 --api rdmanet --port 18600 --test bw --size 65536 --iters 1000
//
// The APIs and tests:
//
//	--api rdmanet --test bw   the client Writes iters messages of size bytes
//	                          to a net.Conn, the server reads them and
//	                          answers with one byte (ib_write_bw's shape);
//	                          with --echo the server first sends all of it
//	                          back and the figure counts both directions
//	                          (rstream's bandwidth test)
//	--api rdmanet --test lat  size-byte ping-pong over the net.Conn
//	                          (ib_send_lat's and rstream's latency test)
//	--api dat --test bw       RDMA Writes of size bytes into the server's
//	                          registered buffer, --depth outstanding
//	--api dat --test lat      size-byte Send/Recv ping-pong on DAT EPs
//	--api tcp                 the rdmanet tests over a TCP net.Conn: what
//	                          the Go runtime and the kernel's TCP manage on
//	                          the same machine (--ia is then optional)
//
// Each side prints one line of key=value pairs on stdout (see report.go);
// errors go to stderr with exit status 1. The server also prints
// "rdmaperf: listening ..." on stderr once it accepts connections.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err == errHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rdmaperf: %v\n", err)
		return 2
	}
	stopProfiles, err := startProfiles(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rdmaperf: %v\n", err)
		return 1
	}
	rep, err := dispatch(cfg, stderr)
	stopProfiles()
	if err != nil {
		fmt.Fprintf(stderr, "rdmaperf: %s: %v\n", cfg.role(), err)
		return 1
	}
	fmt.Fprintln(stdout, rep.String())
	if rep.conn != nil {
		b, _ := json.Marshal(rep.conn)
		fmt.Fprintf(stderr, "rdmaperf: %s stats %s\n", cfg.role(), b)
	}
	return 0
}

// dispatch runs the side and API cfg asks for.
func dispatch(cfg *config, stderr io.Writer) (*report, error) {
	ready := func(addr string) {
		fmt.Fprintf(stderr, "rdmaperf: listening api=%s ia=%s addr=%s\n", cfg.api, cfg.ia, addr)
	}
	switch {
	case cfg.server && cfg.api != apiDAT:
		return rdmanetServer(cfg, ready)
	case cfg.server:
		return datServer(cfg, ready)
	case cfg.api != apiDAT:
		return rdmanetClient(cfg)
	default:
		return datClient(cfg)
	}
}
