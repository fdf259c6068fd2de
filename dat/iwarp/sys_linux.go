//go:build linux

package iwarp

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// autoMULPDU sizes FPDUs like siw (siw_update_tcpseg): an FPDU fills at
// most one TCP segment of the connection's MSS, rounded down to a multiple
// of 8, so MULPDU = MSS&^7 - 6 (ULPDU_Length field and CRC). On loopback
// (MTU 64 KiB) that is 65474, on Ethernet 1442. If the MSS cannot be
// read, Ethernet's 1448 is assumed.
func autoMULPDU(tc *net.TCPConn) int {
	mss := 1448
	if rc, err := tc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG); err == nil && v > 0 {
				mss = v
			}
		})
	}
	return min(max(mss&^7-wire.ULPDULengthLen-wire.CRCLen, MinMULPDU), wire.MaxULPDULength)
}

// rawWriter does single non-blocking writev attempts on the socket, for
// the inline path of PostSend (which must never wait for the peer).
type rawWriter struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool // s.rawWritev, bound once so calls do not allocate
	iov   []syscall.Iovec
	n     int
	errno syscall.Errno
}

// maxIOV is the kernel's IOV_MAX.
const maxIOV = 1024

// writeNow writes as much of s.wbuf as the socket takes without waiting.
func (s *sender) writeNow() (ok bool, err error) {
	w := &s.raw
	if w.rc == nil {
		if w.rc, err = s.c.tc.SyscallConn(); err != nil {
			return false, err
		}
		w.fn = w.writev
	}
	for len(s.wbuf) > 0 {
		w.iov = w.iov[:0]
		total := 0
		for _, b := range s.wbuf {
			if len(b) == 0 {
				continue
			}
			var v syscall.Iovec
			v.Base = &b[0]
			v.SetLen(len(b))
			w.iov = append(w.iov, v)
			total += len(b)
			if len(w.iov) == maxIOV {
				break
			}
		}
		if len(w.iov) == 0 {
			s.wbuf = s.wbuf[:0]
			break
		}
		w.n, w.errno = 0, 0
		for _, b := range s.wbuf[:min(len(s.wbuf), maxIOV)] {
			raceRead(b)
		}
		err = w.rc.Write(w.fn)
		clear(w.iov)
		if err != nil {
			return false, err
		}
		switch w.errno {
		case 0:
		case syscall.EAGAIN, syscall.EINTR:
			return false, nil
		default:
			return false, w.errno
		}
		consume(&s.wbuf, w.n)
		if w.n < total {
			return false, nil // the socket buffer is full
		}
	}
	return true, nil
}

func (w *rawWriter) writev(fd uintptr) bool {
	r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
	w.n, w.errno = int(r), e
	if e != 0 {
		w.n = 0
	}
	return true // one attempt: never wait for the socket
}

// rawReader does readv on the socket for the receiver, so payload lands in
// its destination and the bytes after it (trailer, next header) in the
// read-ahead buffer with one system call.
type rawReader struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	iov   [2]syscall.Iovec
	niov  int
	n     int
	errno syscall.Errno
}

// readDirect reads at least one byte into p (straight from the socket),
// and whatever else is available up to the read-ahead buffer's free space
// into rx.buf[rx.w:]. The read-ahead must be empty. It returns the bytes
// placed in p.
func (rx *receiver) readDirect(p []byte) (int, error) {
	if rx.r != rx.w { // not expected: readInto drains the read-ahead first
		n := copy(p, rx.buf[rx.r:rx.w])
		rx.r += n
		return n, nil
	}
	w := &rx.raw
	if w.rc == nil {
		rc, err := rx.tc.SyscallConn()
		if err != nil {
			return rx.tc.Read(p)
		}
		w.rc, w.fn = rc, w.readv
	}
	rx.r, rx.w = 0, 0
	w.aim(p, rx.buf)
	w.n, w.errno = 0, 0
	err := w.rc.Read(w.fn)
	w.iov = [2]syscall.Iovec{}
	switch {
	case err != nil:
		return 0, err
	case w.errno != 0:
		return 0, w.errno
	case w.n == 0:
		return 0, io.EOF
	}
	if w.n <= len(p) {
		raceWrite(p[:w.n])
		return w.n, nil
	}
	raceWrite(p)
	rx.w = w.n - len(p)
	raceWrite(rx.buf[:rx.w])
	return len(p), nil
}

// aim points the next readv at p and then ahead (the read-ahead
// buffer's free space), leaving out an empty p.
func (w *rawReader) aim(p, ahead []byte) {
	w.niov = 0
	for _, b := range [2][]byte{p, ahead} {
		if len(b) > 0 {
			w.iov[w.niov].Base = &b[0]
			w.iov[w.niov].SetLen(len(b))
			w.niov++
		}
	}
}

