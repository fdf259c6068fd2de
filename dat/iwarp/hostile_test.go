package iwarp_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// hostileTimeout is the shortened req_timeout of the hostile-peer tests.
const hostileTimeout = 300 * time.Millisecond

// TestHostileInitiators throws malformed or silent initiators at one
// listener. Each must be dropped (or, for markers, refused with R) without
// ever reaching Accept, and the listener must still serve a normal
// connection afterwards.
func TestHostileInitiators(t *testing.T) {
	leakCheck(t)
	ia := openIA(t, "req_timeout="+hostileTimeout.String())
	l := listen(t, ia, driver.ListenConfig{})

	garbage := make([]byte, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	huge := mpaFrame(keyReq, flagE, 2, nil)
	huge[18], huge[19] = 0xFF, 0xFF

	drops := []struct {
		name  string
		send  []byte
		close bool // half-close after sending
		wait  time.Duration
	}{
		{"wrong key", mpaFrame(keyRep, flagE, 2, v2Block(1, 1)), false, time.Second},
		{"revision 3", mpaFrame(keyReq, flagE, 3, v2Block(1, 1)), false, time.Second},
		{"PD_Length 0xFFFF", append(huge, make([]byte, 64)...), false, time.Second},
		{"PD_Length 257", mpaFrame(keyReq, flagE, 2, make([]byte, 257)), false, time.Second},
		{"253 consumer bytes without v2 block", mpaFrame(keyReq, 0, 1, make([]byte, 253)), false, time.Second},
		{"truncated header then close", mpaFrame(keyReq, flagE, 2, nil)[:10], true, time.Second},
		{"truncated private data then close", mpaFrame(keyReq, flagE, 2, v2Block(1, 1))[:22], true, time.Second},
		{"truncated header then silence", mpaFrame(keyReq, flagE, 2, nil)[:10], false, hostileTimeout + 2*time.Second},
		{"random garbage", garbage, false, time.Second},
		{"connect and send nothing", nil, false, hostileTimeout + 2*time.Second},
	}
	for _, tc := range drops {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, l.Addr())
			if len(tc.send) > 0 {
				if _, err := c.Write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			if tc.close {
				c.CloseWrite()
			}
			start := time.Now()
			expectDropped(t, c, tc.wait)
			if tc.wait > time.Second && time.Since(start) < hostileTimeout/2 {
				t.Fatalf("silent peer dropped after %v, before the request timeout", time.Since(start))
			}
		})
	}

	refusals := []struct {
		name      string
		send      []byte
		wantFlags byte
		wantPD    []byte
	}{
		// siw: markers unsupported ⇒ Reply with R, M cleared, then close.
		{"markers", mpaFrame(keyReq, flagM|flagC|flagE, 2, v2Block(1, 1)), flagR | flagC | flagE, v2Block(1, 1)},
		{"markers rev 1", mpaFrame(keyReq, flagM, 1, []byte("pd")), flagR, nil},
		// siw: E without room for the v2 block ⇒ Reply with R.
		{"E without v2 block", mpaFrame(keyReq, flagE, 2, nil), flagR, nil},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, l.Addr())
			c.SetDeadline(time.Now().Add(testTimeout))
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			f, err := readFrame(c)
			if err != nil {
				t.Fatalf("no reply: %v", err)
			}
			if f.key != keyRep || f.flags != tc.wantFlags || f.rev != tc.send[17] || !bytes.Equal(f.pd, tc.wantPD) {
				t.Fatalf("reply key %q flags %#x rev %d pd %x, want flags %#x pd %x",
					f.key, f.flags, f.rev, f.pd, tc.wantFlags, tc.wantPD)
			}
			expectDropped(t, c, time.Second)
		})
	}

	// Nothing reached Accept, and the listener still works.
	actx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r, err := l.Accept(actx); err == nil {
		t.Fatalf("a hostile request reached Accept: %v", r.Info().Remote)
	}
	ctx := testCtx(t)
	q := newQP(t, ia, defaultQPConfig, nil)
	resp := newQP(t, ia, defaultQPConfig, nil)
	ch := connectAsync(ctx, q, l.Addr(), []byte("still alive?"))
	if _, err := accept(t, ctx, l).Accept(ctx, resp, nil); err != nil {
		t.Fatal(err)
	}
	if res := waitConnect(t, ch); res.err != nil {
		t.Fatal(res.err)
	}
	waitHandshakes(t, l, 0)
}

// TestNoOverRead checks that the responder reads exactly the Request and
// leaves bytes behind it to the connection (they are the initiator's first
// FPDU), by sending the Request and a first FPDU (a zero-length Send) in
// one write.
func TestNoOverRead(t *testing.T) {
	leakCheck(t)
	ctx := testCtx(t)
	ia := openIA(t)
	l := listen(t, ia, driver.ListenConfig{})
	rec := newSink()
	q := newQP(t, ia, defaultQPConfig, rec)
	if err := q.PostRecv(driver.RecvWR{ID: 7}); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, l.Addr())
	f := wire.FPDU{Header: wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}}
	fpdu, _ := f.Append(nil, false)
	c.Write(append(mpaFrame(keyReq, flagE, 2, append(v2Block(1, 1), "pd"...)), fpdu...))
	r := accept(t, ctx, l)
	if string(r.Info().PrivateData) != "pd" {
		t.Fatalf("private data %q", r.Info().PrivateData)
	}
	if _, err := r.Accept(ctx, q, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(c); err != nil {
		t.Fatal(err)
	}
	// The trailing FPDU reached the QP's reader: it opened the
	// responder's startup gate and completed the receive.
	select {
	case <-iwarp.QPCanSend(q):
	case <-time.After(testTimeout):
		t.Fatal("responder's startup gate still closed after the initiator's first bytes")
	}
	c.Close()
	// The QP's reader consumed the trailing FPDU and then saw the close.
	if err := rec.waitDisconnected(t); err != nil {
		t.Fatalf("OnDisconnect(%v), want nil", err)
	}
	if c, ok := rec.poll(t); !ok || c.WRID != 7 || c.Status != driver.StatusSuccess || c.Length != 0 {
		t.Fatalf("completion %+v (%v), want the receive completed with 0 bytes", c, ok)
	}
	rec.none(t, 0)
}
