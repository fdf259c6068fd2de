package dat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// pollSide is a side whose IA waits with the given policy and whose one
// EVD takes DTO completions and software events.
func pollSide(t *testing.T, p dat.PollPolicy) side {
	t.Helper()
	ia, err := dat.OpenIA(context.Background(), "lo", &dat.IAOptions{Poll: p})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ia.Close(dat.CloseAbrupt)) })
	pz, err := ia.CreatePZ()
	require.NoError(t, err)
	evd, err := ia.CreateEVD(64, dat.EVDDefault|dat.EVDSoftware)
	require.NoError(t, err)
	return side{ia: ia, pz: pz, evd: evd}
}

// Every poll policy delivers the same events: a Send/Recv ping-pong in
// which each side waits for each completion, a wait that times out, and a
// wait ended by a software event posted while it sleeps or spins.
func TestPollPolicies(t *testing.T) {
	for _, p := range []dat.PollPolicy{
		{}, // the provider's advice
		{Mode: dat.PollAdaptive, Spin: 200 * time.Microsecond},
		{Mode: dat.PollBusy},
		{Mode: dat.PollEvent},
	} {
		t.Run(fmt.Sprintf("%v/spin=%v", p.Mode, p.Spin), func(t *testing.T) {
			c, s := pollSide(t, p), pollSide(t, p)
			attr := xferAttr(0, 0)
			cep, err := c.ia.CreateEP(c.pz, c.evd, c.evd, c.evd, attr)
			require.NoError(t, err)
			sep, err := s.ia.CreateEP(s.pz, s.evd, s.evd, s.evd, attr)
			require.NoError(t, err)
			psp := s.psp(t)
			cm := register(t, c, c.pz, 128, dat.MemPrivLocalWrite)
			sm := register(t, s, s.pz, 128, dat.MemPrivLocalWrite)
			require.NoError(t, cep.PostRecv([]dat.LMRTriplet{cm.seg(64, 64)}, 1, dat.CompletionDefault))
			require.NoError(t, sep.PostRecv([]dat.LMRTriplet{sm.seg(64, 64)}, 1, dat.CompletionDefault))
			require.NoError(t, cep.Connect(loopback, psp.Qual(), dat.TimeoutOf(eventWait), nil, dat.QoSBestEffort, dat.ConnectDefault))
			ev := waitFor(t, s.evd, dat.ConnectionRequestEvent)
			require.NoError(t, ev.CR.CR.Accept(sep, nil))
			waitFor(t, s.evd, dat.ConnectionEventEstablished)
			waitFor(t, c.evd, dat.ConnectionEventEstablished)

			// next waits for the next DTO completion, with the policy's
			// wait, and checks it.
			next := func(e *dat.EVD, op dat.DTOOp, cookie uint64) dat.DTOCompletion {
				t.Helper()
				ev, _, err := e.Wait(dat.TimeoutOf(eventWait), 1)
				require.NoError(t, err)
				require.Equal(t, dat.DTOCompletionEvent, ev.Number)
				require.Equal(t, dat.DTOSuccess, ev.DTO.Status)
				require.Equal(t, op, ev.DTO.Op)
				require.Equal(t, cookie, ev.DTO.Cookie)
				return ev.DTO
			}
			for i := range 50 {
				cm.buf[0] = byte(i)
				require.NoError(t, cep.PostSend([]dat.LMRTriplet{cm.seg(0, 8)}, 2, dat.CompletionDefault))
				next(c.evd, dat.DTOSend, 2)
				require.Equal(t, uint32(8), next(s.evd, dat.DTOReceive, 1).Length)
				require.Equal(t, byte(i), sm.buf[64])
				require.NoError(t, sep.PostRecv([]dat.LMRTriplet{sm.seg(64, 64)}, 1, dat.CompletionDefault))
				sm.buf[0] = byte(i) + 100
				require.NoError(t, sep.PostSend([]dat.LMRTriplet{sm.seg(0, 8)}, 2, dat.CompletionDefault))
				next(s.evd, dat.DTOSend, 2)
				next(c.evd, dat.DTOReceive, 1)
				require.Equal(t, byte(i)+100, cm.buf[64])
				require.NoError(t, cep.PostRecv([]dat.LMRTriplet{cm.seg(64, 64)}, 1, dat.CompletionDefault))
			}

			_, n, err := c.evd.Wait(dat.TimeoutOf(2*time.Millisecond), 1)
			requireCode(t, err, dat.TimeoutExpired, dat.NoSubtype)
			require.Zero(t, n)

			done := make(chan error, 1)
			go func() {
				ev, _, err := c.evd.Wait(dat.TimeoutOf(eventWait), 1)
				if err == nil && ev.Number != dat.SoftwareEvent {
					err = fmt.Errorf("woke with %v", ev.Number)
				}
				done <- err
			}()
			for {
				if p, err := c.evd.Query(); err == nil && p.Waiting {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			require.NoError(t, c.evd.PostSE("wake"))
			require.NoError(t, <-done)
		})
	}
}

// TestAdaptiveBackOff follows PollAdaptive's back-off. A wait much longer
// than the spin starts it; a wait that ends within four spin times of its
// start ends it where the provider advises a spin (a device's
// completions, which a spin cannot delay, or a CQ that progresses in the
// spin), and not where it advises none (completions a spin may hold
// back). The test's provider is made to advise one or the other.
func TestAdaptiveBackOff(t *testing.T) {
	// Generous times: the waits end on a timer, and only which side of
	// four spins (400 ms) they end on matters.
	const spin = 100 * time.Millisecond
	for _, advised := range []bool{false, true} {
		t.Run(fmt.Sprintf("advised=%v", advised), func(t *testing.T) {
			p := pollSide(t, dat.PollPolicy{Mode: dat.PollAdaptive, Spin: spin})
			advice := time.Duration(0)
			if advised {
				advice = time.Millisecond
			}
			dat.SetSpinAdvice(p.ia, advice)
			dat.NoProgress(p.evd)
			waitAfter := func(d time.Duration) {
				t.Helper()
				tm := time.AfterFunc(d, func() { p.evd.PostSE(nil) })
				defer tm.Stop()
				ev, _, err := p.evd.Wait(dat.TimeoutOf(eventWait), 1)
				require.NoError(t, err)
				require.Equal(t, dat.SoftwareEvent, ev.Number)
			}
			for range dat.WarmUp {
				waitAfter(spin / 2) // a fresh EVD's: sleeps at once, ends soon
			}
			waitAfter(6 * spin) // the spin runs out, and so does the exchange
			require.Equal(t, uint32(1), p.evd.SpinBackoff(), "after a spin that ran out")
			waitAfter(spin / 2) // sleeps at once (the back-off), ends soon
			want := uint32(1)
			if advised {
				want = 0
			}
			require.Equal(t, want, p.evd.SpinBackoff(), "after a short wait")
		})
	}
}

// TestFreshEVDBackOff follows a fresh EVD's waits: none spins before
// dat.WarmUp waits in a row ended soon after they began; then an EVD's
// first spin that runs out makes the next fresh EVD's
// first wait sleep at once, and a first spin that catches its event
// ends the back-off. Each EVD waits as its own would once it has spun.
func TestFreshEVDBackOff(t *testing.T) {
	// Generous times, as in TestAdaptiveBackOff: only whether an event
	// comes before or after the spin's end matters.
	const spin = 100 * time.Millisecond
	p := pollSide(t, dat.PollPolicy{Mode: dat.PollAdaptive, Spin: spin})
	dat.SetSpinAdvice(p.ia, time.Millisecond)
	fresh := func() *dat.EVD {
		t.Helper()
		e, err := p.ia.CreateEVD(64, dat.EVDDefault|dat.EVDSoftware)
		require.NoError(t, err)
		t.Cleanup(func() { e.Free() })
		dat.NoProgress(e)
		return e
	}
	waitAfter := func(e *dat.EVD, d time.Duration) {
		t.Helper()
		tm := time.AfterFunc(d, func() { e.PostSE(nil) })
		defer tm.Stop()
		ev, _, err := e.Wait(dat.TimeoutOf(eventWait), 1)
		require.NoError(t, err)
		require.Equal(t, dat.SoftwareEvent, ev.Number)
	}
	warm := func(e *dat.EVD) {
		t.Helper()
		for range dat.WarmUp {
			waitAfter(e, spin/2) // sleeps at once, ends soon
		}
	}
	first := fresh()
	waitAfter(first, 6*spin) // before its warm-up: sleeps at once
	require.Zero(t, first.SpinBackoff(), "a fresh EVD spins only once its waits show a busy exchange")
	warm(first)
	waitAfter(first, 6*spin) // its first spin runs out
	require.Equal(t, uint32(1), first.SpinBackoff())
	require.Equal(t, uint32(1), dat.FreshSpinBackoff(p.ia), "after a first spin that ran out")

	second := fresh()
	warm(second)
	waitAfter(second, spin/2) // sleeps at once: the IA's back-off
	require.Equal(t, uint32(1), dat.FreshSpinBackoff(p.ia), "a wait that did not spin teaches nothing")
	waitAfter(second, spin/2) // its first spin, which catches the event
	require.Zero(t, dat.FreshSpinBackoff(p.ia), "after a first spin that paid")
	require.Zero(t, second.SpinBackoff())

	// The first EVD has spun: its own back-off (1) decides, and a short
	// wait ends it (the activeSpans rule), whatever the IA's.
	waitAfter(first, spin/2)
	require.Zero(t, first.SpinBackoff())
}

// TestNoSpinWithoutCQ: an EVD that takes no DTO completions (connection
// requests, software events) sleeps at once under PollAdaptive, whatever
// the provider advises: a wait far longer than the spin leaves no
// back-off behind, as a spin that ran out would.
func TestNoSpinWithoutCQ(t *testing.T) {
	const spin = 20 * time.Millisecond
	p := pollSide(t, dat.PollPolicy{Mode: dat.PollAdaptive, Spin: spin})
	dat.SetSpinAdvice(p.ia, time.Millisecond)
	e, err := p.ia.CreateEVD(64, dat.EVDCR|dat.EVDSoftware)
	require.NoError(t, err)
	t.Cleanup(func() { e.Free() })
	tm := time.AfterFunc(6*spin, func() { e.PostSE(nil) })
	defer tm.Stop()
	ev, _, err := e.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err)
	require.Equal(t, dat.SoftwareEvent, ev.Number)
	require.Zero(t, e.SpinBackoff())
	require.Zero(t, dat.FreshSpinBackoff(p.ia))
}
