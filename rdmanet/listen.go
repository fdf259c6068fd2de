package rdmanet

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/rdmanet/internal/handshake"
)

// ListenConfig holds options for listening. The zero value listens with
// the defaults.
type ListenConfig struct {
	// IA names the DAT interface adapter, as Dialer.IA. With the default
	// ("iwarp") and a specific listen address, the IA is opened bound to
	// that address.
	IA string
	// SharePort listens with SO_REUSEPORT (dat PSPOptions.SharePort), so
	// several processes can serve one port and the kernel spreads
	// connections over them.
	SharePort bool
	// Backlog bounds connection requests not yet answered and connections
	// established but not yet returned by Accept (0: 4096, as the
	// kernel's somaxconn default).
	Backlog int
	// BufferSize fixes each connection's ring and staging size; 0 makes
	// them adaptive (see Dialer.BufferSize).
	BufferSize int
	// Poll says how calls blocked on an accepted connection wait for
	// completions, as Dialer.Poll does.
	Poll dat.PollPolicy
	// NoWriteImm keeps every data announcement of accepted connections in
	// a control Send, as Dialer.NoWriteImm does.
	NoWriteImm bool
	// FallbackTCP lets the port serve plain TCP clients as well: the
	// provider tells a connection request of its transport from anything
	// else by the first bytes (see dat PSPOptions.Fallback; the iwarp
	// provider also takes a client that stays silent for a moment to be a
	// TCP client, so a protocol whose server speaks first still works),
	// and Accept returns a TCP client as a *FallbackConn with Reason
	// ReasonPeerIsTCP, every byte it sent intact. TCP clients share the
	// Backlog with rdmanet connections; one that finds it full is closed.
	// Providers that do not set connections up over TCP (verbs) ignore it.
	FallbackTCP bool
	// Logger receives the listener's and its connections' life-cycle
	// records: accepted and closed at Debug; refused handshakes and
	// failed connections at Info, with the reason. Nothing is logged per
	// Read or Write. Nil means slog.Default() at the time of logging.
	Logger *slog.Logger
	// Control, if not nil, is called on the listening socket after it is
	// created and before it is bound, with the network ("tcp4" or "tcp6")
	// and the listen address, as net.ListenConfig.Control; an error it
	// returns fails Listen. Providers that do not listen on a socket of
	// their own (verbs) ignore it.
	Control func(network, address string, c syscall.RawConn) error
	// KeepAlive and KeepAliveConfig are the accepted connections'
	// dead-peer detection, as Dialer.KeepAlive and
	// Dialer.KeepAliveConfig are a dialed one's (zero: probes after 15 s
	// of silence; negative KeepAlive: none), and as net.ListenConfig's
	// are for TCP. A TCP client accepted with FallbackTCP gets them too.
	KeepAlive       time.Duration
	KeepAliveConfig net.KeepAliveConfig
}

// defaultBacklog is the kernel's somaxconn default: a burst of dials as
// large as TCP would queue is queued here too, not refused.
const defaultBacklog = 4096

// maxAnswering bounds the connection requests a Listener answers at once.
const maxAnswering = 8

