package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// The APIs rdmaperf drives.
const (
	apiRdmanet = "rdmanet"
	apiDAT     = "dat"
	apiTCP     = "tcp" // the rdmanet tests over TCP: a baseline
)

// config is the command line.
type config struct {
	server bool
	host   string // client: the server's address
	bind   string // server: the address to listen on
	port   int
	ia     string
	api    string
	test   testKind
	size   int
	iters  int
	warmup int
	echo   bool
	depth  int
	poll   bool
	// wait is how blocked calls wait for completions (dat.PollPolicy).
	wait   dat.PollPolicy
	buffer int
	// noImm: rdmanet.Dialer/ListenConfig.NoWriteImm.
	noImm bool
	// stats: print the rdmanet connection's Stats when done.
	stats bool
	// Diagnostics: files for a CPU profile and an execution trace.
	cpuprofile, trace string
	// timeout bounds the whole run (connection set-up included), so a
	// wedged peer fails the run instead of hanging it.
	timeout time.Duration
}

// role names the side, for messages and reports.
func (c *config) role() string {
	if c.server {
		return "server"
	}
	return "client"
}

var errHelp = errors.New("help requested")

// parseFlags parses the command line. Both -flag and --flag work.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("rdmaperf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var test, wait string
	fs.BoolVar(&c.server, "s", false, "run the server (serves one test, then exits)")
	fs.StringVar(&c.host, "c", "", "run the client against this server `address`")
	fs.StringVar(&c.bind, "bind", "", "server, rdmanet and tcp: the `address` to listen on (default: the IA's address; dat listens on the IA)")
	fs.IntVar(&c.port, "port", 18600, "port (DAT connection qualifier)")
	fs.StringVar(&c.ia, "ia", "", "DAT IA `name`, e.g. verbs:192.0.2.1 or iwarp:127.0.0.1 (required but for --api tcp)")
	fs.StringVar(&c.api, "api", apiRdmanet, "API to measure: rdmanet (net.Conn), dat (DTOs) or tcp (the rdmanet tests over TCP)")
	fs.StringVar(&test, "test", "bw", "client: bw (bandwidth) or lat (ping-pong latency)")
	fs.IntVar(&c.size, "size", 65536, "client: message size in bytes")
	fs.IntVar(&c.iters, "iters", 1000, "client: timed iterations (messages for bw, round trips for lat)")
	fs.IntVar(&c.warmup, "warmup", -1, "client: untimed iterations before the timed ones (-1: iters/10)")
	fs.BoolVar(&c.echo, "echo", false, "client, rdmanet bw: the server sends everything back (rstream's bandwidth test)")
	fs.IntVar(&c.depth, "depth", 128, "client, dat bw: RDMA Writes outstanding (perftest's tx-depth)")
	fs.IntVar(&c.buffer, "buffer", 0, "rdmanet: ring and staging buffer size in bytes, each side (0: adaptive, from rdmanet.DefaultBufferSize up to rdmanet.MaxBufferSize)")
	fs.BoolVar(&c.noImm, "no-imm", false, "rdmanet: announce data with control Sends only, never as RDMA Write with Immediate (rdmanet.Dialer.NoWriteImm)")
	fs.BoolVar(&c.poll, "poll", false, "dat: busy-poll the EVDs (dat_evd_dequeue) instead of waiting")
	fs.StringVar(&wait, "wait", "adaptive", "rdmanet and dat: how a blocked call waits for completions: adaptive (spin, then sleep), busy or event")
	fs.DurationVar(&c.wait.Spin, "spin", 0, "rdmanet and dat, --wait adaptive: the spin before sleeping (0: the provider's advice)")
	fs.BoolVar(&c.stats, "stats", false, "rdmanet: print the connection's Stats (rdmanet.Conn.Stats, as JSON) on stderr when done")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to `file`")
	fs.StringVar(&c.trace, "trace", "", "write an execution trace of the run to `file` (go tool trace)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.test, err = parseTest(test); err != nil {
		return nil, err
	}
	switch wait {
	case "adaptive":
		c.wait.Mode = dat.PollAdaptive
	case "busy":
		c.wait.Mode = dat.PollBusy
	case "event":
		c.wait.Mode = dat.PollEvent
	default:
		return nil, fmt.Errorf("--wait %q: want adaptive, busy or event", wait)
	}
	if c.warmup < 0 {
		c.warmup = c.iters / 10
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.server == (c.host != ""):
		return errors.New("give exactly one of -s (server) and -c ADDRESS (client)")
	case c.ia == "" && c.api != apiTCP:
		return errors.New("--ia is required (e.g. verbs:192.0.2.1, iwarp:127.0.0.1)")
	case c.api != apiRdmanet && c.api != apiDAT && c.api != apiTCP:
		return fmt.Errorf("--api %q: want rdmanet, dat or tcp", c.api)
	case c.bind != "" && !isIP(c.bind):
		return fmt.Errorf("--bind %q: want an IP address", c.bind)
	case c.port <= 0 || c.port > 65535:
		return fmt.Errorf("--port %d out of range", c.port)
	case c.size <= 0 || c.size > 1<<30:
		return fmt.Errorf("--size %d out of range", c.size)
	case c.iters <= 0:
		return fmt.Errorf("--iters %d must be positive", c.iters)
	case c.depth <= 0:
		return fmt.Errorf("--depth %d must be positive", c.depth)
	case c.echo && (c.api == apiDAT || c.test != testBW):
		return errors.New("--echo applies to --api rdmanet (or tcp) --test bw only")
	case c.poll && c.api != apiDAT:
		return errors.New("--poll applies to --api dat only")
	case c.buffer < 0 || c.buffer > 0 && c.api != apiRdmanet:
		return errors.New("--buffer applies to --api rdmanet only, and must not be negative")
	}
	return nil
}

// listenAddr is where the server listens: --bind, else the address in
// the IA name ("verbs:192.0.2.1"), else every address.
func (c *config) listenAddr() string {
	host := c.bind
	if host == "" {
		host = iaAddress(c.ia)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return netip.AddrPortFrom(netip.MustParseAddr(host), uint16(c.port)).String()
}

// dialAddr is the server's address and port.
func (c *config) dialAddr() (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(c.host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("-c %q: want an IP address", c.host)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(c.port)), nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// iaAddress is the IP address in an IA name of the form
// "provider:address [args]", or "".
func iaAddress(name string) string {
	_, args, ok := strings.Cut(name, ":")
	if f := strings.Fields(args); ok && len(f) > 0 && isIP(f[0]) {
		return f[0]
	}
	return ""
}

// testKind is what the client measures.
type testKind uint8

const (
	testBW testKind = iota + 1
	testLat
)

func parseTest(s string) (testKind, error) {
	switch s {
	case "bw":
		return testBW, nil
	case "lat":
		return testLat, nil
	}
	return 0, fmt.Errorf("--test %q: want bw or lat", s)
}

func (t testKind) String() string {
	switch t {
	case testBW:
		return "bw"
	case testLat:
		return "lat"
	}
	return "test" + strconv.Itoa(int(t))
}
