package iwarp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-reuseport"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/internal/provkit"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Listener accepts MPA connection requests on one TCP port. It implements
// driver.Listener.
//
// Every accepted TCP connection goes through admission: the accept loop
// (for a Request that has arrived whole) or a short-lived goroutine reads
// its first bytes and decides. A valid MPA Request becomes
// a *Request for Accept; anything else is reset, or with
// ListenConfig.Fallback handed to Fallback. At most max_handshakes
// connections are in admission at once, each for at most req_timeout;
// when a new one arrives with the table full, the oldest is reset. At most
// backlog requests may be parsed but not yet settled (accepted, rejected
// or aborted); while that many are, a new connection is reset before
// anything is read from it, which the initiator's kernel and this
// provider report as a refused connection (syscall.ECONNREFUSED). The
// package documentation gives the policy and its reasons.
type Listener struct {
	ia             *IA
	tl             net.Listener
	backlog        int
	maxHandshakes  int
	requestTimeout time.Duration
	fallbackWait   time.Duration
	fallback       func(net.Conn)
	// keepAlive is the accepted connections' keepalive (resolved), which
	// an MPA connection's TCP_USER_TIMEOUT follows (see setUserTimeout).
	// It is set on a connection when admission hands it on (Accept,
	// Fallback), not when the kernel hands it over (see listen), unless
	// the connection inherited it from the listening socket
	// (keepAliveInherited).
	keepAlive          net.KeepAliveConfig
	keepAliveInherited bool

	ready chan *Request // parsed, not yet returned by Accept; cap backlog
	// notify, once set (NotifyRequests), takes parsed requests instead
	// of ready; read under mu.
	notify func(driver.Request)
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
	resets *resetQueue // dropped connections, reset by a goroutine of their own

	mu        sync.Mutex
	closed    bool
	pending   int            // parsed and not yet settled
	admitting admissionQueue // connections in admission, oldest first
	counts    admissionCounts
}

// admission is a TCP connection whose first bytes are being read.
type admission struct {
	tc *net.TCPConn
	// whole is the length of the MPA Request the accept loop saw
	// arrive whole before the connection was admitted (0: not seen), so
	// that admission reads it in one read.
	whole      int
	queued     bool // in Listener.admitting (under Listener.mu)
	prev, next *admission
	// evicted (under Listener.mu) means the queue gave the connection up:
	// whoever removed it (a newer arrival, Close) resets it, and the
	// admission goroutine must not touch it any more.
	evicted bool
}

// admissionQueue lists the connections in admission in arrival order, so
// the oldest can be found and removed in constant time.
type admissionQueue struct {
	head, tail *admission
	n          int
}

func (q *admissionQueue) push(a *admission) {
	a.prev, a.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = a
	} else {
		q.head = a
	}
	q.tail = a
	q.n++
}

func (q *admissionQueue) remove(a *admission) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		q.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		q.tail = a.prev
	}
	a.prev, a.next = nil, nil
	q.n--
}

// admissionCounts counts what admission did, for tests and benchmarks.
type admissionCounts struct {
	refused  int // reset because the backlog was full
	evicted  int // reset to make room for a newer connection
	dropped  int // reset: silent past req_timeout, not MPA, bad Request
	fallback int // handed to ListenConfig.Fallback
}

var (
	_ driver.Listener        = (*Listener)(nil)
	_ driver.RequestNotifier = (*Listener)(nil)
)