// Listen listens on address ("host:port"; port 0 picks one) for network
// "rdma", "rdma4" or "rdma6" with the default ListenConfig.
func Listen(network, address string) (net.Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listener accepts rdmanet connections. It implements net.Listener.
//
// A background goroutine takes connection requests off a DAT PSP and
// answers them: it checks the client's Hello (a bad one is rejected with a
// reason), builds the connection and accepts with its own Hello. Building
// a connection registers memory, which a real adapter makes slow, so a
// burst of dials is answered in parallel, each request in a goroutine of
// its own, rather than queueing behind one another until the dialers give
// up; at most maxAnswering at a time, because adapters run out of
// resources when asked for many queues at once (soft-iWARP fails
// ibv_create_cq and rdma_create_qp with ~100 in flight). A request with no
// other waiting behind it is answered by the background goroutine itself:
// starting a goroutine for it, and waking a processor to run it, cost a
// lone dial more than the answer (see serve). Connections that come up
// wait, at most Backlog of them, for Accept.
type Listener struct {
	id        uint64 // process-wide number, shared with Conns (see Snapshot)
	born      time.Time
	log       *slog.Logger
	ia        *sharedIA
	cfg       connConfig
	backlog   int
	psp       *dat.PSP
	evd       *dat.EVD
	addr      *Addr
	stop      context.CancelFunc
	served    chan struct{}  // closed when the serve goroutine exits
	answers   sync.WaitGroup // answers in progress
	answering chan struct{}  // cap maxAnswering: one token per answer in progress

	mu      sync.Mutex
	closed  bool
	ready   []net.Conn         // *Conn established, or *FallbackConn, waiting for Accept
	pending map[*Conn]struct{} // accepted at the DAT level, not yet established
	// building counts requests being answered that will join pending, so
	// parallel answers cannot overshoot the backlog.
	building int
	wake     chan struct{} // cap 1
	done     chan struct{} // closed by Close
	// ctx is done once Close began: handshakes in progress give up.
	ctx    context.Context
	cancel context.CancelFunc

	// For the listing (Snapshot): connections Accept returned, and
	// requests refused (a bad Hello, a full backlog, no resources).
	accepted, refused atomic.Uint64
}

// Listen listens on address; the context bounds setting up the listener
// only, as with net.ListenConfig.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	aps, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, opError("listen", nil, nil, err)
	}
	ap := aps[0]
	la := &Addr{IP: ap.Addr(), Port: ap.Port()}
	if err := ctx.Err(); err != nil {
		return nil, opError("listen", nil, la, contextError(err))
	}
	s, err := acquireIA(ctx, iaName(lc.IA, ap.Addr()))
	if err != nil {
		return nil, opError("listen", nil, la, err)
	}
	backlog := lc.Backlog
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	cfg := newConnConfig(lc.BufferSize, lc.Poll)
	cfg.noImm = lc.NoWriteImm
	l := &Listener{id: nextID.Add(1), born: time.Now(), log: lc.Logger, ia: s, cfg: cfg, backlog: backlog,
		pending: map[*Conn]struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{}), served: make(chan struct{}),
		answering: make(chan struct{}, maxAnswering)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	fail := func(err error) (net.Listener, error) {
		l.cancel()
		if l.psp != nil {
			l.psp.Free()
		}
		if l.evd != nil {
			l.evd.Free()
		}
		s.release()
		return nil, opError("listen", nil, la, err)
	}
	// The EVD holds requests the serve loop has not taken yet; the PSP's
	// backlog bounds those below the queue length.
	if l.evd, err = s.ia.CreateEVD(backlog+8, dat.EVDCR); err != nil {
		return fail(err)
	}
	opts := lc.pspOptions()
	opts.Backlog = backlog
	if lc.FallbackTCP {
		opts.Fallback = l.fallback
	}
	if ap.Port() == 0 {
		l.psp, err = s.ia.CreatePSPAny(l.evd, dat.PSPConsumer, opts)
	} else {
		l.psp, err = s.ia.CreatePSP(dat.ConnQual(ap.Port()), l.evd, dat.PSPConsumer, opts)
	}
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(contextError(err))
	}
	l.addr = &Addr{IP: ap.Addr(), Port: uint16(l.psp.Qual())}
	if a := addrFrom(l.psp.Addr()); a != nil && !a.IP.IsUnspecified() {
		l.addr.IP = a.IP
	}
	sctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	registry.addListener(l)
	go l.serve(sctx)
	l.logDebug("rdmanet: listening")
	return l, nil
}

