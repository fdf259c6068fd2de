package rdmanet

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rdmanet/rdmanet/dat"
)

// TestNettest runs golang.org/x/net/nettest's net.Conn conformance suite
// in full, on every provider (run it with -race).
func TestNettest(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) { nettestWith(t, ia, dat.PollPolicy{}) })
}

// TestNettestPollModes runs the suite again with every call busy-polling
// and with every call sleeping at once: Close, deadlines and CloseWrite
// must reach a blocked call whether it spins or sleeps.
func TestNettestPollModes(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		for _, p := range []dat.PollPolicy{{Mode: dat.PollBusy}, {Mode: dat.PollEvent}, {Spin: 100 * time.Microsecond}} {
			t.Run(p.Mode.String(), func(t *testing.T) { nettestWith(t, ia, p) })
		}
	})
}

func nettestWith(t *testing.T, ia string, poll dat.PollPolicy) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		lc := ListenConfig{IA: ia, Poll: poll}
		l, err := lc.Listen(context.Background(), "rdma", listenAddr(ia))
		if err != nil {
			return nil, nil, nil, err
		}
		defer l.Close()
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := l.Accept()
			ch <- res{c, err}
		}()
		d := Dialer{IA: ia, Timeout: 10 * time.Second, Poll: poll}
		if c1, err = d.Dial("rdma", l.Addr().String()); err != nil {
			return nil, nil, nil, err
		}
		r := <-ch
		if r.err != nil {
			c1.Close()
			return nil, nil, nil, r.err
		}
		c2 = r.c
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}
