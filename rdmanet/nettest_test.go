package rdmanet

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// TestNettest runs golang.org/x/net/nettest's net.Conn conformance suite
// in full, on every provider (run it with -race).
func TestNettest(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			lc := ListenConfig{IA: ia}
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
			d := Dialer{IA: ia, Timeout: 10 * time.Second}
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
	})
}
