package dat

import "time"

// PollMode says how a goroutine waiting for completions (EVD.Wait, and
// rdmanet's blocked Read and Write) waits once it has found none.
type PollMode uint8

// Poll modes.
const (
	// PollAdaptive polls the completion queue for the policy's spin time,
	// yielding the processor between polls, then sleeps until the provider
	// signals a completion. It is the default.
	PollAdaptive PollMode = iota
	// PollBusy never sleeps: the waiter polls until its event comes or
	// its time runs out. Lowest latency, one busy core per waiter.
	PollBusy
	// PollEvent never spins: the waiter sleeps at once. Least CPU, one
	// wake-up per completion.
	PollEvent
)

func (m PollMode) String() string {
	switch m {
	case PollAdaptive:
		return "adaptive"
	case PollBusy:
		return "busy"
	case PollEvent:
		return "event"
	}
	return "PollMode(?)"
}

// DefaultSpin is how long a PollAdaptive waiter polls before it sleeps.
//
// Why this value: a wait that ends within the spin costs no wake-up, and
// one that does not wastes the spin. The spin must cover a small-message
// round trip on the fast paths the providers have (loopback iWARP between
// two processes: 7-10 µs at the minimum, 30 µs at the median on a 2-core
// machine) but stay far below the cost of a wake-up on slow ones, where
// spinning cannot help. rsockets' polling_time and cubefs' adaptive poller
// spin for tens of microseconds for the same reason.
const DefaultSpin = 50 * time.Microsecond

// PollPolicy configures how waiters wait. The zero value is PollAdaptive
// with DefaultSpin.
type PollPolicy struct {
	Mode PollMode
	// Spin is PollAdaptive's spin time; zero means DefaultSpin.
	Spin time.Duration
}

func (p PollPolicy) spin() time.Duration {
	if p.Spin > 0 {
		return p.Spin
	}
	return DefaultSpin
}
