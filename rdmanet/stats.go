package rdmanet

import (
	"errors"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// Stats is a snapshot of one connection's counters and parameters,
// returned by Conn.Stats. Counts are cumulative since the connection was
// made; all of them are plain values, safe to keep and compare.
type Stats struct {
	// BytesWritten and BytesRead are stream payload moved by the
	// application: bytes Write and ReadFrom accepted, bytes Read and
	// WriteTo delivered. Data discarded after CloseRead is not read.
	BytesWritten uint64 `json:"bytes_written"`
	BytesRead    uint64 `json:"bytes_read"`
	// RDMAWrites counts RDMA Write work requests posted (a Write of a
	// large buffer takes several: one per piece of the peer's ring).
	RDMAWrites uint64 `json:"rdma_writes"`
	// InlineWrites counts Writes small enough to travel inside a control
	// message instead of as an RDMA Write.
	InlineWrites uint64 `json:"inline_writes"`
	// ControlSent and ControlReceived count control messages (positions,
	// credit, FIN; see the package documentation) each way.
	ControlSent     uint64 `json:"control_sent"`
	ControlReceived uint64 `json:"control_received"`
	// ImmWrites counts data announcements that rode the last RDMA Write
	// of their data as immediate data instead of a control Send (see
	// Dialer.NoWriteImm); ControlSent counts them too.
	ImmWrites uint64 `json:"imm_writes"`

	// Waits of Writes that found no room. Each is counted once per
	// blocked reservation, under the cause seen when it began to wait,
	// with the time it waited; a Write that never waits costs neither.
	//
	// CreditStalls: the control channel was out of credits, so the data
	// already written could not even be announced until the peer granted
	// receives back.
	CreditStalls    uint64        `json:"credit_stalls"`
	CreditStallTime time.Duration `json:"credit_stall_ns"`
	// RingFullWaits: the peer's receive ring was full; the peer had not
	// read (or not yet reported reading) what was written.
	RingFullWaits uint64        `json:"ring_full_waits"`
	RingFullTime  time.Duration `json:"ring_full_ns"`
	// SendQueueWaits: our own staging buffer or send queue was full,
	// waiting for the adapter to complete earlier RDMA Writes.
	SendQueueWaits uint64        `json:"send_queue_waits"`
	SendQueueTime  time.Duration `json:"send_queue_ns"`

	// Errors counts the errors Read, Write, ReadFrom and WriteTo returned
	// (io.EOF is not one) and LastError is the latest one's text. A
	// transport failure no call has reported yet counts too.
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Resizes counts the receive rings this side offered the peer in
	// place of its current one (growing or shrinking; see
	// Dialer.BufferSize); Params.RecvRing is the size now.
	Resizes uint64 `json:"resizes"`

	// Provider is the DAT provider's name (e.g. "iwarp", "verbs") and IA
	// the name of the interface adapter the connection runs on.
	Provider string `json:"provider"`
	IA       string `json:"ia"`
	// Params are the parameters the connection was built and negotiated
	// with.
	Params Params `json:"params"`
}

// Params are a connection's parameters: its own configuration and what
// the peer announced in the handshake.
type Params struct {
	// Version is the rdmanet protocol version in use.
	Version int `json:"version"`
	// RecvRing is the size of this side's receive ring (what the peer
	// may have written and we not yet read); SendRing is the peer's ring,
	// the most we may have outstanding at the peer.
	RecvRing int `json:"recv_ring"`
	SendRing int `json:"send_ring"`
	// Staging is the size of this side's staging buffer, which Writes
	// copy into.
	Staging int `json:"staging"`
	// BufferSize is the configured buffer size (Dialer.BufferSize), 0
	// for an adaptive connection, whose RecvRing and Staging follow the
	// traffic.
	BufferSize int `json:"buffer_size"`
	// Credits is the number of control receives this side keeps posted
	// (the control credits it gives the peer); PeerCredits the peer's.
	Credits     int `json:"credits"`
	PeerCredits int `json:"peer_credits"`
	// SendDepth bounds the RDMA Writes and control Sends outstanding.
	SendDepth int `json:"send_depth"`
	// Poll is how blocked calls wait: "adaptive", "busy" or "event",
	// followed by the spin time when one was configured.
	Poll string `json:"poll"`
}

// counters are a Conn's statistics, guarded by Conn.mu and updated in
// the critical sections the data path takes anyway: no lock and no
// allocation of their own. (Bytes written are sProd.)
type counters struct {
	bytesRead          uint64
	rdmaWrites, inline uint64
	ctrlSent, ctrlRecv uint64
	immWrites          uint64
	waits              [numWaits]uint64
	waited             [numWaits]time.Duration
	errors             uint64
	resizes            uint64 // receive rings offered to the peer
	lastErr            error
	// failure is the transport's failure, once counted in errors; the
	// I/O calls that report it later do not count it again.
	failure error
}

// waitCause is why a Write waits for room.
type waitCause uint8

const (
	waitCredit waitCause = iota
	waitRing
	waitSendQueue
	numWaits
)

// waitCauseLocked says why a Write that found no room must wait: see
// Stats. Callers hold c.mu.
func (c *Conn) waitCauseLocked() waitCause {
	switch {
	case !c.cc.canSend() && c.sProd != c.sProdSent:
		return waitCredit
	case c.dst.free(c.sProd, c.sPeerCons) == 0:
		return waitRing
	}
	return waitSendQueue
}

// waitTimer measures one wait of a Write. Its zero value is "not
// waiting"; time.Now is read only once a wait actually begins.
type waitTimer struct {
	start time.Time
	cause waitCause
}

// beginLocked starts measuring, unless already. Callers hold c.mu.
func (w *waitTimer) beginLocked(c *Conn) {
	if w.start.IsZero() {
		w.start, w.cause = time.Now(), c.waitCauseLocked()
	}
}

// endLocked records a wait that is over, if there was one. Callers hold
// c.mu.
func (w *waitTimer) endLocked(c *Conn) {
	if w.start.IsZero() {
		return
	}
	c.st.waits[w.cause]++
	c.st.waited[w.cause] += time.Since(w.start)
	w.start = time.Time{}
}

// end is endLocked for callers without c.mu.
func (w *waitTimer) end(c *Conn) {
	if w.start.IsZero() {
		return
	}
	c.mu.Lock()
	w.endLocked(c)
	c.mu.Unlock()
}

// ioError counts an error an I/O call is about to return, and returns
// it; the transport's failure, counted when it happened, is not counted
// again. Only error paths call it.
func (c *Conn) ioError(err error) error {
	c.mu.Lock()
	if c.st.failure == nil || !errors.Is(err, c.st.failure) {
		c.st.errors++
		c.st.lastErr = err
	}
	c.mu.Unlock()
	return err
}

// transportFailedLocked counts the transport's failure err once. Callers
// hold c.mu.
func (c *Conn) transportFailedLocked(err error) {
	if c.st.failure == nil {
		c.st.failure = err
		c.st.errors++
		c.st.lastErr = err
	}
}

// Stats returns a snapshot of the connection's counters and parameters.
// It may be called at any time, concurrently with I/O and after Close.
// It takes the Conn's lock briefly and, unless there is a last error to
// describe, allocates nothing, so a monitor may call it often. The
// counters themselves cost the data path no lock and no allocation:
// they are updated in critical sections it takes anyway.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	st := Stats{
		BytesWritten: c.sProd, BytesRead: c.st.bytesRead,
		RDMAWrites: c.st.rdmaWrites, InlineWrites: c.st.inline,
		ControlSent: c.st.ctrlSent, ControlReceived: c.st.ctrlRecv, ImmWrites: c.st.immWrites,
		CreditStalls: c.st.waits[waitCredit], CreditStallTime: c.st.waited[waitCredit],
		RingFullWaits: c.st.waits[waitRing], RingFullTime: c.st.waited[waitRing],
		SendQueueWaits: c.st.waits[waitSendQueue], SendQueueTime: c.st.waited[waitSendQueue],
		Errors: c.st.errors, Resizes: c.st.resizes,
		Params: Params{
			Version: int(c.peer.Version), RecvRing: int(c.recv.size()), SendRing: int(c.dst.r.Size),
			Staging: int(c.stage.size()), BufferSize: c.cfg.fixedSize(), Credits: c.cfg.recvs, PeerCredits: int(c.peer.Credits),
			SendDepth: c.cfg.sendDepth, Poll: pollString(c.cfg.poll),
		},
	}
	lastErr := c.st.lastErr
	c.mu.Unlock()
	if lastErr != nil {
		st.LastError = lastErr.Error()
	}
	st.Provider, st.IA = c.ia.provider, c.ia.name
	return st
}

// pollString names a poll policy for Params.Poll.
func pollString(p dat.PollPolicy) string {
	s := p.Mode.String()
	if p.Spin > 0 {
		s += " spin " + p.Spin.String()
	}
	return s
}
