package iwarp

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
)

// Software limits reported by IA.Attr. Nothing in a pure-Go stack is a
// hardware resource; the values follow siw where siw has one, so that
// consumers tuned for siw behave the same here.
const (
	maxQPs         = 1 << 16
	maxWRPerQP     = 1 << 15 // siw SIW_MAX_QP_WR
	maxSGE         = 6       // siw SIW_MAX_SGE
	maxMessageSize = 1 << 31 // DDP MO is 32 bits; keep well inside it
	maxMRSize      = 1 << 40
	maxSRQWR       = 1 << 15
)

// IA is an open iWARP interface adapter: a local address plus the objects
// created on it. It implements driver.IA.
type IA struct {
	opts  options
	local *net.TCPAddr // port 0; IP unspecified when not bound
	stags *stagTable

	mu        sync.Mutex
	closed    bool
	qps       provkit.Set[*QP]
	listeners provkit.Set[*Listener]

	// conns counts the receive goroutines of connections, so that Close
	// returns only when none is left.
	conns sync.WaitGroup
	// sweep returns parked receive roles to their receive goroutines
	// (rxrole.go); its goroutine counts in conns.
	sweep rxSweep
}

var (
	_ driver.IA         = (*IA)(nil)
	_ driver.SRQCreator = (*IA)(nil)
)

// The provider registers itself, as database/sql drivers do: package dat
// imports no provider, a program picks the ones it links in.
func init() { driver.Register("iwarp", Driver{}) }

func newIA(o options) *IA {
	local := &net.TCPAddr{IP: o.ip}
	if o.ip == nil {
		local.IP = net.IPv4zero
	}
	return &IA{
		opts:  o,
		local: local,
		stags: newSTagTable(maxMRs),
	}
}

// Attr reports the adapter's limits and address. LocalAddr is a
// *net.TCPAddr with port 0, whose IP is unspecified (0.0.0.0) when the IA
// is not bound to an address.
func (ia *IA) Attr() driver.IAAttr {
	name := "iwarp"
	if ia.opts.ip != nil {
		name = "iwarp:" + ia.opts.ip.String()
	}
	return driver.IAAttr{
		Name:            name,
		Transport:       driver.TransportIWARP,
		LocalAddr:       &net.TCPAddr{IP: append(net.IP(nil), ia.local.IP...)},
		MaxQPs:          maxQPs,
		MaxWRPerQP:      maxWRPerQP,
		MaxSGE:          maxSGE,
		MaxReadSGE:      1, // an RDMA Read lands in one buffer (siw SIW_MAX_SGE_RD)
		MaxMessageSize:  maxMessageSize,
		MaxRDMASize:     maxMessageSize,
		MaxIRD:          MaxIRD,
		MaxORD:          MaxORD,
		MaxPrivateData:  MaxPrivateData,
		MaxSRQWR:        maxSRQWR,
		SRQPDDifference: !ia.opts.sameSRQPD, // receives are plain Go memory; any PD will do
		SRQQPLimit:      true,               // see receiver.takeRecv
		MaxMR:           maxMRs,
		MaxMRSize:       maxMRSize,
		Spin:            spinAdvice(),
	}
}

// spinFor is the spin the IA advises waiters (IAAttr.Spin). A spinning
// waiter reads its connection's socket itself between polls
// (CQ.Progress), so while the peer answers within the spin, neither end
// sleeps: a Send is one write that wakes nobody and one read, where a
// sleeping waiter costs a wake-up through the network poller on each
// side. Measured in process on 2 cores (rdmanet's BenchmarkPingPong and
// BenchmarkDATPingPong, 64 B): a round trip takes about 11-16 µs
// spinning 100 µs against 16-18 µs sleeping at once (loopback TCP:
// 14 µs); the spin must cover a peer that was asleep and has to be woken
// (20-30 µs here), or it fails and both ends fall back to sleeping. A
// spin that does not pay makes package dat sleep at once for the next
// waits (PollAdaptive).
const spinFor = 100 * time.Microsecond

// spinAdvice is spinFor, unless the process runs goroutines on one
// processor only: a spinning waiter then keeps every other goroutine
// from the network poller (the Go scheduler polls it only when it runs
// out of work), so a peer in the same process, or any other connection,
// waits for the spin to end.
func spinAdvice() time.Duration {
	if runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	return spinFor
}

// AllocPD allocates a protection domain.
func (ia *IA) AllocPD() (driver.PD, error) {
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return nil, errIAClosed
	}
	return &PD{ia: ia, mrs: make(map[uint32]*MR)}, nil
}

// CreateCQ creates a completion queue.
func (ia *IA) CreateCQ(cfg driver.CQConfig) (driver.CQ, error) {
	if cfg.Size < 0 {
		return nil, fmt.Errorf("iwarp: create CQ: size %d: %w", cfg.Size, driver.ErrResources)
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return nil, errIAClosed
	}
	return newCQ(cfg.Size), nil
}

