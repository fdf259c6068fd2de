package dat

import "time"

// PollMode says how a goroutine waiting for completions (EVD.Wait, and
// rdmanet's blocked Read and Write) waits once it has found none.
type PollMode uint8

// Poll modes.
const (
	// PollAdaptive polls the completion queue for the policy's spin time,
	// yielding the processor between polls, then sleeps until the provider
	// signals a completion. A spin that runs out without its event makes
	// the next waits sleep at once (1, 2, 4, ... up to 64 of them), so a
	// spin that does not pay, because the completion comes from
	// somewhere the spin keeps from running, costs little; where the
	// provider advises a spin, a wait that ends within four spin times
	// of its start makes the next one spin again, so that both ends of a
	// request/response exchange do not settle into sleeping. An EVD that
	// has not spun yet (a new connection's) sleeps at once until two of
	// its waits in a row ended within four spin times, and then follows a
	// back-off of the IA's, which the first spin of each EVD feeds: where
	// new connections' first spins run out, the next ones' sleep at once. An EVD without DTO completions (connection requests and
	// events, software events) sleeps at once: its events come from
	// goroutines, not from a device or a CQ a spin can progress. It is
	// the default.
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

// How long a PollAdaptive waiter spins by default is the provider's
// advice (driver.IAAttr.Spin), because what spinning buys depends on where
// completions come from:
//
//   - From a device (verbs): polling the CQ sees a completion the moment
//     the device writes it, and a sleeping waiter pays a completion-channel
//     event and a wake-up instead. A spin that covers a small-message round
//     trip saves that on every message of a request/response exchange.
//     rsockets' polling_time and cubefs' adaptive poller spin for tens of
//     microseconds for the same reason.
//   - From goroutines of this process (the pure-Go iwarp provider, whose
//     receive goroutine is woken by the network poller): a spinning waiter
//     that only polled would hold a processor, and the Go scheduler polls
//     the network only when it runs out of runnable work, so the spin
//     would delay the very completion it waits for (measured in process
//     on 2 cores, BenchmarkPingPong, 64 B: 55-68 µs per round trip
//     spinning 50 µs, 24 µs sleeping at once). So such a provider's CQ
//     does the work itself between the spin's polls
//     (driver.CQProgresser: iwarp reads the connection's socket, without
//     waiting), and then a spin pays as on a device: while the peer
//     answers within it, neither end sleeps and no message needs a
//     wake-up. The iwarp provider advises 100 µs (none when the process
//     runs goroutines on one processor, where a spin keeps everything
//     else from the network poller).

// PollPolicy configures how waiters wait. The zero value is PollAdaptive
// with the provider's spin.
type PollPolicy struct {
	Mode PollMode
	// Spin is PollAdaptive's spin time; zero means the provider's advice
	// (IAAttr.Spin in dat_ia_query terms, driver.IAAttr.Spin).
	Spin time.Duration
}

// spin is how long a PollAdaptive waiter spins given the provider's
// advice.
func (p PollPolicy) spin(advice time.Duration) time.Duration {
	if p.Spin > 0 {
		return p.Spin
	}
	return advice
}