// Addr returns the listening address (with the real port when 0 was
// asked for).
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept waits for the next connection; after Close it returns
// net.ErrClosed in a *net.OpError.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, opError("accept", nil, l.addr, net.ErrClosed)
		}
		if len(l.ready) > 0 {
			c := l.ready[0]
			l.ready[0] = nil
			l.ready = l.ready[1:]
			if c, ok := c.(*Conn); ok {
				c.listener = nil
			}
			l.mu.Unlock()
			l.accepted.Add(1)
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.done:
		}
	}
}

// Close stops listening. Accept returns net.ErrClosed; connections not yet
// returned by Accept are closed; accepted ones are not affected.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return opError("close", nil, l.addr, net.ErrClosed)
	}
	l.closed = true
	close(l.done)
	l.cancel()
	l.mu.Unlock()
	registry.removeListener(l)
	l.psp.Free()
	l.stop()
	<-l.served
	l.answers.Wait()
	// Requests reported but never taken: refuse them.
	for {
		ev, err := l.evd.Dequeue()
		if err != nil {
			break
		}
		if ev.Number == dat.ConnectionRequestEvent {
			ev.CR.CR.Reject(nil)
		}
	}
	l.mu.Lock()
	conns := l.ready
	l.ready = nil
	for c := range l.pending {
		conns = append(conns, net.Conn(c))
	}
	l.pending = nil
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	l.evd.Free()
	l.ia.release()
	l.logDebug("rdmanet: listener closed")
	return nil
}

// serve takes connection requests off the EVD until the listener closes.
// A request that others wait behind is answered in a goroutine of its
// own, so that a burst is answered in parallel; the last of them, or a
// lone one, here. A goroutine started for a lone dial would cost it more
// than the answer itself: the scheduler wakes another processor to run
// it, which on two shared cores measured 10% of a dial (BenchmarkDial).
// A request that arrives while one is answered here waits for that
// answer, then is taken with the others that came meanwhile.
func (l *Listener) serve(ctx context.Context) {
	defer close(l.served)
	for {
		ev, more, err := l.evd.WaitContext(ctx, 1)
		if err != nil {
			return
		}
		if ev.Number == dat.ConnectionRequestEvent {
			cr := ev.CR.CR
			select {
			case l.answering <- struct{}{}:
			case <-ctx.Done():
				cr.Reject(nil)
				return
			}
			l.answers.Add(1)
			if more == 0 {
				l.answer(cr)
			} else {
				go l.answer(cr)
			}
		}
	}
}

// answer answers cr holding an answering token, which it gives back.
func (l *Listener) answer(cr *dat.CR) {
	defer func() { <-l.answering; l.answers.Done() }()
	l.handle(cr)
}