func listen(ia *IA, cfg driver.ListenConfig) (*Listener, error) {
	backlog := cfg.Backlog
	if backlog <= 0 {
		backlog = ia.opts.backlog
	}
	host := ""
	if ia.opts.ip != nil {
		host = ia.opts.ip.String()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(cfg.Port)))
	// Go sets SO_REUSEADDR on listeners, like siw, and passes
	// net.core.somaxconn to listen(2) as the accept queue's depth. The
	// keepalive configuration is not left to package net, which would
	// set it (four system calls) on every connection accepted, most of
	// which a flood's: where accepted connections inherit it from the
	// listening socket (Linux) it is set there, once; elsewhere
	// admission sets it on those it hands on (keepAliveOn). A
	// connection in admission does not live long enough to need it.
	ka := driver.ResolveKeepAlive(cfg.KeepAlive, cfg.KeepAliveConfig)
	lc := net.ListenConfig{KeepAlive: -1}
	// A plain TCP socket, not the Multipath TCP one package net listens
	// with by default where the kernel has it: MPA runs over one TCP
	// stream, initiators dial plain TCP (siw does too), and an MPTCP
	// listener costs every connection it accepts extra work in the
	// kernel (the subflow's set-up, then each read and write passes
	// through the MPTCP socket), and refuses TCP options on itself.
	lc.SetMultipathTCP(false)
	lc.Control = listenControl(cfg.SharePort, cfg.Control)
	tl, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("iwarp: listen %s: %w: %w", addr, err, driver.ErrPortInUse)
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, fmt.Errorf("iwarp: listen %s: %w: %w", addr, err, driver.ErrInvalidAddress)
		}
		return nil, fmt.Errorf("iwarp: listen %s: %w", addr, err)
	}
	if cfg.Fallback == nil {
		// Every peer is then an MPA initiator, which speaks first: the
		// kernel may keep a connection from us until its first bytes
		// arrive. Silent connections (a flood) then never reach the
		// accept queue, where a real initiator would wait behind them.
		deferAccept(tl, ia.opts.requestTimeout)
	}
	inherited := ka.Enable && inheritKeepAlive(tl, ka)
	l := &Listener{
		ia:                 ia,
		tl:                 tl,
		backlog:            backlog,
		maxHandshakes:      ia.opts.maxHandshakes,
		requestTimeout:     ia.opts.requestTimeout,
		fallbackWait:       ia.opts.fallbackWait,
		fallback:           cfg.Fallback,
		keepAlive:          ka,
		keepAliveInherited: inherited,
		ready:              make(chan *Request, backlog),
		done:               make(chan struct{}),
		resets:             newResetQueue(maxQueuedResets),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// listenControl combines what runs on a listening socket before it is
// bound: SO_REUSEPORT for a shared port, then the consumer's hook.
func listenControl(share bool, user func(network, address string, c syscall.RawConn) error) func(network, address string, c syscall.RawConn) error {
	switch {
	case !share:
		return user
	case user == nil:
		return reuseport.Control // SO_REUSEPORT + SO_REUSEADDR
	}
	return func(network, address string, c syscall.RawConn) error {
		if err := reuseport.Control(network, address, c); err != nil {
			return err
		}
		return user(network, address, c)
	}
}

// Addr is the bound address, with the real port when Port was 0.
func (l *Listener) Addr() net.Addr { return l.tl.Addr() }

// Accept returns the next connection request. It fails with ctx's error,
// or with an error wrapping net.ErrClosed once the listener is closed.
func (l *Listener) Accept(ctx context.Context) (driver.Request, error) {
	return provkit.AcceptQueued(ctx, "iwarp", l.ready, l.done, l.isClosed)
}

// NotifyRequests makes admission hand each request it parses from now on
// to f, in the goroutine that parsed it (the accept loop, for a Request
// that had arrived whole), instead of queuing it for Accept
// (driver.RequestNotifier). The backlog counts the requests f got until
// they are settled, as it counts queued ones. Close waits for calls of f
// in progress: they run in the listener's goroutines.
func (l *Listener) NotifyRequests(f func(driver.Request)) {
	l.mu.Lock()
	l.notify = f
	l.mu.Unlock()
}

// isClosed reports whether Close has been called.
func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close stops listening. TCP connections still in admission and requests
// not yet returned by Accept are reset (non-peer rejects); requests
// already returned stay the caller's to settle. Close returns once no
// goroutine of the listener is left, calls to ListenConfig.Fallback in
// progress included. It is idempotent.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	var victims []*net.TCPConn
	for l.admitting.head != nil {
		a := l.admitting.head
		l.admitting.remove(a)
		a.evicted = true
		victims = append(victims, a.tc)
	}
	l.mu.Unlock()

	err := l.tl.Close()
	for _, tc := range victims {
		resetClose(tc)
	}
	l.wg.Wait()
	l.resets.stop()
	for drained := false; !drained; {
		select {
		case r := <-l.ready:
			_ = r.Abort()
		default:
			drained = true
		}
	}
	l.ia.forgetListener(l)
	if err != nil {
		return fmt.Errorf("iwarp: close listener: %w", err)
	}
	return nil
}

