package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/driver/drivertest"
	"github.com/rdmanet/rdmanet/dat/iwarp"
)

// The suite is only worth something if its checks fail on a provider that
// breaks the contract. These tests wrap the iwarp provider in a layer that
// breaks one rule at a time and check that the subtest for that rule fails
// (and passes without the fault). A failing subtest cannot be expected
// inside one test binary, so each case runs TestFaultyProvider in a child
// process of this test binary.

const faultEnv = "DRIVERTEST_FAULT"

// faultCases names each fault and the subtests it must make fail.
var faultCases = []struct {
	fault string
	tests []string
}{
	{"dupCompletion", []string{"Data/SendRecv"}},
	{"wrongTag", []string{"Data/SendRecv"}},
	{"ignoreInterrupt", []string{"CQ/InterruptWakesWait", "CQ/PendingInterrupt"}},
	{"waitIgnoresQueue", []string{"CQ/WaitReturnsWhenQueued"}},
	{"doubleOnDisconnect", []string{"Teardown/PeerGracefulDisconnect"}},
	{"localOnDisconnect", []string{"Teardown/AbruptDisconnectQuiesces"}},
	{"completeAfterEnd", []string{"Teardown/AbruptDisconnectQuiesces"}},
	{"postAfterEndFails", []string{"Teardown/PostsAfterEndDropped"}},
	{"noPortInUse", []string{"Listen/PortInUse"}},
	{"rejectNotTyped", []string{"Connect/RejectWithPrivateData"}},
	{"leakOnClose", []string{"Connect/AtMostOnce"}},
}

func TestFaultsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	var all []string
	for _, fc := range faultCases {
		all = append(all, fc.tests...)
	}
	out, err := runChild(t, "none", all)
	for _, s := range all {
		require.True(t, err == nil && strings.Contains(out, "--- PASS: TestFaultyProvider/"+s+" "),
			"%s does not pass without a fault:\n%s", s, out)
	}
	for _, fc := range faultCases {
		t.Run(fc.fault, func(t *testing.T) {
			out, err := runChild(t, fc.fault, fc.tests)
			for _, s := range fc.tests {
				require.True(t, err != nil && strings.Contains(out, "--- FAIL: TestFaultyProvider/"+s+" "),
					"%s did not catch fault %s:\n%s", s, fc.fault, out)
			}
		})
	}
}

// runChild runs the subtests named Group/Rule of TestFaultyProvider with
// the fault, in a child process. Its -test.run pattern may select a few
// more subtests (every listed rule in every listed group), which is
// harmless.
func runChild(t *testing.T, fault string, tests []string) (string, error) {
	t.Helper()
	var groups, rules []string
	for _, s := range tests {
		g, r, _ := strings.Cut(s, "/")
		groups, rules = append(groups, g), append(rules, r)
	}
	pat := fmt.Sprintf("^TestFaultyProvider$/^(%s)$/^(%s)$", strings.Join(groups, "|"), strings.Join(rules, "|"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pat, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), faultEnv+"="+fault)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFaultyProvider runs the suite on the faulty iwarp wrapper; only the
// child processes of TestFaultsAreCaught run it.
func TestFaultyProvider(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		t.Skip("run by TestFaultsAreCaught")
	}
	open := func(ctx context.Context) (driver.IA, error) {
		ia, err := iwarp.Driver{}.Open(ctx, []string{"127.0.0.1"})
		if err != nil {
			return nil, err
		}
		return &fIA{IA: ia, fault: fault}, nil
	}
	drivertest.Run(t, drivertest.Config{OpenPassive: open, OpenActive: open})
}

// fIA wraps an IA, its CQs, QPs and listeners, and breaks one rule.
type fIA struct {
	driver.IA
	fault string
}

func (ia *fIA) CreateCQ(cfg driver.CQConfig) (driver.CQ, error) {
	cq, err := ia.IA.CreateCQ(cfg)
	if err != nil {
		return nil, err
	}
	return &fCQ{CQ: cq, fault: ia.fault}, nil
}

func unwrapCQ(cq driver.CQ) driver.CQ {
	if f, ok := cq.(*fCQ); ok {
		return f.CQ
	}
	return cq
}

