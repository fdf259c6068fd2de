package dat_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// childEnv makes the test binary act as a DAT server process instead of
// running tests (see TestMain).
const childEnv = "RDMANET_DAT_TEST_CHILD"

// childMain is the server process: it listens on a PSP, prints the
// qualifier, accepts one request with the private data "pong:" plus the
// request's data, waits for the client to disconnect, and exits 0.
func childMain() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	ia, err := dat.OpenIA(context.Background(), "lo", nil)
	if err != nil {
		return fail(err)
	}
	defer ia.Close(dat.CloseAbrupt)
	pz, err := ia.CreatePZ()
	if err != nil {
		return fail(err)
	}
	evd, err := ia.CreateEVD(16, dat.EVDDefault)
	if err != nil {
		return fail(err)
	}
	psp, err := ia.CreatePSPAny(evd, dat.PSPConsumer, nil)
	if err != nil {
		return fail(err)
	}
	fmt.Printf("qual %d\n", psp.Qual())
	next := func(want dat.EventNumber) (dat.Event, error) {
		ev, _, err := evd.Wait(dat.TimeoutOf(20*time.Second), 1)
		if err == nil && ev.Number != want {
			err = fmt.Errorf("got %v, want %v", ev.Number, want)
		}
		return ev, err
	}
	ev, err := next(dat.ConnectionRequestEvent)
	if err != nil {
		return fail(err)
	}
	p, err := ev.CR.CR.Query()
	if err != nil {
		return fail(err)
	}
	ep, err := ia.CreateEP(pz, evd, evd, evd, nil)
	if err != nil {
		return fail(err)
	}
	// IB and RoCE deliver the request data zero-padded to the field's
	// size (wirePD); "ping" has no trailing zeros of its own.
	if err := ev.CR.CR.Accept(ep, append([]byte("pong:"), bytes.TrimRight(p.PrivateData, "\x00")...)); err != nil {
		return fail(err)
	}
	if _, err := next(dat.ConnectionEventEstablished); err != nil {
		return fail(err)
	}
	if _, err := next(dat.ConnectionEventDisconnected); err != nil {
		return fail(err)
	}
	return 0
}

// TestSeparateProcesses runs the passive side in another process, so the
// connection crosses a real process boundary over loopback TCP.
func TestSeparateProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var qual dat.ConnQual
	_, err = fmt.Sscanf(strings.TrimSpace(line), "qual %d", &qual)
	require.NoError(t, err)

	c := newSide(t, "lo")
	ep := c.ep(t)
	require.NoError(t, ep.Connect(loopback, qual, dat.TimeoutOf(eventWait), []byte("ping"), dat.QoSBestEffort, dat.ConnectDefault))
	ev := waitFor(t, c.evd, dat.ConnectionEventEstablished)
	requirePD(t, c.ia, []byte("pong:ping"), ev.Conn.PrivateData)
	require.NoError(t, ep.Disconnect(dat.CloseGraceful))
	waitFor(t, c.evd, dat.ConnectionEventDisconnected)
	waited = true
	require.NoError(t, cmd.Wait(), "server process failed")
}
