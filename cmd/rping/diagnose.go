package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/rdmanet/rdmanet/dat"
)

// failure is a connection attempt that went wrong: the lines rdma-core's
// rping prints for it (on stderr, before exit(-1)) and the one-line
// diagnosis --diagnose adds.
type failure struct {
	lines     []string
	category  string // unreachable, rejected, timed out, no RDMA device
	diagnosis string
}

// Linux errno values rdma_cm reports as negative event status.
const (
	ibRejInvalidServiceID = 8  // IB CM REJ reason: nobody listens on the service ID
	ibRejConsumerDefined  = 28 // IB CM REJ reason: rdma_reject by the peer
)

// connectFailure maps a failed DAT connection event to rping's output. The
// lines are what rdma-core's rping prints over the kernel's providers for
// the same cause: over siw (iWARP) a refused or timed-out TCP connect fails
// rdma_connect itself, a missing route fails rdma_resolve_addr, and MPA
// level failures arrive as CM events; over rxe/IB every failure is a CM
// event.
func connectFailure(ev dat.Event, iwarp bool, addr netip.Addr, port uint16) failure {
	err := ev.Conn.Err
	en := errnoOf(err)
	var hasErrno bool
	var sysErr syscall.Errno
	hasErrno = errors.As(err, &sysErr)
	dst := netip.AddrPortFrom(addr, port).String()
	cma := func(name string, status int) string {
		return fmt.Sprintf("cma event %s, error %d", name, status)
	}
	f := failure{}
	switch ev.Number {
	case dat.ConnectionEventPeerRejected:
		f.category = "rejected"
		f.diagnosis = "the server at " + dst + " refused the connection (consumer reject)"
		if iwarp {
			f.lines = []string{cma("RDMA_CM_EVENT_REJECTED", -int(syscall.ECONNREFUSED))}
		} else {
			f.lines = []string{cma("RDMA_CM_EVENT_REJECTED", ibRejConsumerDefined)}
		}
	case dat.ConnectionEventNonPeerRejected:
		f.category = "rejected"
		switch {
		case !iwarp:
			f.diagnosis = "nothing listens for RDMA connections at " + dst + " (is the rping server running, on this port?)"
			f.lines = []string{cma("RDMA_CM_EVENT_REJECTED", ibRejInvalidServiceID)}
		case hasErrno && (sysErr == syscall.ECONNREFUSED || sysErr == syscall.ECONNRESET):
			f.diagnosis = "nothing listens at " + dst + ": TCP connection refused (is the rping server running, on this port?)"
			f.lines = []string{"rdma_connect: " + strerror(sysErr), "connect error -1"}
		default:
			f.diagnosis = "the TCP connection to " + dst + " opened but the MPA exchange failed (an iWARP server? " + short(err) + ")"
			f.lines = []string{cma("RDMA_CM_EVENT_CONNECT_ERROR", -int(syscall.ECONNRESET))}
		}
	case dat.ConnectionEventUnreachable:
		switch {
		case hasErrno && (sysErr == syscall.ENETUNREACH || sysErr == syscall.ENETDOWN):
			f.category = "unreachable"
			f.diagnosis = "no route to " + addr.String() + " (check the address and the routing table)"
			f.lines = []string{"rdma_resolve_addr: " + strerror(sysErr)}
		case hasErrno && (sysErr == syscall.EHOSTUNREACH || sysErr == syscall.EHOSTDOWN):
			f.category = "unreachable"
			f.diagnosis = addr.String() + " does not answer on its network (host down or wrong address)"
			f.lines = []string{cma("RDMA_CM_EVENT_ADDR_ERROR", -int(sysErr))}
		case hasErrno && sysErr == syscall.ETIMEDOUT:
			f.category = "timed out"
			f.diagnosis = addr.String() + " did not answer the TCP handshake (host down, or a firewall drops it)"
			if iwarp {
				f.lines = []string{"rdma_connect: " + strerror(sysErr), "connect error -1"}
			} else {
				f.lines = []string{cma("RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT))}
			}
		default:
			f.category = "timed out"
			f.diagnosis = "connected to " + dst + " but no connection reply came (an RDMA server? " + short(err) + ")"
			f.lines = []string{cma("RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT))}
		}
	case dat.ConnectionEventTimedOut:
		f.category = "timed out"
		f.diagnosis = "no answer from " + dst + " in time"
		f.lines = []string{cma("RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT))}
	case dat.ConnectionEventAcceptCompletionErr:
		f.category = "rejected"
		f.diagnosis = "the client's connection failed while it was being accepted (" + short(err) + ")"
		f.lines = []string{cma("RDMA_CM_EVENT_CONNECT_ERROR", -int(en))}
	default:
		f.category = "rejected"
		f.diagnosis = ev.Number.String()
		f.lines = []string{cma("RDMA_CM_EVENT_CONNECT_ERROR", -int(en))}
	}
	return f
}

// noDevice is the failure to open the IA.
func noDevice(name string, err error) failure {
	return failure{
		lines:     []string{"No RDMA devices were detected"},
		category:  "no RDMA device",
		diagnosis: fmt.Sprintf("cannot open the DAT IA %q: %s", name, short(err)),
	}
}

// diagnosisLine is what --diagnose prints.
func (f failure) diagnosisLine() string {
	return "rping: diagnosis: " + f.category + ": " + f.diagnosis
}

// short is err's text without the wrapping of the DAT layers, kept to one
// line.
func short(err error) string {
	if err == nil {
		return "no error detail"
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
