package iwarp

import (
	"context"
	"errors"
	"fmt"
	"net"
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
// Every accepted TCP connection gets its own short-lived goroutine that
// reads the MPA Request (bounded by req_timeout and max_handshakes); a
// valid Request becomes a *Request for Accept. At most backlog requests
// may be parsed but not yet settled (accepted, rejected or aborted);
// beyond that new arrivals are reset without an MPA Reply, which the
// initiator reports as a non-peer reject.
type Listener struct {
	ia             *IA
	tl             net.Listener
	backlog        int
	maxHandshakes  int
	requestTimeout time.Duration

	ready chan *Request // parsed, not yet returned by Accept; cap backlog
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	pending    int // parsed and not yet settled
	handshakes map[*net.TCPConn]struct{}
}

var _ driver.Listener = (*Listener)(nil)

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
	var lc net.ListenConfig // Go sets SO_REUSEADDR on listeners, like siw
	if cfg.SharePort {
		lc.Control = reuseport.Control // SO_REUSEPORT + SO_REUSEADDR
	}
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
	l := &Listener{
		ia:             ia,
		tl:             tl,
		backlog:        backlog,
		maxHandshakes:  ia.opts.maxHandshakes,
		requestTimeout: ia.opts.requestTimeout,
		ready:          make(chan *Request, backlog),
		done:           make(chan struct{}),
		handshakes:     make(map[*net.TCPConn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the bound address, with the real port when Port was 0.
func (l *Listener) Addr() net.Addr { return l.tl.Addr() }

// Accept returns the next connection request. It fails with ctx's error,
// or with an error wrapping net.ErrClosed once the listener is closed.
func (l *Listener) Accept(ctx context.Context) (driver.Request, error) {
	return provkit.AcceptQueued(ctx, "iwarp", l.ready, l.done, l.isClosed)
}

// isClosed reports whether Close has been called.
func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close stops listening. TCP connections still in the MPA handshake and
// requests not yet returned by Accept are reset (non-peer rejects);
// requests already returned stay the caller's to settle. Close returns
// once no goroutine of the listener is left. It is idempotent.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	hs := make([]*net.TCPConn, 0, len(l.handshakes))
	for tc := range l.handshakes {
		hs = append(hs, tc)
	}
	l.mu.Unlock()

	err := l.tl.Close()
	for _, tc := range hs {
		resetClose(tc)
	}
	l.wg.Wait()
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

// acceptLoop takes TCP connections off the socket and starts a handshake
// goroutine for each.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.tl.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			// Out of file descriptors or similar: the listener itself is
			// fine, so wait a little and go on (as net/http does).
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
		if l.closed || len(l.handshakes) >= l.maxHandshakes {
			l.mu.Unlock()
			resetClose(tc)
			continue
		}
		l.handshakes[tc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.handshake(tc)
	}
}

// handshake reads one MPA Request and queues it for Accept, or drops the
// connection.
func (l *Listener) handshake(tc *net.TCPConn) {
	defer l.wg.Done()
	r := l.readRequest(tc)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.handshakes, tc)
	if r == nil {
		return
	}
	if l.closed || l.pending >= l.backlog {
		// Closed meanwhile, or backlog full: refuse without a Reply.
		resetClose(tc)
		return
	}
	l.pending++
	l.ready <- r // cannot block: len(ready) <= pending <= backlog
}

// readRequest reads and checks the MPA Request on a fresh connection. It
// returns nil after dropping the connection when the Request is missing
// or invalid, and after answering with a reject Reply when it asks for
// something this provider never supports (markers, or E without room for
// the IRD/ORD block), as siw does.
func (l *Listener) readRequest(tc *net.TCPConn) *Request {
	_ = tc.SetNoDelay(true) // siw_tcp_nagle = false
	// The deadline covers the reject Reply written below as well: a peer
	// that does not read cannot hold the goroutine.
	_ = tc.SetDeadline(time.Now().Add(l.requestTimeout))
	f, shortV2, err := readMPA(tc, wire.MPARequest)
	if err != nil {
		// Silence, truncation, wrong key, revision > 2, PD_Length over
		// the limit, garbage: siw drops the connection without a word.
		_ = tc.Close()
		return nil
	}
	if shortV2 || f.Header.Flags&wire.MPAFlagMarkers != 0 {
		rep, _ := responderReply(&f, l.ia.opts.requireCRC, 0, 0, nil, true)
		_ = writeMPA(tc, &rep)
		_ = tc.Close()
		return nil
	}
	_ = tc.SetDeadline(time.Time{})
	return &Request{l: l, tc: tc, req: f}
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