// CreateQP creates an unconnected QP. Its work requests complete on
// cfg.SendCQ and cfg.RecvCQ, which must be CQs of this provider.
func (ia *IA) CreateQP(cfg driver.QPConfig) (driver.QP, error) {
	if err := ia.checkQPConfig(cfg); err != nil {
		return nil, err
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return nil, errIAClosed
	}
	if n := ia.qps.Len(); n >= maxQPs {
		return nil, fmt.Errorf("iwarp: create QP: %d QPs exist: %w", n, driver.ErrResources)
	}
	q := newQP(ia, cfg)
	ia.qps.Add(q) // cannot fail: Close takes ia.mu before closing the set
	return q, nil
}

// checkQPConfig validates what package dat cannot know: the objects belong
// to this IA and the sizes are within this provider's limits.
func (ia *IA) checkQPConfig(cfg driver.QPConfig) error {
	if cfg.PD != nil {
		pd, ok := cfg.PD.(*PD)
		if !ok || pd.ia != ia {
			return fmt.Errorf("iwarp: QP config: PD %T does not belong to this IA: %w", cfg.PD, driver.ErrNotSupported)
		}
	}
	for _, cq := range []driver.CQ{cfg.SendCQ, cfg.RecvCQ} {
		if _, ok := cq.(*CQ); cq != nil && !ok {
			return fmt.Errorf("iwarp: QP config: CQ %T is not of this provider: %w", cq, driver.ErrNotSupported)
		}
	}
	if cfg.SRQ != nil {
		srq, ok := cfg.SRQ.(*SRQ)
		if !ok || srq.ia != ia {
			return fmt.Errorf("iwarp: QP config: SRQ %T does not belong to this IA: %w", cfg.SRQ, driver.ErrNotSupported)
		}
	}
	switch {
	case cfg.IRD < 0 || cfg.IRD > MaxIRD, cfg.ORD < 0 || cfg.ORD > MaxORD:
		return fmt.Errorf("iwarp: QP config: IRD %d / ORD %d outside 0..%d: %w", cfg.IRD, cfg.ORD, MaxIRD, driver.ErrResources)
	case cfg.MaxSendWR < 0 || cfg.MaxSendWR > maxWRPerQP, cfg.MaxRecvWR < 0 || cfg.MaxRecvWR > maxWRPerQP:
		return fmt.Errorf("iwarp: QP config: %d send / %d receive WRs exceed %d: %w", cfg.MaxSendWR, cfg.MaxRecvWR, maxWRPerQP, driver.ErrResources)
	case cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > maxSGE, cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > maxSGE:
		return fmt.Errorf("iwarp: QP config: SGE counts %d/%d exceed %d: %w", cfg.MaxSendSGE, cfg.MaxRecvSGE, maxSGE, driver.ErrResources)
	case cfg.MaxMessageSize > maxMessageSize, cfg.MaxRDMASize > maxMessageSize:
		return fmt.Errorf("iwarp: QP config: message size %d / RDMA size %d exceed %d: %w", cfg.MaxMessageSize, cfg.MaxRDMASize, maxMessageSize, driver.ErrResources)
	}
	return nil
}

// CreateSRQ creates a shared receive queue in pd.
func (ia *IA) CreateSRQ(pd driver.PD, cfg driver.SRQConfig) (driver.SRQ, error) {
	p, ok := pd.(*PD)
	if !ok || p.ia != ia {
		return nil, fmt.Errorf("iwarp: create SRQ: PD %T does not belong to this IA: %w", pd, driver.ErrNotSupported)
	}
	if cfg.MaxRecvWR <= 0 || cfg.MaxRecvWR > maxSRQWR || cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > maxSGE || cfg.LowWatermark < 0 {
		return nil, fmt.Errorf("iwarp: create SRQ: %d WRs (max %d), %d SGEs (max %d), watermark %d: %w",
			cfg.MaxRecvWR, maxSRQWR, cfg.MaxRecvSGE, maxSGE, cfg.LowWatermark, driver.ErrResources)
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.closed {
		return nil, errIAClosed
	}
	return newSRQ(ia, p, cfg), nil
}

// Listen starts a listener; see Listener.
func (ia *IA) Listen(cfg driver.ListenConfig) (driver.Listener, error) {
	ia.mu.Lock()
	closed := ia.closed
	ia.mu.Unlock()
	if closed {
		return nil, errIAClosed
	}
	l, err := listen(ia, cfg)
	if err != nil {
		return nil, err
	}
	if !ia.listeners.Add(l) {
		l.Close()
		return nil, errIAClosed
	}
	return l, nil
}

// Close releases the IA. Package dat closes every object first; whatever
// is still open (listeners, QPs) is closed here, and Close returns once
// every connection's goroutine has ended, so that no socket or goroutine
// outlives the IA. (It must therefore not be called from OnDisconnect,
// which runs on such a goroutine.)
func (ia *IA) Close() error {
	ia.mu.Lock()
	if ia.closed {
		ia.mu.Unlock()
		return nil
	}
	ia.closed = true
	ia.mu.Unlock()
	ia.listeners.CloseAll()
	ia.qps.CloseAll()
	ia.stopSweep()
	ia.conns.Wait()
	return nil
}

func (ia *IA) forgetQP(q *QP) { ia.qps.Remove(q) }

func (ia *IA) forgetListener(l *Listener) { ia.listeners.Remove(l) }

// errIAClosed is returned by every creation call after Close.
var errIAClosed = fmt.Errorf("iwarp: IA closed: %w", net.ErrClosed)