func (w *rawReader) readv(fd uintptr) bool {
	w.readvNow(fd)
	return w.errno != syscall.EAGAIN // else wait until readable
}

// readvNow is one readv (retried if a signal cut it short) into w.iov:
// w.n bytes, or the failure in w.errno (EAGAIN when nothing has arrived).
func (w *rawReader) readvNow(fd uintptr) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.niov))
		if e == syscall.EINTR {
			continue
		}
		w.n, w.errno = int(r), e
		if e != 0 {
			w.n = 0
		}
		return
	}
}

// partReadv is one readv, without waiting, of the FPDU a waiter is
// placing (rx.part): the rest of its payload straight into its
// destination and what follows into the read-ahead, or, with the
// payload placed, into the read-ahead only (its trailer). It reports
// false when nothing has arrived; partDone applies what it read.
func (rx *receiver) partReadv(fd uintptr) bool {
	w := &rx.raw
	if rx.buf == nil {
		rx.takeBuf()
	}
	if dst := rx.part.dst; len(dst) > 0 {
		// placeNow emptied the read-ahead into dst first.
		rx.r, rx.w = 0, 0
		w.aim(dst, rx.buf)
	} else {
		rx.compactAhead() // fewer than a trailer's bytes are read ahead
		w.aim(nil, rx.buf[rx.w:])
	}
	w.readvNow(fd)
	w.iov = [2]syscall.Iovec{}
	if w.errno == syscall.EAGAIN {
		return false
	}
	rx.partN, rx.partErrno = w.n, w.errno
	return true
}

// partDone applies a partReadv that read something or failed; errors are
// the socket's, as readWaiting returns them.
func (rx *receiver) partDone() error {
	switch {
	case rx.partErrno != 0:
		return rx.readError(rx.partErrno)
	case rx.partN == 0:
		return io.EOF
	}
	raceAcquire(rx.c.raceRx)
	n := rx.partN
	k := min(n, len(rx.part.dst))
	raceWrite(rx.part.dst[:k])
	rx.partPlaced(k)
	if n > k {
		raceWrite(rx.buf[rx.w : rx.w+n-k])
		rx.w += n - k
	}
	return nil
}

// partNow is placeNow's read: one partReadv, without waiting and
// whatever the read deadline. got reports that bytes came.
func (rx *receiver) partNow() (got bool, err error) {
	if rx.partNowFn == nil {
		rx.partNowFn = func(fd uintptr) { rx.partGot = rx.partReadv(fd) } // once: allocates
	}
	rx.partGot = false
	if err := rx.idle.Control(rx.partNowFn); err != nil {
		return false, err
	}
	if !rx.partGot {
		return false, nil
	}
	return true, rx.partDone()
}

// waitPart is a waiter's wait, in the network poller, for more of the
// Write it is placing (rx.part), which it places as it reads: until bytes
// come, the read deadline or a poke, as readWaiting.
func (rx *receiver) waitPart() error {
	if rx.partFn == nil {
		rx.partFn = rx.partStep // once: a method value allocates
	}
	if err := rx.waitPoked(rx.partFn); err != nil {
		return err
	}
	return rx.partDone()
}

// waitPoked runs step in the network poller's read loop of the socket,
// as a waiter's wait does: until step reports done, the read deadline, or
// a poke (errPoked; step checks for it).
func (rx *receiver) waitPoked(step func(fd uintptr) bool) error {
	rx.poked = false
	if err := rx.idle.Read(step); err != nil {
		return err
	}
	if rx.poked {
		return errPoked
	}
	return nil
}

// partStep is waitPart's step, called by the netpoller loop.
func (rx *receiver) partStep(fd uintptr) bool {
	if rx.c.rxc.poke.Load() {
		rx.poked = true
		return true
	}
	return rx.partReadv(fd)
}

// readFD is one read(2) of fd into b, retried if a signal cut it short.
func readFD(fd uintptr, b []byte) (int, error) {
	for {
		n, err := syscall.Read(int(fd), b)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// readError is the error a failed read of the socket returns, as
// package net would report it.
func (rx *receiver) readError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: rx.tc.LocalAddr(), Addr: rx.tc.RemoteAddr(), Err: os.NewSyscallError("read", err)}
}

// compactAhead moves what is read ahead to the start of the buffer, so
// that a read appends after it with all the free space.
func (rx *receiver) compactAhead() {
	if rx.r == rx.w {
		rx.r, rx.w = 0, 0
	} else if rx.r > 0 {
		rx.w = copy(rx.buf, rx.buf[rx.r:rx.w])
		rx.r = 0
	}
}

// peekNow copies into buf the bytes that have arrived on tc, without
// consuming them and without waiting: 0 if none have, the peer closed, or
// the socket cannot be peeked. It runs under Control, not Read: an
// admission goroutine may be parked in a Read of tc, holding its read
// lock until bytes arrive.
func peekNow(tc *net.TCPConn, buf []byte) int {
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == nil && m > 0 {
			n = m
		}
	})
	return n
}

