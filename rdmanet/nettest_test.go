package rdmanet

import (
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
		x, y, err := connect(ListenConfig{IA: ia, Poll: poll}, Dialer{IA: ia, Timeout: 10 * time.Second, Poll: poll}, ia)
		if err != nil {
			return nil, nil, nil, err
		}
		return x, y, func() { x.Close(); y.Close() }, nil
	})
}