// acceptLoop takes TCP connections off the socket and starts an admission
// goroutine for each. It never waits for a peer, so the kernel's accept
// queue drains as fast as connections arrive, whatever they send.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	var peekBuf [wire.MPAHeaderLen + maxWirePrivateData]byte
	for {
		nc, err := l.tl.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			// Out of file descriptors: the oldest connection in
			// admission gives its descriptor to the newcomer, so a flood
			// larger than the process may hold still cannot stall the
			// accept queue.
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				if l.resets.flush() {
					continue
				}
				l.mu.Lock()
				victim := l.evictOldest(peekBuf[:])
				l.mu.Unlock()
				if victim != nil {
					resetClose(victim.tc)
					continue
				}
			}
			// Nothing to give up, or another error: the listener itself
			// is fine, so wait a little and go on (as net/http does).
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		tc := nc.(*net.TCPConn)
		l.mu.Lock()
		if l.closed || (l.fallback == nil && l.pending >= l.backlog) {
			// Full: refuse before the MPA exchange, so the initiator
			// sees a refused connection rather than a failed handshake.
			// (With Fallback the connection may be a plain TCP client,
			// which the backlog does not concern: a Request is refused
			// once read instead, the same way.)
			if !l.closed {
				l.counts.refused++
			}
			l.mu.Unlock()
			l.resets.add(tc)
			continue
		}
		// What has arrived already decides most connections: a real
		// initiator's Request is usually complete by the time a busy
		// listener takes the connection, and garbage is garbage from its
		// first byte.
		a := &admission{tc: tc}
		first := peekBuf[:peekNow(tc, peekBuf[:])]
		switch classifyFirstBytes(first) {
		case firstBytesRequest:
			a.whole = requestLen(first)
			// Reading what has arrived cannot wait for the peer, so the
			// loop admits it itself: no goroutine to start and hand it
			// to, and no slot in the table, so a flood of silent
			// connections cannot push out a Request that has arrived.
			l.wg.Add(1)
			l.mu.Unlock()
			l.handshake(a)
			continue
		case firstBytesNotMPA:
			if l.fallback == nil {
				l.counts.dropped++
				l.mu.Unlock()
				l.resets.add(tc)
				continue
			}
		}
		var victim *admission
		if l.admitting.n >= l.maxHandshakes {
			victim = l.evictOldest(peekBuf[:])
		}
		a.queued = true
		l.admitting.push(a)
		l.wg.Add(1)
		l.mu.Unlock()
		if victim != nil {
			l.resets.add(victim.tc)
		}
		go l.handshake(a)
	}
}

// evictOldest takes the oldest connection in admission out of the table
// to be reset by the caller, or returns nil if the table is empty. l.mu
// must be held. It passes over a connection whose whole Request has
// arrived since the accept loop peeked, which its goroutine has not read
// yet: no flood may push out a Request that has arrived, and a fast
// accept loop takes a real initiator's connection before its Request
// more often. Such a connection leaves the table (it is not waiting for
// its peer any more) and its goroutine admits it. buf is scratch space
// for the peek.
func (l *Listener) evictOldest(buf []byte) *admission {
	for a := l.admitting.head; a != nil; a = l.admitting.head {
		l.admitting.remove(a)
		a.queued = false
		if classifyFirstBytes(buf[:peekNow(a.tc, buf)]) == firstBytesRequest {
			continue
		}
		a.evicted = true
		l.counts.evicted++
		return a
	}
	return nil
}

// verdict is what admission decided about a connection.
type verdict int

const (
	verdictDrop     verdict = iota // reset it
	verdictRequest                 // a valid Request: queue it for Accept
	verdictRejected                // a reject Reply was sent: close it
	verdictFallback                // not MPA: hand it to Fallback
)

