package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// The rdmanet tests run over a net.Conn exactly as an application would
// (--api tcp runs them over a TCP connection instead, the Go runtime's
// floor on the same machine):
// Write whole messages, read them back with io.ReadFull into a buffer of
// the message size (as rstream's recv_xfer does). The exchange is
//
//	client: params                      server: one byte (ready)
//	client: warmup messages             server: one byte (warm)
//	client: iters messages              server: one byte (bw), or the
//	                                            same bytes back (echo)
//	lat: warmup+iters round trips of size bytes
//
// and then the client closes and the server waits for EOF, so neither
// side's Close cuts the other's last read short.

// streamListen listens with rdmanet, or with TCP for --api tcp.
func streamListen(ctx context.Context, cfg *config) (net.Listener, error) {
	if cfg.api == apiTCP {
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", cfg.listenAddr())
	}
	lc := rdmanet.ListenConfig{IA: cfg.ia, Backlog: 1, BufferSize: cfg.buffer, Poll: cfg.wait, NoWriteImm: cfg.noImm}
	return lc.Listen(ctx, "rdma", cfg.listenAddr())
}

// streamDial dials with rdmanet, or with TCP for --api tcp.
func streamDial(ctx context.Context, cfg *config, addr string) (net.Conn, error) {
	if cfg.api == apiTCP {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	d := rdmanet.Dialer{IA: cfg.ia, NoDup: true, BufferSize: cfg.buffer, Poll: cfg.wait, NoWriteImm: cfg.noImm}
	return d.DialContext(ctx, "rdma", addr)
}

// rdmanetServer accepts one connection and serves the test it asks for.
func rdmanetServer(cfg *config, ready func(addr string)) (*report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	ln, err := streamListen(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	ready(ln.Addr().String())
	// Accept has no deadline of its own: the timeout closes the listener.
	defer context.AfterFunc(ctx, func() { ln.Close() })()
	conn, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	hdr := make([]byte, paramsLen)
	if _, err := io.ReadFull(conn, hdr); err != nil {
		return nil, fmt.Errorf("reading the parameters: %w", err)
	}
	p, err := parseParams(hdr)
	if err != nil {
		return nil, err
	}
	rep := &report{cfg: cfg, p: p}
	if _, err := conn.Write([]byte{1}); err != nil {
		return nil, err
	}
	if p.test == testBW {
		err = serveStreamBW(conn, p, rep)
	} else {
		err = serveStreamLat(conn, p, rep)
	}
	if err != nil {
		return nil, err
	}
	// The client closes once it has everything.
	if n, err := conn.Read(hdr[:1]); n != 0 || err != io.EOF {
		return nil, fmt.Errorf("waiting for the client to close: read %d bytes, %v", n, err)
	}
	rep.conn = connStats(cfg, conn)
	return rep, nil
}

func serveStreamBW(conn net.Conn, p params, rep *report) error {
	buf := make([]byte, p.size)
	for range p.warmup {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if _, err := conn.Write([]byte{1}); err != nil {
		return err
	}
	var t0 time.Time
	for i := range p.iters {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		if i == 0 {
			t0 = time.Now() // the server's clock starts with the first message in
		}
	}
	rep.bytes = int64(p.iters) * int64(p.size)
	if !p.echo {
		rep.elapsed = time.Since(t0)
		_, err := conn.Write([]byte{1})
		return err
	}
	for range p.iters {
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(t0)
	rep.bytes *= 2
	return nil
}

func serveStreamLat(conn net.Conn, p params, rep *report) error {
	buf := make([]byte, p.size)
	var t0 time.Time
	for i := range p.warmup + p.iters {
		if i == p.warmup {
			t0 = time.Now()
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(t0)
	rep.bytes = 2 * int64(p.iters) * int64(p.size)
	return nil
}

// rdmanetClient dials the server and runs the test.
func rdmanetClient(cfg *config) (*report, error) {
	addr, err := cfg.dialAddr()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	conn, err := streamDial(ctx, cfg, addr.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	p := paramsOf(cfg)
	if _, err := conn.Write(p.append(nil)); err != nil {
		return nil, err
	}
	if err := readByte(conn, "the server's ready byte"); err != nil {
		return nil, err
	}
	rep := &report{cfg: cfg, p: p}
	if p.test == testBW {
		err = streamBW(conn, p, rep)
	} else {
		err = streamLat(conn, p, rep)
	}
	if err != nil {
		return nil, err
	}
	rep.conn = connStats(cfg, conn)
	return rep, conn.Close()
}

func streamBW(conn net.Conn, p params, rep *report) error {
	buf := make([]byte, p.size)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range p.warmup {
		if _, err := conn.Write(buf); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := readByte(conn, "the end of the warm-up"); err != nil {
		return err
	}
	t0 := time.Now()
	for range p.iters {
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	rep.bytes = int64(p.iters) * int64(p.size)
	if p.echo {
		for i := range p.iters {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return fmt.Errorf("echoed message %d: %w", i, err)
			}
		}
		rep.bytes *= 2
	} else if err := readByte(conn, "the server's receipt"); err != nil {
		return err
	}
	rep.elapsed = time.Since(t0)
	return nil
}

func streamLat(conn net.Conn, p params, rep *report) error {
	buf := make([]byte, p.size)
	rep.lat = newLatencies(int(p.iters))
	var t0 time.Time
	for i := range p.warmup + p.iters {
		if i == p.warmup {
			t0 = time.Now()
		}
		t := time.Now()
		if _, err := conn.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
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

// readByte reads the one-byte signal the peer sends at a step's end.
func readByte(conn net.Conn, what string) error {
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// connStats is conn's Stats when --stats asks for them and conn is an
// rdmanet connection.
func connStats(cfg *config, conn net.Conn) *rdmanet.Stats {
	if c, ok := conn.(*rdmanet.Conn); ok && cfg.stats {
		s := c.Stats()
		return &s
	}
	return nil
}