// idleReader is tc's raw connection, for readIdle.
func idleReader(tc *net.TCPConn) syscall.RawConn {
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// readIdle reads what the socket has into an empty read-ahead buffer,
// waiting for it without holding the buffer: the buffer goes back to the
// pool while the socket has nothing (EAGAIN), and comes back when it
// does. It is net's own read loop (read; on EAGAIN wait in the netpoller;
// read again) with that one difference, so it costs no extra system call.
func (rx *receiver) readIdle() error {
	if rx.idleFn == nil {
		rx.idleFn = rx.idleRead // once: a method value allocates
	}
	rx.idleN, rx.idleErr = 0, nil
	err := rx.idle.Read(rx.idleFn)
	if rx.buf == nil {
		rx.takeBuf()
	}
	raceAcquire(rx.c.raceRx)
	switch {
	case err != nil:
		return err
	case rx.idleErr != nil:
		return rx.readError(rx.idleErr)
	case rx.idleN == 0:
		return io.EOF
	}
	rx.w = rx.idleN
	return nil
}

// idleRead is readIdle's step, called by the netpoller loop.
func (rx *receiver) idleRead(fd uintptr) bool {
	if rx.buf == nil {
		rx.takeBuf()
	}
	n, err := readFD(fd, rx.buf)
	if err == syscall.EAGAIN {
		rx.dropBuf()
		return false // wait until readable, then call again
	}
	rx.idleN, rx.idleErr = n, err
	return true
}

// readWaiting is a waiter's read (rxrole.go): it reads what the socket
// has after what is read ahead, waiting for it in the network poller as
// readIdle does (and like it, without holding the buffer while the
// read-ahead is empty), until the read deadline or a poke.
func (rx *receiver) readWaiting() error {
	if rx.waitFn == nil {
		rx.waitFn = rx.waitRead // once: a method value allocates
	}
	rx.compactAhead()
	rx.idleN, rx.idleErr, rx.poked = 0, nil, false
	err := rx.idle.Read(rx.waitFn)
	raceAcquire(rx.c.raceRx)
	switch {
	case err != nil:
		return err
	case rx.poked:
		return errPoked
	case rx.idleErr != nil:
		return rx.readError(rx.idleErr)
	case rx.idleN == 0:
		return io.EOF
	}
	rx.w += rx.idleN
	return nil
}

// readNow is a spinning waiter's read (rxrole.go): it reads what the
// socket has after what is read ahead, without waiting, and reports
// whether bytes came. Like readWaiting it does not keep the buffer while
// the read-ahead stays empty.
func (rx *receiver) readNow() (bool, error) {
	if rx.nowFn == nil {
		rx.nowFn = rx.nowRead // once: a method value allocates
	}
	rx.compactAhead()
	rx.idleN, rx.idleErr = 0, nil
	err := rx.idle.Read(rx.nowFn)
	switch {
	case err != nil:
		return false, err
	case rx.idleErr == syscall.EAGAIN:
		return false, nil
	case rx.idleErr != nil:
		return false, rx.readError(rx.idleErr)
	case rx.idleN == 0:
		return false, io.EOF
	}
	raceAcquire(rx.c.raceRx)
	rx.w += rx.idleN
	return true, nil
}

// nowRead is readNow's step: one attempt, never a wait in the netpoller.
func (rx *receiver) nowRead(fd uintptr) bool {
	if rx.buf == nil {
		rx.takeBuf()
	}
	n, err := readFD(fd, rx.buf[rx.w:])
	if err == syscall.EAGAIN && rx.w == 0 {
		rx.dropBuf()
	}
	rx.idleN, rx.idleErr = n, err
	return true
}

// waitRead is readWaiting's step, called by the netpoller loop.
func (rx *receiver) waitRead(fd uintptr) bool {
	if rx.c.rxc.poke.Load() {
		rx.poked = true
		return true
	}
	if rx.buf == nil {
		rx.takeBuf()
	}
	n, err := readFD(fd, rx.buf[rx.w:])
	if err == syscall.EAGAIN {
		if rx.w == 0 {
			rx.dropBuf()
		}
		return false // wait until readable, then call again
	}
	rx.idleN, rx.idleErr = n, err
	return true
}

// deferAccept asks the kernel to queue a connection for accept only once
// data arrived on it (TCP_DEFER_ACCEPT), for at most about wait. It is
// best effort: without it, the listener's own request timeout still drops
// silent connections.
func deferAccept(l net.Listener, wait time.Duration) {
	tl, ok := l.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	secs := max(1, int((wait+time.Second-1)/time.Second))
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, secs)
	})
}