// handshake runs admission for a and carries out its verdict, unless a
// newer connection or Close evicted a meanwhile.
func (l *Listener) handshake(a *admission) {
	defer l.wg.Done()
	v, f, prefix := l.admit(a.tc, a.whole)
	l.mu.Lock()
	if a.evicted {
		l.mu.Unlock()
		return
	}
	if a.queued {
		l.admitting.remove(a)
	}
	switch {
	case l.closed:
		v = verdictDrop
	case v == verdictRequest && l.pending >= l.backlog:
		// Filled up meanwhile: refuse without a Reply, as at accept.
		l.counts.refused++
		v = verdictDrop
	case v == verdictRequest:
		l.pending++
		r := &Request{l: l, tc: a.tc, req: f}
		if notify := l.notify; notify != nil {
			l.mu.Unlock()
			notify(r)
			return
		}
		l.ready <- r // cannot block: len(ready) <= pending <= backlog
		l.mu.Unlock()
		return
	case v == verdictFallback:
		l.counts.fallback++
	case v == verdictDrop:
		l.counts.dropped++
	}
	l.mu.Unlock()
	switch v {
	case verdictFallback:
		_ = a.tc.SetDeadline(time.Time{})
		l.keepAliveOn(a.tc)
		l.fallback(&fallbackConn{Conn: a.tc, tc: a.tc, prefix: prefix})
	case verdictRejected:
		// A plain close, so the FIN follows the reject Reply.
		_ = a.tc.Close()
	default:
		l.resets.add(a.tc)
	}
}

// admit reads a new connection's first bytes and decides what it is. It
// never closes tc: handshake does, unless the connection was evicted.
//
// Without Fallback, the MPA Request must be complete within req_timeout
// and the connection is dropped at the first byte that differs from the
// Request key. With Fallback, that byte, no byte at all within
// fallback_wait, only a prefix of the key within req_timeout, or the
// client's FIN before the whole key hands the connection to Fallback with
// the bytes read so far; once the key is complete the connection is MPA's
// and dropped if the rest is not a valid Request. A Request that
// asks for something this provider never supports (markers, or E without
// room for the IRD/ORD block) is answered with a reject Reply, as siw
// does. whole is the length of a Request known to have arrived whole (0:
// not known), which is then read at once.
func (l *Listener) admit(tc *net.TCPConn, whole int) (v verdict, f wire.MPAFrame, prefix []byte) {
	// TCP_NODELAY (siw_tcp_nagle = false) is on already: package net
	// sets it on every connection it accepts.
	//
	// Measured from here, not from the TCP accept: a goroutine started
	// late under load must not hold the peer's delay against it. The
	// deadline covers the reject Reply written below as well: a peer
	// that does not read cannot hold the goroutine.
	start := time.Now()
	deadline := start.Add(l.requestTimeout)
	first := deadline
	if l.fallback != nil {
		first = start.Add(min(l.fallbackWait, l.requestTimeout))
	}
	var hdr [wire.MPAHeaderLen]byte
	var shortV2 bool
	var err error
	if whole > 0 {
		// The Request is in the socket whole: one read takes it (and
		// nothing behind it), with no deadline to wait for.
		frame := make([]byte, whole)
		if _, err := io.ReadFull(tc, frame); err != nil {
			return verdictDrop, f, nil
		}
		copy(hdr[:], frame)
		f, shortV2, err = parseMPAHeader(wire.MPARequest, &hdr)
		if err == nil {
			err = parseMPAPrivateData(&f, frame[wire.MPAHeaderLen:])
		}
	} else {
		_ = tc.SetDeadline(first)
		var n int
		n, err = tc.Read(hdr[:])
		if n > 0 || err == nil {
			if n > 0 && l.fallback != nil {
				_ = tc.SetDeadline(deadline)
			}
			n, err = matchKey(tc, wire.MPARequest, hdr[:], n)
		}
		if err != nil {
			// Not MPA, silence, EOF, reset. siw drops the connection
			// without a word; with Fallback, a connection that did not
			// send the whole Request key and can still be talked to is
			// a TCP client (one that half-closed after a short request,
			// or waits for the server to speak first).
			var notMPA *notMPAError
			if l.fallback != nil && (errors.As(err, &notMPA) || errors.Is(err, os.ErrDeadlineExceeded) ||
				errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				return verdictFallback, f, clone(hdr[:n])
			}
			return verdictDrop, f, nil
		}
		f, shortV2, err = readMPARest(tc, wire.MPARequest, &hdr, n)
	}
	if err != nil {
		// Truncated, revision > 2, PD_Length over the limit.
		return verdictDrop, f, nil
	}
	if shortV2 || f.Header.Flags&wire.MPAFlagMarkers != 0 {
		_ = tc.SetDeadline(deadline)
		rep, _ := responderReply(&f, l.ia.opts.requireCRC, 0, 0, nil, true)
		_ = writeMPA(tc, &rep)
		return verdictRejected, f, nil
	}
	if whole == 0 {
		_ = tc.SetDeadline(time.Time{})
	}
	return verdictRequest, f, nil
}