// handle answers one connection request.
func (l *Listener) handle(cr *dat.CR) {
	p, err := cr.Query()
	if err != nil {
		cr.Reject(nil)
		return
	}
	h, err := handshake.ParseHello(p.PrivateData)
	if err != nil {
		l.refuse(p.RemoteAddr.String(), "bad handshake", err)
		cr.Reject(handshake.AppendReject(nil, handshake.RejectFor(err)))
		return
	}
	l.mu.Lock()
	full := l.closed || len(l.ready)+len(l.pending)+l.building >= l.backlog
	if !full {
		l.building++
	}
	l.mu.Unlock()
	if full {
		l.refuse(p.RemoteAddr.String(), "backlog full", nil)
		cr.Reject(handshake.AppendReject(nil, handshake.Reject{Reason: handshake.ReasonResources, Speaks: handshake.Version}))
		return
	}
	c, err := newConn(l.ia, l.cfg, l.log, nil)
	if err != nil {
		l.mu.Lock()
		l.building--
		l.mu.Unlock()
		l.refuse(p.RemoteAddr.String(), "no resources", err)
		cr.Reject(handshake.AppendReject(nil, handshake.Reject{Reason: handshake.ReasonResources, Speaks: handshake.Version}))
		return
	}
	c.setPeer(h)
	c.listener = l
	l.mu.Lock()
	l.building--
	if l.closed {
		l.mu.Unlock()
		cr.Reject(nil)
		c.destroy()
		c.releaseMemory()
		return
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	if err := cr.Accept(c.ep, c.hello()); err != nil {
		l.drop(c)
		go c.abandon()
		return
	}
	// With a provider whose accept does not wait for the peer (iwarp),
	// the outcome is on the EVD already: apply it here. Otherwise a
	// goroutine of its own waits for it, so that a peer that does not
	// answer holds no answering slot.
	c.pollQueued()
	select {
	case err := <-c.setup:
		if err != nil {
			go l.settled(c, err) // the teardown may wait for the provider
		}
	default:
		go l.watch(c)
	}
}

// watch drives a pending connection until its handshake ends.
func (l *Listener) watch(c *Conn) {
	l.settled(c, c.awaitSetup(l.ctx, func() error { return net.ErrClosed }))
}

// settled takes the outcome of a pending connection's handshake: it drops
// the connection if the handshake failed. (Success is handled by deliver,
// called while the ESTABLISHED event is applied.)
func (l *Listener) settled(c *Conn, err error) {
	if err == nil || errors.Is(err, net.ErrClosed) {
		return // delivered, or Close takes care of pending connections
	}
	logger(l.log).LogAttrs(context.Background(), slog.LevelInfo, "rdmanet: accept failed",
		slog.Uint64("listener", l.id), slog.String("local", l.addr.String()),
		slog.String("reason", failureReason(err)), slog.String("error", err.Error()))
	if l.drop(c) {
		c.abandon()
	}
}

// refuse counts and logs a connection request the listener turned down.
// Callers call it before they answer the peer, so that a dialer that has
// seen its refusal also sees it counted.
func (l *Listener) refuse(remote, reason string, err error) {
	l.refused.Add(1)
	a := []slog.Attr{slog.Uint64("listener", l.id), slog.String("local", l.addr.String()),
		slog.String("remote", remote), slog.String("reason", reason)}
	if err != nil {
		a = append(a, slog.String("error", err.Error()))
	}
	logger(l.log).LogAttrs(context.Background(), slog.LevelInfo, "rdmanet: handshake refused", a...)
}

func (l *Listener) logDebug(msg string) {
	logger(l.log).LogAttrs(context.Background(), slog.LevelDebug, msg,
		slog.Uint64("listener", l.id), slog.String("local", l.addr.String()), slog.String("ia", l.ia.name))
}

// fallback queues a plain TCP client for Accept; the provider calls it
// from a goroutine of its own. A listener that is closed or full closes
// the connection: the client sees it end, as with a TCP listener whose
// accept queue overflowed.
func (l *Listener) fallback(nc net.Conn) {
	fc := &FallbackConn{Conn: nc, Reason: ReasonPeerIsTCP}
	l.mu.Lock()
	full := l.closed || len(l.ready)+len(l.pending)+l.building >= l.backlog
	if !full {
		// Counted before Accept can return it, so that whoever got the
		// connection sees it counted.
		fallbacks[fc.Reason].Add(1)
		l.ready = append(l.ready, fc)
	}
	l.mu.Unlock()
	if full {
		l.refuse(nc.RemoteAddr().String(), "backlog full (TCP client)", nil)
		nc.Close()
		return
	}
	logFallback(l.log, fc, slog.Uint64("listener", l.id))
	wake(l.wake)
}

// deliver queues an established connection for Accept.
func (l *Listener) deliver(c *Conn) {
	l.mu.Lock()
	if _, ok := l.pending[c]; !ok || l.closed {
		l.mu.Unlock()
		return // Close owns it
	}
	delete(l.pending, c)
	l.ready = append(l.ready, c)
	l.mu.Unlock()
	c.logDebug("rdmanet: accepted", slog.Uint64("listener", l.id))
	wake(l.wake)
}

// drop removes c from the pending set; false if Close already took it.
func (l *Listener) drop(c *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[c]; !ok {
		return false
	}
	delete(l.pending, c)
	return true
}
