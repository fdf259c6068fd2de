package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rping's getopt string. 't' takes an argument but no case handles it, so
// -t ends in the usage message, exactly as in rdma-core.
const optstring = "a:I:Pp:C:S:t:scvVdq"

// Long options exist only here; rdma-core's rping has none, so using one
// is the only way to get behaviour it does not have.
var longOpts = []longOpt{
	{"provider", true},
	{"ia", true}, // same as --provider: any DAT IA name
	{"latency", false},
	{"bandwidth", false},
	{"diagnose", false},
	{"help", false},
}

// Defaults and limits, as in rdma-core's rping.c.
const (
	defaultPort = 7174
	defaultSize = 64
	// minSize is RPING_MIN_BUFSIZE: sizeof(stringify(INT_MAX)) +
	// sizeof("rdma-ping-%d: "). INT_MAX is not defined where rping.c
	// stringifies it, so the first term is sizeof("INT_MAX") = 8, plus 15.
	minSize = 23
	// bufSize is RPING_BUFSIZE (64 KiB): sizes up to bufSize-1 are valid,
	// but the error message names bufSize as the upper bound.
	bufSize = 64 * 1024

	exitUsage = int(syscall.EINVAL) // 22
)

// providerEnv names the environment variable that picks the DAT IA when
// --provider is not given.
const providerEnv = "RPING_PROVIDER"

// config is the parsed command line.
type config struct {
	server     int        // -1 unset, 0 client (-c), 1 server (-s)
	addr       netip.Addr // -a; the zeroed AF_INET address (0.0.0.0) by default
	src        netip.Addr // -I; invalid when not given
	port       uint16     // -p, truncated to 16 bits like htobe16(atoi())
	size       int        // -S, kept even when out of range (as rping does)
	count      int        // -C, 0 = forever
	verbose    int        // -v
	validate   int        // -V
	debug      int        // -d
	persistent bool       // -P
	// selfQP is -q: rping creates and moves the QP itself instead of
	// letting rdma_cm do it. DAT has no such split (the provider always
	// owns the QP's state transitions), so -q is accepted and changes
	// nothing on the wire or in the output.
	selfQP bool

	provider  string // --provider / --ia / $RPING_PROVIDER
	latency   bool   // --latency
	bandwidth bool   // --bandwidth
	diagnose  bool   // --diagnose
}

// resolver looks a host name up; tests replace it.
type resolver func(ctx context.Context, host string) ([]netip.Addr, error)

func systemResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// parseArgs parses the command line the way rping's main does, printing
// what rping prints while it parses. It returns the configuration and, if
// the program must stop, done true with its return value (the exit status
// is that value modulo 256).
func parseArgs(args []string, getenv func(string) string, lookup resolver, stdout, stderr io.Writer) (cfg config, ret int, done bool) {
	cfg = config{
		server: -1,
		addr:   netip.IPv4Unspecified(),
		port:   defaultPort,
		size:   defaultSize,
	}
	g := newGetopt(args, optstring, longOpts, getenv("POSIXLY_CORRECT") != "")
	for {
		o, ok := g.next()
		if !ok {
			break
		}
		if o.long != "" {
			switch o.long {
			case "provider", "ia":
				cfg.provider = o.arg
			case "latency":
				cfg.latency = true
			case "bandwidth":
				cfg.bandwidth = true
			case "diagnose":
				cfg.diagnose = true
			case "help":
				usage(stdout)
				extraUsage(stdout)
				return cfg, 0, true
			}
			continue
		}
		switch o.c {
		case 'a':
			cfg.addr, ret = getAddr(o.arg, cfg.addr, lookup, stdout)
		case 'I':
			cfg.src, ret = getAddr(o.arg, cfg.src, lookup, stdout)
		case 'P':
			cfg.persistent = true
		case 'p':
			cfg.port = uint16(atoi(o.arg))
		case 's':
			cfg.server = 1
		case 'c':
			cfg.server = 0
		case 'S':
			cfg.size = atoi(o.arg)
			if cfg.size < minSize || cfg.size > bufSize-1 {
				fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", cfg.size, minSize, bufSize)
				ret = exitUsage
			}
		case 'C':
			cfg.count = atoi(o.arg)
			if cfg.count < 0 {
				fmt.Fprintf(stderr, "Invalid count %d\n", cfg.count)
				ret = exitUsage
			}
		case 'v':
			cfg.verbose++
		case 'V':
			cfg.validate++
		case 'd':
			cfg.debug++
		case 'q':
			cfg.selfQP = true
		default: // '?', and 't', which getopt accepts but rping does not handle
			usage(stdout)
			return cfg, exitUsage, true
		}
	}
	if ret != 0 {
		return cfg, ret, true
	}
	if cfg.server == -1 {
		usage(stdout)
		return cfg, exitUsage, true
	}
	if cfg.provider == "" {
		cfg.provider = getenv(providerEnv)
	}
	if cfg.provider == "" {
		cfg.provider = defaultProvider
	}
	return cfg, 0, false
}

// atoi is C's atoi: leading white space, an optional sign, then digits;
// anything else ends the number, and no digits give 0. Like glibc (strtol
// cast to int) an out-of-range value saturates to LONG_MIN/LONG_MAX and is
// then truncated to 32 bits.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0
	}
	v, err := strconv.ParseInt(s[:end], 10, 64)
	if neg {
		v = -v
		if err != nil {
			v = -1 << 63
		}
	} else if err != nil {
		v = 1<<63 - 1
	}
	return int(int32(v))
}

// getaddrinfo error codes (glibc's EAI_*), which rping returns as its
// exit value when -a or -I does not resolve.
const (
	eaiNoName = -2
	eaiAgain  = -3
	eaiFail   = -4
)

var gaiStrings = map[int]string{
	eaiNoName: "Name or service not known",
	eaiAgain:  "Temporary failure in name resolution",
	eaiFail:   "Non-recoverable failure in name resolution",
}

// getAddr is rping's get_addr: resolve s to its first address, or print
// the getaddrinfo failure on stdout and return the EAI code, leaving old
// in place.
func getAddr(s string, old netip.Addr, lookup resolver, stdout io.Writer) (netip.Addr, int) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), 0
	}
	code := eaiNoName
	if s != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		addrs, err := lookup(ctx, s)
		cancel()
		var dnsErr *net.DNSError
		switch {
		case err == nil && len(addrs) > 0:
			return addrs[0].Unmap(), 0
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		case errors.As(err, &dnsErr) && (dnsErr.IsTemporary || dnsErr.IsTimeout):
			code = eaiAgain
		case err != nil:
			code = eaiFail
		}
	}
	fmt.Fprintf(stdout, "getaddrinfo failed (%s) - invalid hostname or IP address\n", gaiStrings[code])
	return old, code
}
