package rdmanet

import (
	"io"
	"net"
	"os"
)

// Read reads from the receive ring into p. It blocks until data, the
// peer's FIN (io.EOF), an error, the read deadline or Close.
func (c *Conn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if err := c.enter(); err != nil {
		return 0, c.ioError(opError("read", c.laddr, c.raddr, err))
	}
	defer c.leave()
	c.releaseFirst() // the server cannot answer before it
	if len(p) == 0 {
		return 0, nil // as with TCP: an empty Read does not wait
	}
	avail, rs, err := c.awaitData()
	c.openSpares() // its first exchange is over
	if err != nil {
		if err == io.EOF {
			return 0, err
		}
		return 0, c.ioError(opError("read", c.laddr, c.raddr, err))
	}
	// [rCons, rCons+avail) is ours until we report consumption, so the
	// copy needs no lock; rs is the ring as it was when they arrived,
	// which holds them even if the peer switched rings since.
	n := 0
	for want := min(avail, uint64(len(p))); uint64(n) < want; {
		sp, seg := rs.at(c.rCons+uint64(n), want-uint64(n))
		n += copy(p[n:], sp.reg.buf[seg.Off:seg.End()])
	}
	c.consumed(uint64(n))
	return n, nil
}

// awaitData waits until the ring holds data and returns how much, and the
// ring's spans that hold it; or it returns the error a Read reports now.
// Callers hold readMu, which makes rCons theirs to read.
func (c *Conn) awaitData() (uint64, spans, error) {
	for {
		k := c.pr.kicks.Load()
		// An expired deadline fails the Read even if data is waiting, as
		// with package net.
		if c.rdl.passed() {
			return 0, spans{}, os.ErrDeadlineExceeded
		}
		c.mu.Lock()
		avail := c.rProd - c.rCons
		switch {
		case c.closedLocked():
			c.mu.Unlock()
			return 0, spans{}, net.ErrClosed
		case c.readShut:
			c.mu.Unlock()
			return 0, spans{}, io.EOF
		case avail > 0:
			rs := c.recv
			c.mu.Unlock()
			return avail, rs, nil
		case c.rFIN:
			c.mu.Unlock()
			return 0, spans{}, io.EOF
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, spans{}, err
		}
		grow := c.maybeGrowLocked()
		c.mu.Unlock()
		if grow > 0 {
			c.offerRing(grow)
		}
		if c.poll(k) {
			continue
		}
		select {
		case <-c.rwake:
		case <-c.rdl.done():
		case <-c.done:
		}
	}
}

// consumed advances the consumer position and returns credit if due.
func (c *Conn) consumed(n uint64) {
	c.mu.Lock()
	c.rCons += n
	c.st.bytesRead += n
	due := c.returnDueLocked()
	old := c.recv.retire(c.rCons)
	c.mu.Unlock()
	old.free()
	if due {
		c.flushControl()
	}
}

// WriteTo writes the received stream to w until io.EOF, straight from the
// receive ring: no intermediate buffer (io.WriterTo, used by io.Copy).
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if err := c.enter(); err != nil {
		return 0, c.ioError(opError("read", c.laddr, c.raddr, err))
	}
	defer c.leave()
	c.releaseFirst() // the server cannot answer before it
	var total int64
	for {
		avail, rs, err := c.awaitData()
		c.openSpares() // its first exchange is over
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, c.ioError(opError("read", c.laddr, c.raddr, err))
		}
		sp, seg := rs.at(c.rCons, avail)
		n, werr := w.Write(sp.reg.buf[seg.Off:seg.End()])
		total += int64(n)
		c.consumed(uint64(n))
		if werr != nil {
			return total, werr
		}
	}
}
