package iwarp

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rdmanet/rdmanet/dat/internal/provkit"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Defaults of the Open options (see the package documentation).
const (
	// DefaultBacklog is the listener backlog used when ListenConfig.Backlog
	// is zero: as deep as the kernel's accept queue on current Linux
	// (net.core.somaxconn), so that a burst of dials the kernel accepted
	// is not refused one layer up.
	DefaultBacklog = 4096
	// DefaultMaxHandshakes bounds the TCP connections per listener that
	// are still in admission (their MPA Request not read yet). When the
	// table is full the oldest of them is reset to make room. A flood
	// of more connections than the table holds, reopened as fast as they
	// are dropped, keeps the kernel's accept queue full and delays real
	// dials; one it holds does not. 16384 holds a flood of 10,000 for
	// about 7 KB each (a goroutine, a timer, a socket) while it lasts,
	// nothing otherwise; if the process runs out of file descriptors
	// first, the oldest connection in admission gives up its own.
	DefaultMaxHandshakes = 16384
	// DefaultRequestTimeout is how long a responder waits for the MPA
	// Request after it took the TCP connection. A real initiator sends
	// it with the connection's first segment; a peer still silent after
	// a second is not one, and the sooner its slot is free the less a
	// flood of them can hold (siw waits 5 s, wire.SiwMPARequestTimeout).
	DefaultRequestTimeout = time.Second
	// DefaultFallbackWait is how long a listener with
	// ListenConfig.Fallback waits for a new connection's first byte
	// before it hands the connection to Fallback as a client of a
	// protocol in which the server speaks first. It is far above the
	// delay of an MPA initiator's Request and short enough for a client
	// waiting for a greeting.
	DefaultFallbackWait = 200 * time.Millisecond
	// DefaultReplyTimeout is how long an initiator waits for the MPA Reply
	// (siw MPAREQ_TIMEOUT).
	DefaultReplyTimeout = wire.SiwMPAReplyTimeout
	// MinMULPDU is the smallest mulpdu option accepted.
	MinMULPDU = 64
	// DefaultCloseTimeout is how long a graceful Disconnect waits for the
	// peer to close its half of the stream.
	DefaultCloseTimeout = 2 * time.Second
)

// options is the parsed form of the Open arguments. Every IA object copies
// what it needs at creation, so options never change after Open.
type options struct {
	ip             net.IP // nil: unspecified
	requireCRC     bool
	mpaRev         int
	backlog        int
	maxHandshakes  int
	requestTimeout time.Duration
	fallbackWait   time.Duration
	replyTimeout   time.Duration
	closeTimeout   time.Duration
	// mulpdu is the largest ULPDU_Length the data path sends; 0: derive
	// it from the connection's TCP MSS (autoMULPDU).
	mulpdu int
	// sameSRQPD makes the IA report no srq_ep_pz_difference_support, so
	// consumers (and dat's tests) can exercise that branch of the DAT rules.
	sameSRQPD bool
}

func defaultOptions() options {
	return options{
		mpaRev:         2,
		backlog:        DefaultBacklog,
		maxHandshakes:  DefaultMaxHandshakes,
		requestTimeout: DefaultRequestTimeout,
		fallbackWait:   DefaultFallbackWait,
		replyTimeout:   DefaultReplyTimeout,
		closeTimeout:   DefaultCloseTimeout,
	}
}

// parseOptions turns Open's args into options. The first argument is the
// IA address unless it looks like an option.
func parseOptions(args []string) (options, error) {
	o := defaultOptions()
	if len(args) > 0 && !strings.Contains(args[0], "=") {
		ip, err := parseLocalIP(args[0])
		if err != nil {
			return o, err
		}
		o.ip = ip
		args = args[1:]
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return o, fmt.Errorf("iwarp: option %q: want key=value", a)
		}
		var err error
		switch k {
		case "crc":
			o.requireCRC, err = strconv.ParseBool(v)
		case "mpa_rev":
			o.mpaRev, err = strconv.Atoi(v)
			if err == nil && o.mpaRev != 1 && o.mpaRev != 2 {
				err = fmt.Errorf("revision %d not supported (1 or 2)", o.mpaRev)
			}
		case "backlog":
			o.backlog, err = parsePositive(v)
		case "max_handshakes":
			o.maxHandshakes, err = parsePositive(v)
		case "req_timeout":
			o.requestTimeout, err = parseTimeout(v)
		case "fallback_wait":
			o.fallbackWait, err = parseTimeout(v)
		case "rep_timeout":
			o.replyTimeout, err = parseTimeout(v)
		case "close_timeout":
			o.closeTimeout, err = parseTimeout(v)
		case "mulpdu":
			if v != "auto" {
				o.mulpdu, err = strconv.Atoi(v)
				if err == nil && (o.mulpdu < MinMULPDU || o.mulpdu > wire.MaxULPDULength) {
					err = fmt.Errorf("%d outside %d..%d", o.mulpdu, MinMULPDU, wire.MaxULPDULength)
				}
			}
		case "srq_pz_diff":
			var diff bool
			diff, err = strconv.ParseBool(v)
			o.sameSRQPD = !diff
		default:
			err = fmt.Errorf("unknown option")
		}
		if err != nil {
			return o, fmt.Errorf("iwarp: option %q: %w", a, err)
		}
	}
	return o, nil
}

func parsePositive(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err == nil && n <= 0 {
		err = fmt.Errorf("must be positive")
	}
	return n, err
}

func parseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("must be positive")
	}
	return d, err
}

// parseLocalIP resolves the IA address argument: an IP literal, an
// interface name (dat.conf entries such as "eth2 0" name a netdev), or a
// spelling of "unspecified" (nil).
func parseLocalIP(s string) (net.IP, error) {
	if s == "" || s == "*" {
		return nil, nil
	}
	ip, err := provkit.InterfaceIP(s)
	if err != nil {
		return nil, fmt.Errorf("iwarp: %w", err)
	}
	if ip.IsUnspecified() {
		return nil, nil // listen everywhere, dial from anywhere
	}
	return ip, nil
}