// requestLen is the length of the MPA Request at the start of b, which
// classifyFirstBytes found whole.
func requestLen(b []byte) int {
	return wire.MPAHeaderLen + int(binary.BigEndian.Uint16(b[wire.MPAHeaderLen-2:]))
}

// firstBytes classifies what a connection sent before the listener took it.
type firstBytes int

const (
	firstBytesUnknown firstBytes = iota // nothing yet, or a part of an MPA Request
	firstBytesRequest                   // a whole frame that claims to be an MPA Request
	firstBytesNotMPA                    // bytes that no MPA Request starts with
)

// classifyFirstBytes looks at the bytes a connection sent first (a peek:
// they are still to be read). It only sorts; admit validates the Request.
func classifyFirstBytes(b []byte) firstBytes {
	key := wire.MPARequest.Key()
	k := min(len(b), len(key))
	switch {
	case string(b[:k]) != key[:k]:
		return firstBytesNotMPA
	case len(b) < wire.MPAHeaderLen:
		return firstBytesUnknown
	}
	if n := requestLen(b); n <= wire.MPAHeaderLen+maxWirePrivateData && len(b) >= n {
		return firstBytesRequest
	}
	return firstBytesUnknown
}

// fallbackConn is a connection handed to ListenConfig.Fallback: reads
// return the bytes admission read to classify it before anything else,
// so the fallback server sees the client's stream intact.
type fallbackConn struct {
	net.Conn // tc; only net.Conn's methods are promoted (TCPConn.WriteTo would skip the prefix)
	tc       *net.TCPConn

	mu     sync.Mutex
	prefix []byte
}

// Read returns what is left of the sniffed prefix, then reads the socket.
func (c *fallbackConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.tc.Read(p)
}

// ReadFrom lets io.Copy into the connection use the socket's fast paths
// (splice, sendfile).
func (c *fallbackConn) ReadFrom(r io.Reader) (int64, error) { return c.tc.ReadFrom(r) }

// CloseWrite shuts down the writing side (servers that half-close, such
// as net/http, look for it).
func (c *fallbackConn) CloseWrite() error { return c.tc.CloseWrite() }

// CloseRead shuts down the reading side.
func (c *fallbackConn) CloseRead() error { return c.tc.CloseRead() }

// keepAliveOn gives tc the listener's keepalive, as package net would
// have at accept, once admission hands tc on, unless tc has it from the
// listening socket.
func (l *Listener) keepAliveOn(tc *net.TCPConn) {
	if l.keepAlive.Enable && !l.keepAliveInherited {
		_ = tc.SetKeepAliveConfig(l.keepAlive)
	}
}

// release gives back the backlog slot of a settled request.
func (l *Listener) release() {
	l.mu.Lock()
	l.pending--
	l.mu.Unlock()
}

// resetClose closes tc with an RST (SO_LINGER 0): the peer learns at once
// that nobody will answer, and no TIME_WAIT is left behind.
func resetClose(tc *net.TCPConn) {
	_ = tc.SetLinger(0)
	_ = tc.Close()
}
