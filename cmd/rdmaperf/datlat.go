package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// The DAT latency test is ib_send_lat's: a size-byte Send each way, one
// in flight. Each side keeps recvDepth receives posted in slots of its
// buffer (re-posting each as it completes) and sends from one more slot;
// Send completions are suppressed, so the only events are the receives.

// pingBuffers registers the receive slots and the send slot and posts the
// receives. It returns the region; the send slot is the last one.
func (e *datEnd) pingBuffers(size int) (*region, error) {
	r, err := e.register((recvDepth+1)*size, dat.MemPrivLocalRead|dat.MemPrivLocalWrite)
	if err != nil {
		return nil, err
	}
	for i := range recvDepth {
		if err := e.ep.PostRecv(r.iov(i*size, size), uint64(i), dat.CompletionDefault); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// pong waits for one receive and re-posts its slot.
func (e *datEnd) pong(r *region, size int) error {
	c, err := e.nextRecv()
	if err != nil {
		return err
	}
	if c.Length != uint32(size) || c.Cookie >= recvDepth {
		return fmt.Errorf("receive %d of %d bytes, want %d", c.Cookie, c.Length, size)
	}
	return e.ep.PostRecv(r.iov(int(c.Cookie)*size, size), c.Cookie, dat.CompletionDefault)
}

// sendLat is the client side.
func sendLat(e *datEnd, addr netip.AddrPort, p params, rep *report) error {
	if _, err := e.createEP(p, recvDepth); err != nil {
		return err
	}
	size := int(p.size)
	r, err := e.pingBuffers(size)
	if err != nil {
		return err
	}
	if _, err := e.connect(addr, p); err != nil {
		return err
	}
	send := r.iov(recvDepth*size, size)
	rep.lat = newLatencies(int(p.iters))
	var t0 time.Time
	for i := range p.warmup + p.iters {
		if i == p.warmup {
			t0 = time.Now()
		}
		t := time.Now()
		if err := e.ep.PostSend(send, uint64(i), dat.CompletionSuppress); err != nil {
			return err
		}
		if err := e.pong(r, size); err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		if i >= p.warmup {
			rep.lat.add(time.Since(t))
		}
	}
	rep.elapsed = time.Since(t0)
	rep.bytes = 2 * int64(p.iters) * int64(p.size)
	return nil
}

// serveSendLat is the server side: answer every receive with a Send.
func serveSendLat(e *datEnd, cr *dat.CR, p params, rep *report) error {
	size := int(p.size)
	r, err := e.pingBuffers(size)
	if err != nil {
		cr.Reject(nil)
		return err
	}
	if err := cr.Accept(e.ep, nil); err != nil {
		return err
	}
	if _, err := e.awaitEstablished(); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	send := r.iov(recvDepth*size, size)
	var t0 time.Time
	for i := range p.warmup + p.iters {
		if i == p.warmup {
			t0 = time.Now()
		}
		if err := e.pong(r, size); err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		if err := e.ep.PostSend(send, uint64(i), dat.CompletionSuppress); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(t0)
	rep.bytes = 2 * int64(p.iters) * int64(p.size)
	return e.awaitDisconnect(10 * time.Second)
}
