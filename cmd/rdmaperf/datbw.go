package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// The DAT bandwidth test is ib_write_bw's: the client RDMA-writes size
// bytes at a time into one registered buffer of the server's (advertised
// in the accept private data), keeping up to --depth Writes outstanding
// and asking for a completion on every quarter of them. The clock runs
// from the first timed post to the completion of the last Write (on an RC
// connection that means the data is placed). Small Sends mark the start
// and end of the timed Writes for the server, which answers the end with
// a Send of its own before the client disconnects. The end mark carries
// the client's timed span (nanoseconds, big-endian): a server that was not
// scheduled while the Writes ran sees both marks at once, and reports
// the longer of its own span and the client's.

// Cookies of the control Sends and receives.
const (
	cookieStart = 1 << 62
	cookieDone  = cookieStart + 1
	cookieAck   = cookieStart + 2
)

// writeBW is the client side.
func writeBW(e *datEnd, addr netip.AddrPort, p params, depth int, rep *report) error {
	got, err := e.createEP(p, depth+2)
	if err != nil {
		return err
	}
	depth = max(1, min(depth, got-2))
	src, err := e.register(int(p.size), dat.MemPrivLocalRead|dat.MemPrivLocalWrite)
	if err != nil {
		return err
	}
	for i := range src.buf {
		src.buf[i] = byte(i)
	}
	ctl, err := e.register(2*ctrlLen, dat.MemPrivLocalRead|dat.MemPrivLocalWrite)
	if err != nil {
		return err
	}
	if err := e.ep.PostRecv(ctl.iov(0, ctrlLen), cookieAck, dat.CompletionDefault); err != nil {
		return err
	}
	pd, err := e.connect(addr, p)
	if err != nil {
		return err
	}
	adv, err := parseAdvert(pd)
	if err != nil {
		return err
	}
	if adv.len < p.size {
		return fmt.Errorf("the server's buffer has %d bytes, want %d", adv.len, p.size)
	}
	remote := dat.RMRTriplet{Addr: adv.addr, Length: p.size, Context: adv.rkey}
	send := func(cookie uint64) error {
		return e.ep.PostSend(ctl.iov(ctrlLen, ctrlLen), cookie, dat.CompletionSuppress)
	}
	if err := e.writeN(int(p.warmup), depth, src, remote); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := send(cookieStart); err != nil {
		return err
	}
	t0 := time.Now()
	if err := e.writeN(int(p.iters), depth, src, remote); err != nil {
		return err
	}
	rep.elapsed = time.Since(t0)
	rep.bytes = int64(p.iters) * int64(p.size)
	binary.BigEndian.PutUint64(ctl.buf[ctrlLen:2*ctrlLen], uint64(rep.elapsed))
	if err := send(cookieDone); err != nil {
		return err
	}
	if _, err := e.nextRecv(); err != nil {
		return fmt.Errorf("waiting for the server's acknowledgement: %w", err)
	}
	return nil
}

// writeN posts n RDMA Writes of the whole of src with up to depth
// outstanding and returns when all have completed. Completions come in
// post order, so the one for Write k retires every suppressed Write
// before it.
func (e *datEnd) writeN(n, depth int, src *region, remote dat.RMRTriplet) error {
	every := max(1, depth/4)
	iov := src.iov(0, len(src.buf))
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < depth {
			flags := dat.CompletionSuppress
			if (posted+1)%every == 0 || posted == n-1 {
				flags = dat.CompletionDefault
			}
			if err := e.ep.PostRDMAWrite(iov, uint64(posted), remote, flags); err != nil {
				return fmt.Errorf("RDMA Write %d: %w", posted, err)
			}
			posted++
		}
		c, err := e.next()
		if err != nil {
			return err
		}
		if c.Op == dat.DTORDMAWrite {
			done = int(c.Cookie) + 1
		}
	}
	return nil
}

// serveWriteBW is the server side: advertise the buffer, wait for the
// start and end marks, acknowledge the end.
func serveWriteBW(e *datEnd, cr *dat.CR, p params, rep *report) error {
	sink, err := e.register(int(p.size), dat.MemPrivLocalWrite|dat.MemPrivRemoteWrite)
	if err != nil {
		cr.Reject(nil)
		return err
	}
	ctl, err := e.register(3*ctrlLen, dat.MemPrivLocalRead|dat.MemPrivLocalWrite)
	if err != nil {
		cr.Reject(nil)
		return err
	}
	for i, c := range []uint64{cookieStart, cookieDone} {
		if err := e.ep.PostRecv(ctl.iov(i*ctrlLen, ctrlLen), c, dat.CompletionDefault); err != nil {
			cr.Reject(nil)
			return err
		}
	}
	adv := advert{addr: sink.addr, rkey: sink.rkey, len: uint32(len(sink.buf))}
	if err := cr.Accept(e.ep, adv.append(nil)); err != nil {
		return err
	}
	if _, err := e.awaitEstablished(); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	var t0 time.Time
	for _, want := range []uint64{cookieStart, cookieDone} {
		c, err := e.nextRecv()
		if err != nil {
			return err
		}
		if c.Cookie != want {
			return fmt.Errorf("receive %#x completed, want %#x", c.Cookie, want)
		}
		if want == cookieStart {
			t0 = time.Now()
		}
	}
	rep.elapsed = max(time.Since(t0), time.Duration(binary.BigEndian.Uint64(ctl.buf[ctrlLen:2*ctrlLen])))
	rep.bytes = int64(p.iters) * int64(p.size)
	if err := e.ep.PostSend(ctl.iov(2*ctrlLen, ctrlLen), cookieAck, dat.CompletionSuppress); err != nil {
		return err
	}
	return e.awaitDisconnect(10 * time.Second)
}
