package dat_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// PSPOptions.Fallback: a plain TCP client of the PSP's port goes to
// Fallback with its bytes intact and never becomes a CR, while a DAT
// connection request on the same port still does.
func TestPSPFallback(t *testing.T) {
	iwarpOnly(t, "rdma_cm has no TCP socket to hand over")
	s, c := newSide(t, "lo"), newSide(t, "lo")
	got := make(chan net.Conn, 1)
	psp, err := s.ia.CreatePSPAny(s.evd, dat.PSPConsumer, &dat.PSPOptions{Fallback: func(nc net.Conn) { got <- nc }})
	require.NoError(t, err)
	defer psp.Free()

	tc, err := net.Dial("tcp", psp.Addr().String())
	require.NoError(t, err)
	defer tc.Close()
	_, err = io.WriteString(tc, "GET / HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	var nc net.Conn
	select {
	case nc = <-got:
	case <-time.After(eventWait):
		t.Fatal("Fallback was not called for a TCP client")
	}
	defer nc.Close()
	buf := make([]byte, len("GET / HTTP/1.0\r\n\r\n"))
	_, err = io.ReadFull(nc, buf)
	require.NoError(t, err)
	require.Equal(t, "GET / HTTP/1.0\r\n\r\n", string(buf))
	_, err = io.WriteString(nc, "ok")
	require.NoError(t, err)
	_, err = io.ReadFull(tc, buf[:2])
	require.NoError(t, err)
	require.Equal(t, "ok", string(buf[:2]))

	// The TCP client made no event; a DAT request still makes one.
	cep := c.ep(t)
	require.NoError(t, connectTo(cep, psp.Qual(), dat.TimeoutOf(eventWait), []byte("rdma")))
	req := waitFor(t, s.evd, dat.ConnectionRequestEvent)
	crp, err := req.CR.CR.Query()
	require.NoError(t, err)
	requirePD(t, s.ia, []byte("rdma"), crp.PrivateData)
	require.NoError(t, req.CR.CR.Reject(nil))
}