func (ia *fIA) CreateQP(cfg driver.QPConfig) (driver.QP, error) {
	q := &fQP{fault: ia.fault, scq: cfg.SendCQ, rcq: cfg.RecvCQ, tag: cfg.Tag}
	cfg.SendCQ, cfg.RecvCQ = unwrapCQ(cfg.SendCQ), unwrapCQ(cfg.RecvCQ)
	if on := cfg.OnDisconnect; on != nil {
		q.onDisc = on
		cfg.OnDisconnect = func(err error) {
			on(err)
			if ia.fault == "doubleOnDisconnect" {
				on(err)
			}
		}
	}
	qp, err := ia.IA.CreateQP(cfg)
	if err != nil {
		return nil, err
	}
	q.QP = qp
	return q, nil
}

func (ia *fIA) Listen(cfg driver.ListenConfig) (driver.Listener, error) {
	l, err := ia.IA.Listen(cfg)
	if err != nil {
		if ia.fault == "noPortInUse" {
			return nil, errors.New(err.Error())
		}
		return nil, err
	}
	return fListener{l}, nil
}

type fListener struct{ driver.Listener }

func (l fListener) Accept(ctx context.Context) (driver.Request, error) {
	r, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return fRequest{r}, nil
}

type fRequest struct{ driver.Request }

func (r fRequest) Accept(ctx context.Context, qp driver.QP, pdata []byte) (driver.ConnectResult, error) {
	if f, ok := qp.(*fQP); ok {
		qp = f.QP
	}
	return r.Request.Accept(ctx, qp, pdata)
}

type fCQ struct {
	driver.CQ
	fault string

	mu       sync.Mutex
	injected []driver.Completion
}

func (cq *fCQ) inject(c driver.Completion) {
	cq.mu.Lock()
	cq.injected = append(cq.injected, c)
	cq.mu.Unlock()
}

func (cq *fCQ) Poll(dst []driver.Completion) int {
	cq.mu.Lock()
	n := copy(dst, cq.injected)
	cq.injected = cq.injected[n:]
	cq.mu.Unlock()
	n += cq.CQ.Poll(dst[n:])
	switch cq.fault {
	case "dupCompletion":
		if n > 0 && n < len(dst) {
			dst[n] = dst[n-1]
			n++
		}
	case "wrongTag":
		for i := range dst[:n] {
			dst[i].QPTag++
		}
	}
	return n
}

func (cq *fCQ) Wait(deadline time.Time) error {
	if cq.fault == "waitIgnoresQueue" && !deadline.IsZero() {
		time.Sleep(time.Until(deadline))
		return nil
	}
	return cq.CQ.Wait(deadline)
}

func (cq *fCQ) Interrupt() {
	if cq.fault != "ignoreInterrupt" {
		cq.CQ.Interrupt()
	}
}

type fQP struct {
	driver.QP
	fault    string
	scq, rcq driver.CQ
	tag      uint32
	onDisc   func(error)

	mu    sync.Mutex
	recvs []uint64
	ended bool
}

func (q *fQP) PostRecv(wr driver.RecvWR) error {
	q.mu.Lock()
	q.recvs = append(q.recvs, wr.ID)
	ended := q.ended
	q.mu.Unlock()
	if ended && q.fault == "postAfterEndFails" {
		return fmt.Errorf("posted after the end: %w", driver.ErrNotConnected)
	}
	return q.QP.PostRecv(wr)
}

func (q *fQP) Disconnect(graceful bool) error {
	err := q.QP.Disconnect(graceful)
	q.mu.Lock()
	q.ended = true
	ids := q.recvs
	q.mu.Unlock()
	switch q.fault {
	case "localOnDisconnect":
		if q.onDisc != nil {
			q.onDisc(nil)
		}
	case "completeAfterEnd":
		// A completion for the oldest receive, late.
		if cq, ok := q.rcq.(*fCQ); ok && len(ids) > 0 {
			time.AfterFunc(20*time.Millisecond, func() {
				cq.inject(driver.Completion{WRID: ids[len(ids)-1], QPTag: q.tag, Op: driver.OpRecv, Status: driver.StatusFlushed})
			})
		}
	}
	return err
}

func (q *fQP) Connect(ctx context.Context, remote net.Addr, pdata []byte) (driver.ConnectResult, error) {
	res, err := q.QP.Connect(ctx, remote, pdata)
	var rej *driver.RejectError
	if q.fault == "rejectNotTyped" && errors.As(err, &rej) {
		err = errors.New(err.Error())
	}
	return res, err
}

// leaked is never closed: the goroutine leakOnClose starts stays.
var leaked = make(chan struct{})

func (q *fQP) Close() error {
	if q.fault == "leakOnClose" {
		go func() { <-leaked }()
	}
	return q.QP.Close()
}
