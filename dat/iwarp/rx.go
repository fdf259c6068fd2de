package iwarp

import (
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"syscall"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// Receiver buffering. Headers and trailers are read through a small
// read-ahead buffer (one read usually brings a whole small FPDU, or the
// trailer of one and the header of the next); payload goes from the
// socket straight into the registered memory it is destined for. Only
// what the read-ahead already holds is copied (at most rxBufSize bytes per
// FPDU), and a payload remainder shorter than rxDirectMin is read through
// the buffer too, so that the next header comes with it in one read.
const (
	rxBufSize   = 4096
	rxDirectMin = 1024
)

// receiver is the state of a connection's receive goroutine. It owns the
// stream's read side and the per-stream DDP state (MSN/MO per untagged
// queue, the tagged message in progress).
//
// Every header is parsed and every check that decides where payload goes
// (queue number, MSN, MO, receive capacity, STag, key, PD, access right,
// bounds, the outstanding Read) passes before the first payload byte is
// read: payload is only ever read into a slice of a registered region,
// cut to the validated window, so no byte can land outside it. A failed
// check sends a Terminate and ends the connection.
type receiver struct {
	c  *connection
	q  *QP
	tc *net.TCPConn
	// idle waits for the socket with nothing read ahead (readIdle); nil
	// where the system has no such wait, and the buffer stays then.
	idle    syscall.RawConn
	idleFn  func(fd uintptr) bool // rx.idleRead, made once
	idleN   int                   // what idleRead read
	idleErr error
	bufp    *rxBuffer // the pool's buffer behind buf
	// waitFn is rx.waitRead, made once; poked records that it stopped
	// for a poke (rxrole.go).
	waitFn func(fd uintptr) bool
	poked  bool
	nowFn  func(fd uintptr) bool // rx.nowRead, made once
	// small counts the FPDUs since the last one that did not fit the
	// read-ahead, up to rxBulkAfter (rxCtl.bulk).
	small int
	// bulkRun counts the large FPDUs waiters ran since a wait last
	// ended with a completion (rxWaiterBulk).
	bulkRun int

	buf  []byte
	r, w int

	// part is the FPDU being placed while partOn: its header is parsed
	// and checked, and the next bytes of the stream are the rest of its
	// payload, then its trailer. A waiter places a Write, Send or Read
	// Response segment as its bytes come and may leave it unfinished (see
	// payloadRest); whoever holds the role next carries on.
	part   payloadPart
	partOn bool
	// nowait: the role's holder is a waiter, which must not wait for the
	// socket in the middle of an FPDU (payloadRest).
	nowait bool
	// What partReadv read, for partDone; partFn and partNowFn are
	// waitPart's and partNow's steps, made once.
	partN     int
	partErrno syscall.Errno
	partGot   bool
	partFn    func(fd uintptr) bool
	partNowFn func(fd uintptr)

	crcOn   bool
	crc     wire.CRC
	started bool // a complete FPDU has arrived

	hdr  [wire.ReadRequestHeaderLen]byte // current header, for Terminate attachments
	hlen int

	// Untagged queue 0: Sends.
	sendMSN  uint32 // MSN of the Send in progress or the next one
	sendMO   uint32 // bytes of it placed
	sendOn   bool   // a Send is in progress (its last segment not seen)
	sendOp   wire.Opcode
	haveRecv bool // recv is taken and not completed
	recv     recvWR
	dst      [maxSGE][]byte
	ndst     int
	dstIdx   int
	dstOff   int
	dstCap   uint64

	// Untagged queue 1: Read Requests.
	rreqMSN uint32

	// Tagged messages (Write, Read Response): at most one in progress.
	tagOn   bool
	tagOp   wire.Opcode
	tagSTag uint32
	tagTO   uint64 // TO the next segment must carry
	tagMR   *MR
	rd      *sendWR // the Read whose Response is arriving
	rdDone  uint32

	termBuf [wire.MaxTerminateAttachLen + wire.TerminateControlLen]byte

	raw rawReader // readv (platform specific)
}

// newReceiver makes the receive state of c, which lives in the
// connection rather than on a goroutine's stack: whoever holds the
// receive role (rxrole.go) carries on where the last holder stopped.
func newReceiver(c *connection) *receiver {
	rx := &receiver{c: c, q: c.q, tc: c.tc, crcOn: c.crc, sendMSN: 1, rreqMSN: 1, small: rxBulkAfter}
	rx.idle = idleReader(c.tc)
	return rx
}

// readLoop is the connection's receive goroutine, the one goroutine an
// idle connection costs. It reads whenever no waiter does (rxrole.go).
// late: it was started when the role first came to it, from a waiter that
// may have left its read deadline on the socket.
func (c *connection) readLoop(late bool) {
	defer c.q.ia.conns.Done()
	rx := c.rx
	if late {
		rx.clearDeadline()
	}
	if rx.buf == nil {
		rx.takeBuf()
	}
	err := rx.run()
	c.rxStop()
	rx.dropBuf()
	c.finish(rx, err)
}

// run reads FPDUs until the stream ends or fails, leaving the socket to
// a waiter that asks for it between FPDUs. The result is the
// OnDisconnect argument: nil for the peer's orderly close at a message
// boundary.
func (rx *receiver) run() error {
	for {
		if err, end := rx.awaitFrame(); end {
			return err
		}
		if err := rx.step(); err != nil {
			return err
		}
	}
}

// step reads and acts on one FPDU, whose first 4 bytes are read ahead.
// With the whole FPDU read ahead (frameReady) it does not touch the
// socket, which is what lets a waiter run it.
func (rx *receiver) step() error {
	if rx.partOn {
		if err := rx.payloadRest(); err != nil {
			return err
		}
		rx.opened()
		return nil
	}
	rx.hlen = 0
	op, l, err := wire.ParseControl(rx.buf[rx.r : rx.r+4])
	if err != nil {
		return rx.protoErr(err)
	}
	hl := op.HeaderLen()
	if wire.FPDULen(l) > len(rx.buf) {
		rx.small = 0
	} else if rx.small < rxBulkAfter {
		rx.small++
	}
	if err := rx.fill(hl); err != nil {
		return rx.readErr(err, false)
	}
	hdr := rx.buf[rx.r : rx.r+hl]
	rx.hlen = copy(rx.hdr[:], hdr)
	var h wire.Header
	if _, err := h.Parse(hdr); err != nil {
		return rx.protoErr(err)
	}
	if rx.crcOn {
		rx.crc = wire.CRC(0).Update(hdr)
	}
	rx.r += hl
	n := l + wire.ULPDULengthLen - hl // payload (or Terminate attachment) bytes
	switch op {
	case wire.OpSend, wire.OpSendSE, wire.OpSendInvalidate, wire.OpSendSEInvalidate:
		err = rx.send(&h, n, l)
	case wire.OpWrite:
		err = rx.write(&h, n, l)
	case wire.OpReadResponse:
		err = rx.readResponse(&h, n, l)
	case wire.OpReadRequest:
		err = rx.readRequest(&h, l)
	case wire.OpTerminate:
		return rx.terminate(n, l)
	}
	if err != nil {
		return err
	}
	rx.opened()
	return nil
}

// opened records a complete FPDU; the first one opens the startup gate.
func (rx *receiver) opened() {
	if !rx.started {
		rx.started = true
		rx.c.openGate()
	}
}

// frameNeed returns how many bytes the FPDU starting the read-ahead
// spans (at least its header and trailer, whatever its length field
// says), 0 while its first 4 bytes have not arrived, and 4 if they are
// invalid (step then fails without reading further).
func (rx *receiver) frameNeed() int {
	if rx.w-rx.r < 4 {
		return 0
	}
	op, l, err := wire.ParseControl(rx.buf[rx.r : rx.r+4])
	if err != nil {
		return 4
	}
	return max(wire.FPDULen(l), op.HeaderLen()+wire.TrailerLen(l))
}

// headerMissing returns how many more bytes the read-ahead needs before
// it holds the whole header of the FPDU it starts with (at least its
// first 4 bytes, valid ones: see frameNeed). A waiter runs an FPDU larger
// than the read-ahead once its header is there: a Write, Send or Read
// Response segment it places as it comes (payloadRest); any other large
// FPDU is a protocol error its header shows (a Send with Invalidate, a
// Terminate with an oversized attachment; a Read Request has a fixed
// length), which step reports without reading further.
func (rx *receiver) headerMissing() int {
	op, _, err := wire.ParseControl(rx.buf[rx.r : rx.r+4])
	if err != nil {
		return 0 // step fails it on its first 4 bytes
	}
	return max(0, op.HeaderLen()-(rx.w-rx.r))
}

// fill makes at least n (≤ rxBufSize) bytes available in the read-ahead
// buffer, reading as much as the socket has.
func (rx *receiver) fill(n int) error {
	if rx.w-rx.r >= n {
		return nil
	}
	if rx.r == rx.w {
		rx.r, rx.w = 0, 0
		if rx.idle != nil {
			// Nothing read ahead: wait for the socket without holding
			// the buffer, which an idle connection then does not cost.
			if err := rx.readIdle(); err != nil {
				return err
			}
			if rx.w >= n {
				return nil
			}
		}
	} else if rx.r+n > len(rx.buf) {
		rx.w = copy(rx.buf, rx.buf[rx.r:rx.w])
		rx.r = 0
	}
	for rx.w-rx.r < n {
		m, err := rx.tc.Read(rx.buf[rx.w:])
		raceAcquire(rx.c.raceRx)
		rx.w += m
		if err != nil && rx.w-rx.r < n {
			if errors.Is(err, io.EOF) && rx.w > rx.r {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// readInto places exactly len(p) payload bytes into p: what the read-ahead
// holds, then straight from the socket. The CRC is extended over p.
func (rx *receiver) readInto(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	n := copy(p, rx.buf[rx.r:rx.w])
	rx.r += n
	for n < len(p) {
		rem := p[n:]
		if len(rem) < rxDirectMin {
			if err := rx.fill(len(rem)); err != nil {
				return err
			}
			k := copy(rem, rx.buf[rx.r:rx.w])
			rx.r += k
			n += k
			continue
		}
		m, err := rx.readDirect(rem)
		raceAcquire(rx.c.raceRx)
		n += m
		if err != nil && n < len(p) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	if rx.crcOn {
		rx.crc = rx.crc.Update(p)
	}
	return nil
}

// trailer reads and checks the pad and CRC of the FPDU whose ULPDU_Length
// is l.
func (rx *receiver) trailer(l int) error {
	tl := wire.TrailerLen(l)
	if err := rx.fill(tl); err != nil {
		return rx.readErr(err, false)
	}
	err := wire.CheckTrailer(rx.buf[rx.r:rx.r+tl], l, rx.crc, rx.crcOn)
	rx.r += tl
	if err != nil {
		rx.hlen = 0
		return rx.protoErr(err)
	}
	return nil
}

// readErr classifies a read failure. At an FPDU boundary with no message
// in progress, EOF is the peer's orderly close. EOF anywhere else means
// the stream was cut inside an FPDU or message: Terminate LLP "stream
// lost". Other errors (reset, local close) end the connection as broken.
func (rx *receiver) readErr(err error, boundary bool) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if boundary && !rx.sendOn && !rx.tagOn && !rx.partOn {
			return nil
		}
		rx.hlen = 0
		return rx.protoErr(errStreamLost)
	}
	return lostError(err)
}

// protoErr handles a protocol violation by the peer: it queues the
// Terminate siw would send (with the offending header attached as siw
// does, control word in RFC 5040 layout) and fails the connection.
func (rx *receiver) protoErr(err error) error {
	cause, _ := wire.CauseOf(err)
	te := &TerminateError{Layer: uint8(cause.Layer), EType: cause.EType, ECode: cause.ECode, Reason: reasonOf(err)}
	var attach [wire.MaxTerminateAttachLen]byte
	t := wire.SiwTerminate(cause, rx.hdr[:rx.hlen], wire.TermLayoutRFC, attach[:0])
	fpdu, aerr := wire.AppendTerminate(make([]byte, 0, wire.TerminateHeaderLen+wire.MaxTerminateAttachLen+7), &t, rx.crcOn)
	if aerr != nil {
		fpdu = nil
	}
	rx.c.fail(te, fpdu)
	return te
}

// --- Sends ---------------------------------------------------------------

func (rx *receiver) send(h *wire.Header, n, l int) error {
	if h.Opcode == wire.OpSendInvalidate || h.Opcode == wire.OpSendSEInvalidate {
		return rx.protoErr(errCannotInvalidate)
	}
	if !rx.sendOn {
		if err := rx.takeRecv(h); err != nil {
			return rx.protoErr(err)
		}
		if !rx.resolveRecv() {
			rx.completeRecv(driver.StatusLocalProtection, 0, false)
			return rx.protoErr(errRecvProtection)
		}
		rx.sendOn, rx.sendOp, rx.sendMO = true, h.Opcode, 0
	} else {
		switch {
		case h.MSN != rx.sendMSN:
			return rx.protoErr(errMSN)
		case h.MO != rx.sendMO:
			return rx.protoErr(errMO)
		case h.Opcode != rx.sendOp:
			return rx.protoErr(errIntersect)
		}
	}
	// MO is 32 bits: a message can never exceed 4 GiB - 1, whatever the
	// receive's capacity.
	if uint64(rx.sendMO)+uint64(n) > min(rx.dstCap, math.MaxUint32) {
		rx.completeRecv(driver.StatusLocalLength, 0, false)
		return rx.protoErr(errRecvTooSmall)
	}
	rx.part = payloadPart{op: h.Opcode, left: n, n: n, l: l, last: h.Last}
	if n > 0 {
		rx.nextPiece()
	}
	rx.partOn = true
	return rx.payloadRest()
}

// nextPiece makes the next piece of the receive's memory, as far as the
// Send's payload goes, the part's destination. The capacity check in
// send makes sure there is one.
func (rx *receiver) nextPiece() {
	p := &rx.part
	d := rx.dst[rx.dstIdx]
	k := min(p.left, len(d)-rx.dstOff)
	p.dst = d[rx.dstOff : rx.dstOff+k]
	p.left -= k
	rx.dstOff += k
	if rx.dstOff == len(d) {
		rx.dstIdx++
		rx.dstOff = 0
	}
}

// sendDone ends a Send segment whose payload and trailer are in.
func (rx *receiver) sendDone(p *payloadPart) {
	rx.sendMO += uint32(p.n)
	if p.last {
		se := p.op == wire.OpSendSE
		rx.completeRecv(driver.StatusSuccess, rx.sendMO, se)
		rx.sendMSN++
		rx.sendOn = false
	}
}

// takeRecv takes the oldest posted receive (of the QP or its SRQ) for
// the Send whose first segment h is, checking in siw's order: a receive
// must exist, then MSN and MO.
func (rx *receiver) takeRecv(h *wire.Header) error {
	check := func() error {
		if h.MSN != rx.sendMSN {
			return errMSN
		}
		if h.MO != 0 {
			return errMO
		}
		return nil
	}
	if s := rx.c.srq; s != nil {
		// The QP may hold no more of the SRQ's receives than it could
		// have posted on its own queue (IAAttr.SRQQPLimit): a peer that
		// sends beyond what it was granted then breaks its own
		// connection only, instead of emptying the SRQ that every other
		// connection on it depends on. A receive counts from here until
		// the consumer takes its event (QPConfig.SRQHeld).
		if s.Posted() == 0 || rx.c.srqHeld != nil && rx.c.srqHeld.Load() >= rx.c.srqLimit {
			return errNoRecv
		}
		if err := check(); err != nil {
			return err
		}
		wr, ok := s.take()
		if !ok {
			return errNoRecv
		}
		if rx.c.srqHeld != nil {
			rx.c.srqHeld.Add(1)
		}
		rx.recv, rx.haveRecv = wr, true
		return nil
	}
	q := rx.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rq.len() == 0 {
		return errNoRecv
	}
	if err := check(); err != nil {
		return err
	}
	rx.recv, rx.haveRecv = q.rq.pop(), true
	return nil
}

// resolveRecv turns the taken receive's segments into the memory the
// Send lands in, checked against the PD of the queue it was posted to.
func (rx *receiver) resolveRecv() bool {
	pd := rx.c.pd
	if rx.c.srq != nil {
		pd = rx.c.srq.pd
	}
	rx.ndst, rx.dstIdx, rx.dstOff, rx.dstCap = 0, 0, 0, 0
	for _, s := range rx.recv.sge[:rx.recv.n] {
		if s.Length == 0 {
			continue
		}
		_, b, err := localSlice(pd, s, true)
		if err != nil {
			return false
		}
		rx.dst[rx.ndst] = b
		rx.ndst++
		rx.dstCap += uint64(len(b))
	}
	return true
}

// completeRecv completes the taken receive on the QP's receive CQ (for
// an SRQ receive too: the consuming QP's).
func (rx *receiver) completeRecv(st driver.Status, length uint32, solicited bool) {
	if cq := rx.c.rcq; cq != nil {
		c := driver.Completion{WRID: rx.recv.id, QPTag: rx.c.tag, Op: driver.OpRecv, Status: st}
		if st == driver.StatusSuccess {
			c.Length, c.Solicited = length, solicited
		}
		cq.push(c)
	} else if rx.c.srqHeld != nil && rx.c.srq != nil {
		rx.c.srqHeld.Add(-1) // no completion: nobody else will count it off
	}
	rx.dropRecv()
}

// dropRecv forgets the taken receive.
func (rx *receiver) dropRecv() {
	rx.haveRecv = false
	rx.recv = recvWR{}
	clear(rx.dst[:])
}

// --- RDMA Write ------------------------------------------------------------

func (rx *receiver) write(h *wire.Header, n, l int) error {
	var mr *MR
	switch {
	case rx.tagOn && rx.tagOp != wire.OpWrite:
		return rx.protoErr(errIntersect)
	case rx.tagOn:
		if h.STag != rx.tagSTag {
			return rx.protoErr(errTInvalidSTag)
		}
		if h.TO != rx.tagTO {
			return rx.protoErr(errTBounds)
		}
		mr = rx.tagMR
	case n == 0 && h.Last && !rx.started && rx.c.info.RTR == RTRWrite:
		// The peer-to-peer RTR frame (siw: zero-length Write to STag 1).
		return rx.trailer(l)
	default:
		mr = rx.c.q.ia.stags.lookup(h.STag)
		switch {
		case mr == nil:
			return rx.protoErr(errTInvalidSTag)
		case mr.pd != rx.c.pd:
			return rx.protoErr(errTNotAssoc)
		case mr.access&driver.AccessRemoteWrite == 0:
			return rx.protoErr(errTAccess) // siw: DDP has no access-rights code
		}
	}
	if h.TO > math.MaxUint64-uint64(n) {
		return rx.protoErr(errTWrap)
	}
	dst, ok := mr.slice(h.TO, uint32(n))
	if !ok {
		return rx.protoErr(errTBounds)
	}
	rx.part = payloadPart{op: wire.OpWrite, dst: dst, n: n, l: l, last: h.Last, stag: h.STag, next: h.TO + uint64(n), mr: mr}
	rx.partOn = true
	return rx.payloadRest()
}

// payloadPart is an FPDU whose payload is being placed (receiver.part):
// a Write, a Send or a Read Response segment.
type payloadPart struct {
	op   wire.Opcode
	dst  []byte // the destination piece not filled yet
	left int    // payload bytes beyond dst (a Send spanning pieces)
	n    int    // the segment's payload bytes
	l    int    // ULPDU_Length
	last bool
	// A Write's: its STag, the TO its message's next segment must carry,
	// and its region.
	stag uint32
	next uint64
	mr   *MR
}

// errPartial is payloadRest's answer to a waiter when the rest of the
// FPDU has not arrived yet: the waiter waits for the socket and carries
// on (or leaves it to the next holder of the role).
var errPartial = errors.New("iwarp: FPDU placed in part")

// payloadRest places the rest of the payload of the FPDU in rx.part,
// checks its trailer and ends the segment. The receive goroutine waits
// for the socket as it goes; a waiter places what has arrived, straight
// from the socket into registered memory, and returns errPartial when
// more is to come. So a waiter never waits for the peer in the middle of
// an FPDU, yet neither needs to know beforehand that all of it has
// arrived (which took it a SIOCINQ per look and a watchdog for the rest
// that could not come while the socket's receive memory was full), nor
// reads the FPDU's start through the read-ahead first.
func (rx *receiver) payloadRest() error {
	p := &rx.part
	for {
		if rx.nowait {
			if err := rx.placeNow(); err != nil {
				return err
			}
		} else if err := rx.readInto(p.dst); err != nil {
			return rx.readErr(err, false)
		}
		if p.left == 0 {
			break
		}
		rx.nextPiece()
	}
	if err := rx.trailer(p.l); err != nil {
		return err
	}
	done := *p
	rx.part, rx.partOn = payloadPart{}, false
	switch done.op {
	case wire.OpWrite:
		if done.last {
			rx.tagOn, rx.tagMR = false, nil
		} else {
			rx.tagOn, rx.tagOp, rx.tagSTag, rx.tagTO, rx.tagMR = true, wire.OpWrite, done.stag, done.next, done.mr
		}
	case wire.OpReadResponse:
		rx.readResponseDone(&done)
	default:
		rx.sendDone(&done)
	}
	return nil
}

// placeNow places, without waiting, what has arrived of the payload in
// rx.part: what the read-ahead holds, then what the socket has. It
// returns nil once the destination piece is filled and, after the last
// piece, the trailer is read ahead; errPartial while they are not.
func (rx *receiver) placeNow() error {
	p := &rx.part
	n := copy(p.dst, rx.buf[rx.r:rx.w])
	rx.r += n
	rx.partPlaced(n)
	for len(p.dst) > 0 || p.left == 0 && rx.w-rx.r < wire.TrailerLen(p.l) {
		got, err := rx.partNow()
		if err != nil {
			return rx.readErr(err, false)
		}
		if !got {
			return errPartial
		}
	}
	return nil
}

// partPlaced records n more payload bytes of the segment in place.
func (rx *receiver) partPlaced(n int) {
	p := &rx.part
	if rx.crcOn {
		rx.crc = rx.crc.Update(p.dst[:n])
	}
	p.dst = p.dst[n:]
}

// --- RDMA Read Response (we are the requester) ----------------------------

func (rx *receiver) readResponse(h *wire.Header, n, l int) error {
	c := rx.c
	if rx.tagOn && rx.tagOp != wire.OpReadResponse {
		return rx.protoErr(errIntersect)
	}
	if !rx.tagOn {
		rx.q.mu.Lock()
		if c.reads.len() == 0 {
			rx.q.mu.Unlock()
			return rx.protoErr(errNoRead)
		}
		rx.rd, rx.rdDone = *c.reads.front(), 0
		rx.q.mu.Unlock()
	}
	rd := rx.rd
	// siw_rresp_check_ntoh: the Response must match the oldest Read.
	switch {
	case h.STag != rd.sinkSTag:
		return rx.failRead(driver.StatusBadResponse, errRRSTag)
	case h.TO != rd.sinkTO+uint64(rx.rdDone):
		return rx.failRead(driver.StatusBadResponse, errRRTO)
	case uint64(rx.rdDone)+uint64(n) > uint64(rd.total), h.Last && rx.rdDone+uint32(n) != rd.total:
		return rx.failRead(driver.StatusBadResponse, errRRLength)
	}
	if rx.rdDone == 0 && rd.sinkMR != nil && rd.sinkMR.pd.lookup(rd.sinkSTag) != rd.sinkMR {
		// The sink was deregistered while the Read was outstanding.
		return rx.failRead(driver.StatusLocalProtection, errRRSink)
	}
	var dst []byte
	if n > 0 {
		dst = rd.seg[0][rx.rdDone : rx.rdDone+uint32(n)]
	}
	rx.part = payloadPart{op: wire.OpReadResponse, dst: dst, n: n, l: l, last: h.Last}
	rx.partOn = true
	return rx.payloadRest()
}

// readResponseDone ends a Read Response segment whose payload and
// trailer are in; the last one completes the Read.
func (rx *receiver) readResponseDone(p *payloadPart) {
	c := rx.c
	rx.rdDone += uint32(p.n)
	if !p.last {
		rx.tagOn, rx.tagOp = true, wire.OpReadResponse
		return
	}
	rd := rx.rd
	rx.tagOn, rx.rd = false, nil
	q := rx.q
	q.mu.Lock()
	c.reads.pop()
	rd.status = driver.StatusSuccess
	c.readDoneLocked(rd)
	c.kickLocked() // an ORD slot is free; a fenced WR may go
	q.mu.Unlock()
}

// failRead completes the Read being answered in error and terminates:
// failed requests always complete, whatever happens to the connection.
func (rx *receiver) failRead(st driver.Status, err error) error {
	q := rx.q
	q.mu.Lock()
	rx.c.reads.pop() // rx.rd is the oldest
	rx.rd.status = st
	rx.c.readDoneLocked(rx.rd)
	q.mu.Unlock()
	rx.rd = nil
	return rx.protoErr(err)
}

// --- RDMA Read Request (we are the responder) -----------------------------

func (rx *receiver) readRequest(h *wire.Header, l int) error {
	// The whole FPDU is a header: check the CRC before acting on it.
	if err := rx.trailer(l); err != nil {
		return err
	}
	switch {
	case !h.Last:
		return rx.protoErr(errRReqSegmented)
	case h.MSN != rx.rreqMSN:
		return rx.protoErr(errMSN)
	case h.MO != 0:
		return rx.protoErr(errMO)
	}
	var rr wire.ReadRequest
	_ = rr.Parse(rx.hdr[wire.UntaggedHeaderLen:rx.hlen])
	c := rx.c
	q := rx.q
	if int(c.irdUsed.Load()) >= c.info.IRD {
		return rx.protoErr(errIRD)
	}
	var src []byte
	if rr.Size > 0 {
		mr := c.q.ia.stags.lookup(rr.SourceSTag)
		switch {
		case mr == nil:
			return rx.protoErr(errRInvalidSTag)
		case mr.pd != c.pd:
			return rx.protoErr(errRNotAssoc)
		case mr.access&driver.AccessRemoteRead == 0:
			return rx.protoErr(errRAccess)
		case rr.SourceTO > math.MaxUint64-uint64(rr.Size):
			return rx.protoErr(errRWrap)
		}
		var ok bool
		if src, ok = mr.slice(rr.SourceTO, rr.Size); !ok {
			return rx.protoErr(errRBounds)
		}
	}
	q.mu.Lock()
	c.rresp.push(readResp{sinkSTag: rr.SinkSTag, sinkTO: rr.SinkTO, src: src})
	c.irdUsed.Add(1)
	c.kickLocked()
	q.mu.Unlock()
	rx.rreqMSN++
	return nil
}

// --- Terminate ---------------------------------------------------------------

// terminate reads a Terminate from the peer; it always ends the
// connection, and is never answered with a Terminate.
func (rx *receiver) terminate(n, l int) error {
	body := rx.termBuf[:0]
	body = append(body, rx.hdr[wire.UntaggedHeaderLen:wire.TerminateHeaderLen]...)
	if n > wire.MaxTerminateAttachLen {
		return &TerminateError{Remote: true, Malformed: true, Reason: "Terminate with an oversized attachment"}
	}
	att := rx.termBuf[len(body) : len(body)+n]
	if err := rx.readInto(att); err != nil {
		return &TerminateError{Remote: true, Malformed: true, Reason: "stream ended inside a Terminate"}
	}
	body = body[:len(body)+n]
	var t wire.Terminate
	perr := t.Parse(body)
	ctl := decodeTermControl(t.Control)
	te := &TerminateError{Remote: true, Layer: uint8(ctl.Layer), EType: ctl.EType, ECode: ctl.ECode}
	tl := wire.TrailerLen(l)
	if err := rx.fill(tl); err != nil || wire.CheckTrailer(rx.buf[rx.r:rx.r+tl], l, rx.crc, rx.crcOn) != nil {
		te.Malformed, te.Reason = true, "Terminate with a bad CRC or cut short"
	} else if perr != nil {
		te.Malformed, te.Reason = true, "Terminate with a malformed attachment"
	}
	return te
}

// The read-ahead buffers of receivers that wait for their socket with
// nothing read ahead go back to this pool, so that an idle connection
// holds none (see readIdle).
var rxBufs = sync.Pool{New: func() any { return new(rxBuffer) }}

// rxBuffer is a read-ahead buffer; the pool holds pointers to them, which
// go in and out without allocating.
type rxBuffer [rxBufSize]byte

// takeBuf gives the receiver a read-ahead buffer from the pool.
func (rx *receiver) takeBuf() {
	rx.bufp = rxBufs.Get().(*rxBuffer)
	rx.buf = rx.bufp[:]
}

// dropBuf gives the receiver's read-ahead buffer back to the pool.
func (rx *receiver) dropBuf() {
	if rx.bufp != nil {
		rxBufs.Put(rx.bufp)
	}
	rx.bufp, rx.buf = nil, nil
}
